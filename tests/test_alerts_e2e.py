"""onLate, onStuck and onStale with real processes and real reporters.

* One daemon core (``build_daemon`` in-process, tests/web_stack.py), its jobs real
  shell processes, its reports a real shell command (appending its environment to a
  file) and a real webhook receiver: a run that overruns ``expectedDuration`` is
  reported stuck once, a job that keeps failing is reported stale once, and fires
  that wait behind a run (``BufferOne``) past their ``grace`` are reported late,
  each once; ``/metrics`` counts them.
* Two real daemons on a real etcd (the cluster and the shared state store): a
  ``Leader`` job's fires wait behind its runs on the leader; both nodes judge every
  fire, and each late fire is reported once between them, also after the leader is
  killed with SIGKILL and the other node takes over.
"""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from backends import StateBackend
from daemon_proc import DaemonProcess, stop_all, until, wait_for
from report_servers import http_receiver
from web_stack import Stack

pytestmark = pytest.mark.timeout(90)

TOKEN = {"Authorization": "Bearer t0ken"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def metrics(url: str) -> str:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(f"{url}/metrics", headers=TOKEN) as response,
    ):
        return await response.text()


def sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return None


@pytest.mark.asyncio
async def test_stuck_stale_and_late_are_reported_once_each(stack: Stack, tmp_path: Path) -> None:
    async with http_receiver() as hook:
        text = textwrap.dedent(
            f"""\
            web:
              listen: [http://127.0.0.1:0]
              authToken: {{value: t0ken}}
            defaults:
              shell: /bin/bash
              killTimeout: 1
            jobs:
              - name: crawl
                schedule: "*/4 * * * * * *"
                concurrencyPolicy: Forbid
                command: sleep 2.5
                onStuck:
                  expectedDuration: 1s
                  report:
                    shell:
                      command: >-
                        echo "$CRONSTABLE_MOMENT $CRONSTABLE_RUN_ID $CRONSTABLE_THRESHOLD"
                        >> {tmp_path}/stuck
              - name: flaky
                schedule: "* * * * * * *"
                command: exit 1
                onStale:
                  maxSuccessAge: 2s
                  report: {{webhook: {{url: "{hook.url("/stale")}"}}}}
              - name: slow
                schedule: "* * * * * * *"
                concurrencyPolicy: BufferOne
                command: sleep 2.5
                onLate:
                  grace: 1s
                  rateLimit: 0
                  report:
                    shell:
                      command: >-
                        echo "$CRONSTABLE_MOMENT $CRONSTABLE_SCHEDULED_TIME
                        $CRONSTABLE_PLANNED_START $CRONSTABLE_GRACE" >> {tmp_path}/late
            """
        )
        assert (await stack.apply(text)).outcome == "applied"
        url = stack.url()
        await until(lambda: len(lines(tmp_path / "stuck")) >= 2, 30, "two runs reported stuck")
        await until(lambda: len(lines(tmp_path / "late")) >= 2, 30, "two fires reported late")
        [stale] = await hook.wait_for(1)
        seen = await metrics(url)
        await asyncio.sleep(2.5)  # a second stale report would come within this
        assert len(hook.requests) == 1
    stuck = lines(tmp_path / "stuck")
    assert all(moment == "stuck" and threshold == "1.0" for moment, _, threshold in stuck)
    ids = [run for _, run, _ in stuck]
    assert len(ids) == len(set(ids)) and all(run.startswith("crawl@") for run in ids)
    body: dict[str, Any] = json.loads(stale.body)
    assert (body["job"], body["moment"], body["reason"]) == ("flaky", "stale", "stale")
    assert body["lastSuccess"] is None and body["maxSuccessAge"] == 2.0
    assert "is stale: no success for" in body["message"]
    late = lines(tmp_path / "late")
    fires = [fire for _, fire, _, _ in late]
    assert all(moment == "late" and grace == "1.0" for moment, _, _, grace in late)
    assert len(fires) == len(set(fires))  # each late fire once
    assert (sample(seen, 'cronstable_fires_late_total{job="slow"}') or 0) >= 2
    assert (sample(seen, 'cronstable_job_stuck_total{job="crawl"}') or 0) >= 2
    assert sample(seen, 'cronstable_job_stale{job="flaky"}') == 1.0
    assert sample(seen, 'cronstable_job_stale_alerts_total{job="flaky"}') == 1.0


# ------------------------------------------------------------ two daemons, one etcd

REPORT = 'echo "$CRONSTABLE_NODE_NAME $CRONSTABLE_MOMENT $CRONSTABLE_SCHEDULED_TIME" >> "$LATE"'


@pytest.fixture
def pair(state_backend: StateBackend, tmp_path: Path) -> Iterator[dict[str, DaemonProcess]]:
    assert state_backend.server is not None
    etcd = f'{{endpoints: ["{state_backend.server.endpoint}"], prefix: "{state_backend.prefix}"}}'
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(
        textwrap.dedent(
            f"""\
            cluster:
              backend: etcd
              leaseTtl: 2
              etcd: {etcd}
            state: {{backend: etcd}}
            jobs:
              - name: report
                schedule: "*/2 * * * * * *"
                clusterPolicy: Leader
                concurrencyPolicy: BufferOne
                command: sleep 3
                onLate:
                  grace: 1s
                  rateLimit: 0
                  report: {{shell: {{command: '{REPORT}'}}}}
            """
        )
    )
    daemons = {
        name: DaemonProcess(
            config,
            tmp_path / f"{name}.log",
            args=["--node-name", name],
            env=os.environ | {"CRONSTABLE_NODE_NAME": name, "LATE": str(tmp_path / "late")},
        )
        for name in ("n1", "n2")
    }
    try:
        yield daemons
    finally:
        stop_all(list(daemons.values()), signals=2, timeout=15)


def leader_of(daemons: dict[str, DaemonProcess]) -> str:
    for name, daemon in daemons.items():
        if "is the leader" in daemon.output() or "became the leader" in daemon.output():
            return name
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("state_backend", ["etcd"], indirect=True)
def test_a_late_fire_is_reported_once_across_two_daemons(
    pair: dict[str, DaemonProcess], tmp_path: Path
) -> None:
    for daemon in pair.values():
        daemon.start()
    late = tmp_path / "late"
    # every fire waits behind the run before it (runs last 3 s, fires come every 2 s):
    # both nodes judge each one, one of them reports it
    wait_for(lambda: len(lines(late)) >= 3, 60, "three late fires reported")
    ran = [n for n in pair if "Job report started" in pair[n].output()]
    assert len(ran) == 1, ran
    leader = ran[0]
    other = "n2" if leader == "n1" else "n1"
    before = len(lines(late))
    pair[leader].kill9()  # its fires go unstarted until the other node leads
    wait_for(
        lambda: any(n == other for n, _, _ in lines(late)[before:]), 60, "the other node reports"
    )
    wait_for(lambda: "Job report started" in pair[other].output(), 60, "the other node runs it")
    stop_all([pair[other]], timeout=15)
    reported = lines(late)
    fires = [fire for _, _, fire in reported]
    assert len(fires) == len(set(fires)), reported  # once per fire across the cluster
    assert all(moment == "late" for _, moment, _ in reported)
    assert {node for node, _, _ in reported} <= {"n1", "n2"}
    logs = pair["n1"].output() + pair["n2"].output()
    assert "Traceback" not in logs
