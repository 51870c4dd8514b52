"""The systemd unit in packaging/systemd/: its paths are the daemon's defaults, its
stop leaves the jobs to the daemon, and ``systemd-analyze verify`` accepts it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cronstable import platform
from cronstable.sources.factory import default_cache_dir

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "packaging" / "systemd" / "cronstable.service"
INSTALLED = "/usr/local/bin/cronstable"


def directives(text: str) -> dict[str, list[str]]:
    """``KEY`` → its values, in order, across the sections (comments left out)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


@pytest.fixture
def unit() -> dict[str, list[str]]:
    return directives(UNIT.read_text())


def test_the_unit_speaks_notify_and_reloads_with_sighup(unit: dict[str, list[str]]) -> None:
    assert unit["Type"] == ["notify"]
    assert unit["NotifyAccess"] == ["main"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert unit["WatchdogSec"] and unit["Restart"] == ["on-failure"]
    # the daemon stops its jobs' process groups itself; systemd only SIGKILLs leftovers
    assert unit["KillMode"] == ["mixed"]
    for hardening in ("ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        key, value = hardening.split("=")
        assert unit[key] == [value]


def test_the_unit_paths_are_the_daemons_defaults_as_root(
    unit: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (exec_start,) = unit["ExecStart"]
    argv = exec_start.split()
    assert argv[:2] == [INSTALLED, "run"]
    assert argv[-1] == platform.DEFAULT_CONFIG_PATH
    assert argv[argv.index("--state-dir") + 1] == "${STATE_DIRECTORY}"
    assert argv[argv.index("--cache-dir") + 1] == "${CACHE_DIRECTORY}"
    # StateDirectory=N is /var/lib/N, CacheDirectory= /var/cache/N, RuntimeDirectory= /run/N
    assert f"/var/lib/{unit['StateDirectory'][0]}" == platform.default_state_dir()
    assert f"/var/cache/{unit['CacheDirectory'][0]}" == str(default_cache_dir())
    assert f"/run/{unit['RuntimeDirectory'][0]}" == os.path.dirname(platform.ROOT_API_SOCKET)
    assert "User" not in unit  # per-job users need root


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    # verify checks that ExecStart= exists: point it at this environment's console script
    script = Path(sys.executable).parent / "cronstable"
    assert script.exists(), script
    copy = tmp_path / "cronstable.service"
    copy.write_text(UNIT.read_text().replace(INSTALLED, str(script)))
    done = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    # unknown keys and unparsable values are only warnings: none may name the unit
    assert "cronstable.service" not in said, said
