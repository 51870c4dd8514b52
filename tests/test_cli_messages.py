"""Messages a new user meets first: each says what is wrong once, and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_server import free_port

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


@pytest.mark.skipif(os.path.exists("/etc/cronstable.d"), reason="this machine has a config")
def test_bare_cronstable_without_a_config_says_how_to_start() -> None:
    result = cli()
    assert result.returncode == 2
    assert "no configuration at /etc/cronstable.d" in result.stderr
    assert "cronstable run PATH" in result.stderr
    assert "cronstable --help" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("scheme", ["https", "http", "ssh"])
def test_a_git_url_without_git_plus_suggests_it(scheme: str, tmp_path: Path) -> None:
    url = f"{scheme}://example.invalid/team/cron.git"
    for args in (["run", "--cache-dir", str(tmp_path), url], ["validate", url], ["diff", url, "."]):
        result = cli(*args)
        assert result.returncode != 0
        assert f"unknown source scheme '{scheme}'" in result.stderr
        assert f"write git+{url}" in result.stderr, result.stderr


def test_cannot_start_names_the_source_once(tmp_path: Path) -> None:
    spec = f"git://127.0.0.1:{free_port()}/cron.git"
    result = cli("run", "--cache-dir", str(tmp_path), spec)
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if "Cannot start from" in line]
    assert line.count("git://127.0.0.1") == 2, line  # the source, and the URL git fetched
    assert f"Cannot start from {spec}: cannot fetch {spec}: " in line
    assert f"none was applied with the cache directory {tmp_path}" in line


@pytest.mark.parametrize("command", ["validate", "next", "job-set-id", "diff"])
def test_an_unreachable_etcd_says_why_and_nothing_about_a_cache(command: str) -> None:
    # one-shot commands have no cache: "no snapshot is cached" only puzzled
    spec = f"etcd://127.0.0.1:{free_port()}/cron/"
    args = [command, spec] + ([str(REPO / "examples" / "gitops-repo")] if command == "diff" else [])
    result = cli(*args)
    assert result.returncode == 2 if command == "diff" else result.returncode != 0
    assert result.stderr.startswith(f"cronstable {command}: {spec}: "), result.stderr
    assert "cannot connect to 127.0.0.1" in result.stderr
    assert "cache" not in result.stderr, result.stderr


def test_diff_of_an_unreachable_remote_says_why_and_nothing_about_a_cache(tmp_path: Path) -> None:
    spec = f"git://127.0.0.1:{free_port()}/cron.git"
    result = cli("diff", spec, str(REPO / "examples" / "gitops-repo"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"cronstable diff: {spec}: cannot fetch {spec}: ")
    assert "cache" not in result.stderr
    assert "applied" not in result.stderr
