"""``cronstable --third-party-licenses``: read from the installed metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from cronstable.cli.licenses import installed_dependencies, license_of, requirement_names


def distribution(tmp_path: Path, name: str, headers: str, body: str = "") -> metadata.Distribution:
    """A real distribution on disk (a ``.dist-info`` directory with its METADATA)."""
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    text = f"Metadata-Version: 2.4\nName: {name}\nVersion: 1.0\n{headers}"
    (info / "METADATA").write_text(text + (f"\n{body}" if body else ""))
    return metadata.PathDistribution(info)


def test_the_license_comes_from_the_expression_then_the_field_then_the_classifiers(
    tmp_path: Path,
) -> None:
    spdx = distribution(tmp_path, "a", "License-Expression: MIT OR Apache-2.0\nLicense: junk\n")
    assert license_of(spdx) == "MIT OR Apache-2.0"
    # a whole license text in the License field: its first line
    whole = distribution(
        tmp_path, "b", "License: BSD 3-Clause License\n        Copyright (c) someone\n"
    )
    assert license_of(whole) == "BSD 3-Clause License"
    classified = distribution(
        tmp_path,
        "c",
        "License: UNKNOWN\nClassifier: License :: OSI Approved :: MIT License\n"
        "Classifier: Programming Language :: Python\n",
    )
    assert license_of(classified) == "MIT License"
    assert license_of(distribution(tmp_path, "d", "")) == "UNKNOWN"


def test_requirements_of_an_extra_count_only_for_that_extra(tmp_path: Path) -> None:
    dist = distribution(
        tmp_path,
        "e",
        "Requires-Dist: pydantic>=2\n"
        'Requires-Dist: tzdata; sys_platform == "win32"\n'
        "Requires-Dist: uvloop>=0.19; sys_platform != 'win32' and extra == 'speedups'\n"
        'Requires-Dist: pytest>=8; extra == "dev"\n',
    )
    assert requirement_names(dist, frozenset()) == ["pydantic", "tzdata"]
    assert requirement_names(dist, frozenset({"speedups"})) == ["pydantic", "tzdata", "uvloop"]


def test_every_installed_dependency_is_printed_with_its_version_and_license() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cronstable", "--third-party-licenses"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0].lower(): line.split(None, 2) for line in done.stdout.splitlines()}
    # the direct dependencies, and theirs (aiohttp's multidict, pydantic's pydantic-core)
    for name in ("pydantic", "aiohttp", "pyyaml", "jinja2", "multidict", "pydantic_core"):
        assert name in rows, done.stdout
        _, version, license_text = rows[name]
        assert version == metadata.version(name)
        assert license_text and license_text != "UNKNOWN"
    # the test tools are no dependency of the daemon
    assert "pytest" not in rows and "mypy" not in rows
    assert len(rows) == len(installed_dependencies())
