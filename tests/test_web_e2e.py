"""End to end: `cronstable run` serves its HTTP API; a job started over HTTP runs, is recorded."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, wait_for

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


def test_daemon_serves_the_api_and_runs_a_job_started_over_http(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "cronstable.yaml").write_text(CONFIG)
    log = tmp_path / "daemon.log"
    daemon = DaemonProcess(
        None, log, args=["-c", str(tmp_path / "conf")], env=os.environ | {"CI_TOKEN": "t0ken"}
    )
    daemon_procs.append(daemon.start())
    try:
        url = daemon.url()
        assert request(f"{url}/readyz") == (200, {"ready": True})
        assert request(f"{url}/status", token="nope")[0] == 401
        status, body = request(f"{url}/jobs/greet/start", "POST", token="t0ken")
        assert status == 202

        def finished() -> list[dict[str, Any]] | None:
            _, runs = request(f"{url}/jobs/greet/runs", token="t0ken")
            done = runs["runs"] and runs["runs"][0]["outcome"] != "running"
            return runs["runs"] if done else None

        [run] = wait_for(finished, what="the run finished")
        assert (run["id"], run["outcome"], run["stdout"]) == (
            body["run"],
            "succeeded",
            "hello from the api",
        )
        assert "POST /jobs/{name}/start (job greet) by ci from 127.0.0.1" in log.read_text()
    finally:
        assert daemon.stop(20) == 0
    with pytest.raises(OSError):
        request(f"{url}/healthz")
