"""``make run`` (the README's first command) runs the daemon until Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_run_runs_the_daemon_until_ctrl_c(tmp_path: Path) -> None:
    # the Makefile's own recipe, with $(BIN)/cronstable running this checkout and the
    # install steps (the stamp, the exec shim's build) left alone
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "cronstable"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m cronstable "$@"\n')
    shim.chmod(0o755)
    # the example as it is, but its HTTP API on a free port: 8080 may be taken on this
    # machine (another daemon, a `make run` in another terminal), which would only make
    # the daemon refuse the revision and exit 1, as it does for any port in use
    example = tmp_path / "gitops-repo"
    shutil.copytree(REPO / "examples" / "gitops-repo", example)
    root_file = example / "cronstable.yaml"
    text = root_file.read_text()
    assert "- http://127.0.0.1:8080\n" in text
    root_file.write_text(text.replace("- http://127.0.0.1:8080\n", "- http://127.0.0.1:0\n"))
    make = subprocess.Popen(
        ["make", "--no-print-directory", "-o", ".venv/.installed-stamp"]
        + ["-o", "cronstable/runtime/shim/cronstable-exec", "run"]
        + [f"BIN={bin_dir}", f"EXAMPLE={example}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    lines: list[str] = []
    applied = threading.Event()

    def read() -> None:
        assert make.stdout is not None
        for line in make.stdout:
            lines.append(line)
            if " applied in " in line:
                applied.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not applied.wait(0.1) and make.poll() is None and time.monotonic() < deadline:
            pass
        assert applied.is_set() and make.poll() is None, "".join(lines)
        daemons = _children(make.pid)
        assert len(daemons) == 1, daemons
        time.sleep(0.5)  # still running: make run is not a one-shot command
        assert make.poll() is None, "".join(lines)
        os.kill(daemons[0], signal.SIGINT)  # what Ctrl-C sends it
        status = make.wait(timeout=60)
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()
    reader.join(timeout=10)
    assert make.stdout is not None
    make.stdout.close()
    output = "".join(lines)
    assert f"cronstable run {example}" in output
    assert "INFO cronstable.web.section: HTTP API listening on http://127.0.0.1:" in output
    assert "INFO cronstable.runtime.daemon: Stopped" in output
    assert status == 0, output  # make exits 0 only when the daemon did
