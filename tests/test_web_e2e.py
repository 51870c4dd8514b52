"""End to end: `cronstable run` serves its HTTP API; a job started over HTTP runs, is recorded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {name: ci, fromEnvVar: CI_TOKEN, scopes: [read, trigger]}
jobs:
  - name: greet
    command: echo hello from the api
    schedule: "@yearly"
    enabled: false
    captureStdout: true
"""


def request(url: str, method: str = "GET", token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_daemon_serves_the_api_and_runs_a_job_started_over_http(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "cronstable.yaml").write_text(CONFIG)
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cronstable", "run", "-c", str(tmp_path / "conf")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"CI_TOKEN": "t0ken"},
        )
        try:
            deadline = time.monotonic() + 20
            url = None
            while url is None and time.monotonic() < deadline:
                found = re.search(r"HTTP API listening on (http://\S+)", log.read_text())
                url = found[1] if found else None
                time.sleep(0.05)
            assert url is not None, log.read_text()
            assert request(f"{url}/readyz") == (200, {"ready": True})
            assert request(f"{url}/status", token="nope")[0] == 401
            status, body = request(f"{url}/jobs/greet/start", "POST", token="t0ken")
            assert status == 202
            while time.monotonic() < deadline:
                _, runs = request(f"{url}/jobs/greet/runs", token="t0ken")
                if runs["runs"] and runs["runs"][0]["outcome"] != "running":
                    break
                time.sleep(0.05)
            [run] = runs["runs"]
            assert (run["id"], run["outcome"], run["stdout"]) == (
                body["run"],
                "succeeded",
                "hello from the api",
            )
            assert "POST /jobs/{name}/start (job greet) by ci from 127.0.0.1" in log.read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
    with pytest.raises(OSError):
        request(f"{url}/healthz")
