"""What durable state costs: the record written before a launch, and the restore.

    .venv/bin/python bench/bench_state.py [LAUNCHES]

* **Launch overhead.**  A job with ``startingDeadlineSeconds`` has its last fire
  written (and the write confirmed) before each launch; a retry's launch settles
  its record first.  LAUNCHES (default 500) admissions through the keeper, on a
  state directory and on a real etcd on loopback, against the floor: the same
  admissions with no state section (the keeper returns at once).
* **Restore.**  A store holding records for 1,000 jobs (a last fire, a settled
  retry and a 20-run history each) is read and restored into a scheduler, as a
  daemon's first commit does; reported as the time of the read and the restore.

No peer cron keeps such state (yacron keeps none), so the ratios are against
the stateless floor measured in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from etcd_server import EtcdServer  # noqa: E402

from cronstable.config import MemoryTree, load  # noqa: E402
from cronstable.ports import Launch, utc_text  # noqa: E402
from cronstable.runtime.clock import ManualClock  # noqa: E402
from cronstable.runtime.history import RunHistory  # noqa: E402
from cronstable.runtime.scheduler import Scheduler  # noqa: E402
from cronstable.state.base import StateStore, node_key  # noqa: E402
from cronstable.state.etcd import EtcdStore  # noqa: E402
from cronstable.state.filesystem import FilesystemStore  # noqa: E402
from cronstable.state.keeper import StateKeeper  # noqa: E402

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def table(count: int) -> dict[str, object]:
    jobs = "".join(
        f'  - {{name: job{n}, command: "true", schedule: "*/5 * * * *", '
        f"startingDeadlineSeconds: 600}}\n"
        for n in range(count)
    )
    return dict(load(MemoryTree({"c.yaml": ("jobs:\n" + jobs).encode()}), "c.yaml").jobs)


def never(*_: object) -> object:
    raise AssertionError("no run is spawned here")


async def admissions(store: StateStore | None, launches: int) -> list[float]:
    jobs = table(1)
    scheduler = Scheduler(ManualClock(T0), never)  # type: ignore[arg-type]
    scheduler.replace_jobs(jobs)  # type: ignore[arg-type]
    keeper = StateKeeper("bench", lambda: scheduler, RunHistory(), boot="b")
    if store is not None:
        keeper.use(store)
    job = next(iter(jobs.values()))
    took = []
    for n in range(launches):
        launch = Launch(job, T0 + timedelta(minutes=5 * n), 1, "fire")  # type: ignore[arg-type]
        began = time.perf_counter()
        keeper.fire_handled(job, launch.scheduled)  # type: ignore[arg-type]
        assert await keeper.admit(launch) is None
        took.append(time.perf_counter() - began)
    await keeper.close()
    return took


async def restore(store: StateStore, count: int) -> tuple[float, float]:
    jobs = table(count)
    run = {
        "id": "x",
        "job": "x",
        "scheduledTime": utc_text(T0),
        "attempt": 1,
        "startedAt": utc_text(T0),
        "pid": 1,
        "manual": False,
        "outcome": "succeeded",
        "exitCode": 0,
        "finishedAt": utc_text(T0),
        "duration": 0.01,
        "failReason": None,
        "stdout": "ok\n" * 20,
        "stderr": None,
        "stdoutDropped": 0,
        "stderrDropped": 0,
    }
    for name, job in jobs.items():
        digest = job.digest  # type: ignore[attr-defined]
        await store.put(
            node_key("bench", "fires", name),
            {"job": name, "digest": digest, "fire": utc_text(T0)},
        )
        await store.put(
            node_key("bench", "retries", name),
            {"job": name, "digest": digest, "status": "settled", "reason": "launched"},
        )
        await store.put(
            node_key("bench", "history", name), {"job": name, "runs": [run | {"job": name}] * 20}
        )
    scheduler = Scheduler(ManualClock(T0 + timedelta(minutes=7)), never)  # type: ignore[arg-type]
    scheduler.replace_jobs(jobs)  # type: ignore[arg-type]
    keeper = StateKeeper("bench", lambda: scheduler, RunHistory(), boot="b")
    began = time.perf_counter()
    records = await store.list(node_key("bench") + "/")
    read = time.perf_counter() - began
    began = time.perf_counter()
    keeper.restore(records, scheduler.clock.now())
    restored = time.perf_counter() - began
    assert keeper.stats.restored_fires == count
    return read, restored


def ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[int(len(values) * 0.99) - 1]
    return f"p50 {statistics.median(values) * 1000:7.3f} ms, p99 {p99 * 1000:7.3f} ms"


async def main(launches: int) -> None:
    floor = await admissions(None, launches)
    print(f"launch admission, {launches} launches")
    print(f"  no state (floor)   {ms(floor)}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = await admissions(FilesystemStore(Path(tmp) / "s"), launches)
        print(f"  state directory    {ms(directory)}")
        with EtcdServer(Path(tmp) / "etcd") as server:
            etcd = await admissions(EtcdStore([server.endpoint], prefix="/bench/"), launches)
            print(f"  etcd (loopback)    {ms(etcd)}")
            print("restore of 1,000 jobs (a last fire, a retry record, 20 runs of history each)")
            for name, store in (
                ("state directory", FilesystemStore(Path(tmp) / "r")),
                ("etcd (loopback)", EtcdStore([server.endpoint], prefix="/bench-r/")),
            ):
                read, restored = await restore(store, 1000)
                await store.close()
                print(f"  {name:18} read {read * 1000:7.1f} ms, restore {restored * 1000:7.1f} ms")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
