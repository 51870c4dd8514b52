"""Packaging facts: the wheel says MIT, carries the LICENSE and the exec shim, and builds
without warnings."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIM_NAME = "cronstable-exec"


def test_license_file_matches_the_metadata() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the cronstable authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


@pytest.mark.slow
def test_the_wheel_builds_without_warnings_and_carries_the_license(tmp_path: Path) -> None:
    # a copy, so the in-tree build leaves nothing in the checkout
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "cronstable",
        source / "cronstable",
        # not the exec shim built in this checkout: the wheel's build compiles its own
        ignore=shutil.ignore_patterns("__pycache__", SHIM_NAME),
    )
    out = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    assert "warning" not in output.lower(), output
    (wheel,) = out.glob("cronstable-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode()
        (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(license_file) == (REPO / "LICENSE").read_bytes()
        # the dashboard page is package data, read at run time
        assert "cronstable/web/dashboard.html" in names
        # the exec shim, compiled by the build (setup.py), executable once unpacked
        shim = archive.getinfo(f"cronstable/runtime/shim/{SHIM_NAME}")
        assert shim.external_attr >> 16 & 0o111 == 0o111
        assert f"cronstable/runtime/shim/{SHIM_NAME}.c" in names
        (wheel_info,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
        tags = archive.read(wheel_info).decode()
    # a compiled program inside: the wheel is for this platform (any Python 3)
    assert "Root-Is-Purelib: false\n" in tags
    assert f"Tag: py3-none-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}" in tags
    assert "License-Expression: MIT\n" in headers
    assert "License-File: LICENSE\n" in headers
