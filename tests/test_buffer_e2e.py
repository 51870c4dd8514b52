"""concurrencyPolicy BufferOne and BufferAll with real processes.

* One daemon core (``build_daemon`` in-process, tests/web_stack.py) and the real HTTP
  API: a job firing every second whose runs wait for a file the test creates, so the
  buffer fills while the first run is held; the test reads the buffer from
  ``/status``, the skips from ``/metrics``, and the order from the runs' own stamps
  (``CRONSTABLE_SCHEDULED_TIME``, bash's ``EPOCHREALTIME``).
* Two real daemons on a real etcd share a job with ``concurrencyScope: cluster`` and
  ``clusterPolicy: EveryNode`` (both fire every fire): the runs never overlap across
  the nodes, a fire on one node waits for the other node's run rather than being
  skipped, and no fire runs twice.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import DaemonProcess, stop_all, until, wait_for
from web_stack import Stack

from cronstable.cli.client import status_text

pytestmark = pytest.mark.timeout(90)

TOKEN = {"Authorization": "Bearer t0ken"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    (tmp_path / "go").touch()
    await s.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers=TOKEN) as response:
        assert response.status == 200, url
        text = await response.text()
        return json.loads(text) if response.content_type == "application/json" else text


def held_job(tmp: Path, policy: str, extra: str = "") -> str:
    """A job firing every second; each run stamps its start (with the fire it stands
    for), waits for TMP/go, and stamps its end."""
    return textwrap.dedent(
        f"""\
        web:
          listen: [http://127.0.0.1:0]
          authToken: {{value: t0ken}}
        jobs:
          - name: held
            shell: /bin/bash
            schedule: "* * * * * * *"
            concurrencyPolicy: {policy}
            killTimeout: 1
            command: >-
              echo "$EPOCHREALTIME start $CRONSTABLE_SCHEDULED_TIME" >> {tmp}/log;
              while [ ! -e {tmp}/go ]; do sleep 0.02; done;
              echo "$EPOCHREALTIME end $CRONSTABLE_SCHEDULED_TIME" >> {tmp}/log
        """
    ) + "".join(f"    {line}\n" for line in extra.splitlines() if line)


def stamps(tmp: Path) -> list[tuple[float, str, str]]:
    path = tmp / "log"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        at, what, fire = line.split()
        found.append((float(at), what, fire))
    return found


def utc(fire: str) -> str:
    """A CRONSTABLE_SCHEDULED_TIME (UTC, the job's zone) as the API writes times."""
    return fire.replace("+00:00", "Z")


def never_two_at_once(events: list[tuple[float, str, str]]) -> bool:
    going = 0
    for _, what, _ in sorted(events):
        going += 1 if what == "start" else -1
        if going > 1:
            return False
    return True


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.asyncio
@pytest.mark.parametrize(("policy", "bound"), [("BufferOne", 1), ("BufferAll", 3)])
async def test_buffered_fires_run_in_order_after_the_held_run(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path, policy: str, bound: int
) -> None:
    text = held_job(tmp_path, policy, "bufferLimit: 3" if policy == "BufferAll" else "")
    assert (await stack.apply(text)).outcome == "applied"
    url = stack.url()

    async def full() -> list[str] | None:
        [job] = (await get(http, f"{url}/status"))["jobs"]
        skipped = metric(
            await get(http, f"{url}/metrics"),
            'cronstable_fires_skipped_total{reason="buffer_full"}',
        )
        return job["buffered"] if len(job["buffered"]) == bound and skipped >= 1 else None

    # the first run is held; the fires after it wait until the buffer is full, then skip
    waiting = await until(full, timeout=30, what=f"{bound} fires buffered and one skipped")
    [first] = [fire for _, what, fire in stamps(tmp_path) if what == "start"]
    metrics = await get(http, f"{url}/metrics")
    assert f'cronstable_job_fires_buffered{{job="held"}} {float(bound)}' in metrics
    assert metric(metrics, "cronstable_fires_buffered_total") >= bound
    assert f"({bound} buffered)" in status_text(await get(http, f"{url}/status"))  # the CLI
    (tmp_path / "go").touch()  # every run ends at once from now on
    await until(
        lambda: len([s for s in stamps(tmp_path) if s[1] == "end"]) >= bound + 2,
        timeout=30,
        what="the buffered runs and one more",
    )
    events = stamps(tmp_path)
    assert never_two_at_once(events)
    fires = [utc(fire) for _, what, fire in events if what == "start"]
    # the held run, then exactly the fires that waited, in their order
    assert fires[0] == utc(first) and fires[1 : bound + 1] == waiting
    assert fires == sorted(fires)


# ------------------------------------------------------------ two daemons, one etcd

STAMP = 'echo "$CRONSTABLE_NODE_NAME {what} $EPOCHREALTIME $CRONSTABLE_SCHEDULED_TIME" >> "$RUNS"'


@pytest.fixture
def pair(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[dict[str, DaemonProcess]]:
    config = tmp_path / "config"
    config.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(f"{STAMP.format(what='start')}\nsleep 2.2\n{STAMP.format(what='end')}\n")
    (config / "cronstable.yaml").write_text(
        cluster_backend.yaml(2)
        + textwrap.dedent(
            f"""\
            jobs:
              - name: report
                command: exec bash {script}
                schedule: "*/2 * * * * * *"
                clusterPolicy: EveryNode
                concurrencyPolicy: BufferOne
                concurrencyScope: cluster
            """
        )
    )
    daemons = {
        name: DaemonProcess(
            config,
            tmp_path / f"{name}.log",
            args=["--node-name", name],
            env=os.environ | {"CRONSTABLE_NODE_NAME": name, "RUNS": str(tmp_path / "runs")},
        )
        for name in ("n1", "n2")
    }
    try:
        yield daemons
    finally:
        stop_all(list(daemons.values()), signals=2, timeout=15)


def cluster_runs(path: Path) -> list[tuple[str, float, float | None, str]]:
    """(node, start, end or None, fire) of every run, by start."""
    if not path.exists():
        return []
    going: dict[str, tuple[float, str]] = {}
    done: list[tuple[str, float, float | None, str]] = []
    for line in path.read_text().splitlines():
        node, what, when, fire = line.split()
        if what == "start":
            going[node] = (float(when), fire)
        elif node in going:
            start, fire = going.pop(node)
            done.append((node, start, float(when), fire))
    done += [(node, start, None, fire) for node, (start, fire) in going.items()]
    return sorted(done, key=lambda run: run[1])


@pytest.mark.slow
@pytest.mark.parametrize("cluster_backend", ["etcd"], indirect=True)
def test_buffer_one_holds_across_two_daemons(
    pair: dict[str, DaemonProcess], tmp_path: Path
) -> None:
    for daemon in pair.values():
        daemon.start()
    path = tmp_path / "runs"

    def finished() -> list[tuple[str, float, float | None, str]]:
        return [run for run in cluster_runs(path) if run[2] is not None]

    wait_for(lambda: len(finished()) >= 3, timeout=60)
    # the node running the fires stops (its run ends first); the other one takes over
    first = finished()[0][0]
    other = "n2" if first == "n1" else "n1"
    pair[first].stop(timeout=15)
    wait_for(lambda: len([r for r in finished() if r[0] == other]) >= 2, timeout=60)
    logs = pair["n1"].output() + pair["n2"].output()
    stop_all(list(pair.values()), signals=1, timeout=15)
    runs = cluster_runs(path)
    # never two runs at once in the cluster
    for before, after in zip(runs, runs[1:], strict=False):
        assert before[2] is not None and after[1] >= before[2], (before, after)
    # every fire ran at most once, whichever node ran it
    fires = [fire for _, _, _, fire in runs]
    assert len(fires) == len(set(fires)), fires
    # fires waited for the run going (each lasts longer than the period), not skipped:
    # one run's fire follows the one before it by a period
    assert "waits for node" in logs, logs[-3000:]
    assert "Traceback" not in logs
