"""What servicing a workflow costs per ready task, against plain job launches.

    .venv/bin/python bench/bench_workflows.py [TASKS] [--repeat R]

The peer is the same scheduler launching TASKS plain jobs, measured in the same
run: all at once, and one by one (each started when the one before ended, as a
chain's tasks are); each launch goes through the gate, the guards, the
supervising task and the listeners, with a stand-in run that ends at once (no
process: a real spawn costs milliseconds and would hide what is measured here).
Against it, one run of a workflow of TASKS tasks, in three shapes:

* **wide**: one root, TASKS - 2 tasks after it in parallel, one task after them
  all (the DAG decides three times, each time over every task);
* **chain**: TASKS tasks one after the other (the DAG decides after each task:
  the worst case, each decision looks at every task);
* **layers**: ten layers, each task after every task of the layer before.

Reported per task (per launch for the peer): the time from the start of the
run until its last task ended, divided by TASKS, best of R; and the ratio to
the plain launches all at once (the chain is fairer against one by one).  The
scheduler has the daemon's run history and workflow history as listeners (the
workflow run is shown to its listeners once per turn of the event loop in which
it changed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cronstable.config import DesiredState, MemoryTree, load  # noqa: E402
from cronstable.config.desired import Job  # noqa: E402
from cronstable.ports import RunResult  # noqa: E402
from cronstable.runtime.clock import SystemClock  # noqa: E402
from cronstable.runtime.history import FlowHistory, RunHistory  # noqa: E402
from cronstable.runtime.scheduler import Scheduler  # noqa: E402


class Instant:
    """A run that ends as soon as it is waited for."""

    def __init__(self, job: Job, scheduled: datetime, attempt: int) -> None:
        self.job, self.scheduled, self.attempt = job, scheduled, attempt

    @property
    def pid(self) -> int | None:
        return 1

    async def start(self) -> None:
        return None

    async def wait(self) -> RunResult:
        now = datetime.now(UTC)
        return RunResult(
            job_name=self.job.name,
            scheduled_time=self.scheduled,
            attempt=self.attempt,
            started_at=now,
            finished_at=now,
            duration=0.0,
            returncode=0,
            stdout=None,
            stderr=None,
            stdout_discarded=0,
            stderr_discarded=0,
            fail_reason=None,
            timed_out=False,
            cancelled=False,
            pid=1,
        )

    async def cancel(self) -> None:
        return None


def configuration(tasks: int) -> DesiredState:
    jobs = "".join(
        f'  - {{name: job{n}, command: "true", schedule: "@yearly"}}\n' for n in range(tasks)
    )
    wide = ['      - {name: t0, command: "true"}\n']
    wide += [
        f'      - {{name: t{n}, command: "true", dependsOn: [t0]}}\n' for n in range(1, tasks - 1)
    ]
    middle = ", ".join(f"t{n}" for n in range(1, tasks - 1))
    wide += [f'      - {{name: t{tasks - 1}, command: "true", dependsOn: [{middle}]}}\n']
    chain = ['      - {name: t0, command: "true"}\n'] + [
        f'      - {{name: t{n}, command: "true", dependsOn: [t{n - 1}]}}\n' for n in range(1, tasks)
    ]
    width = max(1, tasks // 10)
    layers = []
    for n in range(tasks):
        level = n // width
        before = [f"t{m}" for m in range((level - 1) * width, level * width)] if level else []
        deps = f", dependsOn: [{', '.join(before)}]" if before else ""
        layers.append(f'      - {{name: t{n}, command: "true"{deps}}}\n')
    flows = "".join(
        f"  - name: {name}\n    schedule: '@yearly'\n    tasks:\n" + "".join(body)
        for name, body in (("wide", wide), ("chain", chain), ("layers", layers))
    )
    text = "jobs:\n" + jobs + "workflows:\n" + flows
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


async def measure(tasks: int, repeat: int) -> dict[str, float]:
    desired = configuration(tasks)
    scheduler = Scheduler(
        SystemClock(),
        Instant,  # type: ignore[arg-type]
        run_listeners=(RunHistory(),),
        flow_listeners=(FlowHistory(),),
    )
    scheduler.replace_jobs(desired.jobs, desired.workflows)
    loop_task = asyncio.create_task(scheduler.run())
    await asyncio.sleep(0)
    best: dict[str, float] = {}
    try:
        for _ in range(repeat):
            began = time.perf_counter()
            now = datetime.now(UTC)
            for name in desired.jobs:
                scheduler.start_now(name, now)
            while scheduler.running_total():  # noqa: ASYNC110 (no latency of a wake-up)
                await asyncio.sleep(0)
            took = (time.perf_counter() - began) / tasks
            best["plain jobs"] = min(best.get("plain jobs", took), took)
            began = time.perf_counter()
            for name in desired.jobs:
                scheduler.start_now(name, datetime.now(UTC))
                while scheduler.running_total():  # noqa: ASYNC110 (no latency of a wake-up)
                    await asyncio.sleep(0)
            took = (time.perf_counter() - began) / tasks
            best["plain, one by one"] = min(best.get("plain, one by one", took), took)
            for flow in ("wide", "chain", "layers"):
                slot = scheduler.flow_slot(flow)
                assert slot is not None
                began = time.perf_counter()
                scheduler.start_flow(flow, datetime.now(UTC))
                while slot.runs:  # noqa: ASYNC110 (no latency of a wake-up)
                    await asyncio.sleep(0)
                took = (time.perf_counter() - began) / tasks
                assert slot.last_run is not None and slot.last_run.outcome == "succeeded"
                key = f"workflow, {flow}"
                best[key] = min(best.get(key, took), took)
    finally:
        scheduler.stop()
        await loop_task
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("tasks", nargs="?", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.tasks < 3:
        ap.error("TASKS must be at least 3")
    best = asyncio.run(measure(args.tasks, args.repeat))
    floor = best["plain jobs"]
    print(f"{args.tasks} tasks (or plain launches), stand-in runs that end at once")
    print(f"best of {args.repeat}, per task: from the run's start to its last task's end\n")
    print(f"{'what':22s} {'us/task':>9s} {'x plain':>9s}")
    print("-" * 42)
    for name, took in best.items():
        print(f"{name:22s} {took * 1e6:9.1f} {took / floor:9.2f}")


if __name__ == "__main__":
    main()
