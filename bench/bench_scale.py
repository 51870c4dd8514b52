"""Scale (issue 19): 100,000 jobs on one node, every figure beside its floor, one run.

    .venv/bin/python bench/bench_scale.py [--quick] [--only load,reconcile,start,spawn,throughput]

a) Load: ``cronstable validate`` of 20,000 one-line jobs (one file), 100,000 (one file, and
   1,000 files of 100), whole process, beside the PyYAML C loader (``yaml.load`` with
   ``CSafeLoader``) reading the same files, whole process too; CPU seconds (user + system,
   from the child's rusage, which other load on the machine hardly moves), the best of
   several runs, and the peak RSS.  Beside yacron 0.19.0 (bench/.venv-yacron) at the size
   it reaches: 1,000 block-style jobs (its strictyaml parse grows faster than linearly).
b) Reconcile: a one-job edit in a 100,000-job directory (1,000 files of 100), in process,
   from the snapshot's arrival to the scheduler's table swapped (load with the parse
   cache, plan, prepare, commit), as the daemon does it; beside a full load of the same
   revision without the cache.
c) Start and idle: ``cronstable run`` on 100,000 yearly jobs (durable state on, directory
   backend): seconds from the process start to the revision applied (beside the
   ``validate`` of the same files), then CPU seconds per 60 s idle and RSS; a page of
   ``/status`` and a scrape of ``/metrics``.  Idle beside yacron at 1,000 jobs, both
   daemons in the same window (yacron with 10,000 jobs does not finish loading).
d) Spawn: 500 jobs due at one instant with durable state on (directory backend): the last
   start, and the CPU the spawning process used, beside a bare asyncio process spawning
   the same 500 commands (bench/_runtime_floor.py) 5 s later.  The daemon's CPU is taken
   over the 4 s around each burst (its runs' ends are recorded after them), less what it
   uses in 4 s between bursts (its timers, its source's watch, the store's polls: what
   the floor, which only spawns, has none of); both are printed.  Fire lateness of a
   per-second job beside the same floor's, its own share the difference of the medians.
e) Throughput: 1,000 jobs due in the same second (last start, fires missed), and per-second
   jobs for a minute: fires per second sustained, and how many were missed.

Every job is ``date +%s.%N`` executed directly, its standard output the daemon's own, a
file opened O_APPEND: each run writes its start time as its first act.  The load average
is printed per phase: other work on the machine is noise, ratios are taken in the same
run.  cronstable's modules are compiled first, as an installed package's are.  Full mode
takes about 8 minutes, --quick about 4.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import gc
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._runtime_proc import (
    Daemons,
    cpu_seconds,
    loadavg,
    quantile,
    read_times,
    rss_mib,
    wait_settled,
)
from bench.peer import ensure_peer_venv
from cronstable.config import Limits, load_snapshot
from cronstable.reconcile.apply import Applier
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FLOOR = HERE / "_runtime_floor.py"
DATE = shutil.which("date") or "/usr/bin/date"
NCPU = os.cpu_count() or 1
LIMITS = ["--max-yaml-nodes", "4000000", "--max-revision-bytes", "256M", "--max-file-bytes", "64M"]
"""What docs/configuration.md (Large configurations) tells a 100,000-job node to give."""
BIG = 100_000
BURST = 500
SAME_SECOND = 1000

TARGET_LOAD = 2.0
TARGET_20K = 1.5
TARGET_RECONCILE = 0.050
TARGET_APPLIED = 10.0
TARGET_IDLE = 0.5
TARGET_RSS = 600.0
TARGET_BURST = 1.1
TARGET_SPAWN_CPU = 1.2
TARGET_OWN = 0.0005
TARGET_SAME_SECOND = 2.0

CSAFE = """
import sys, yaml
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        yaml.load(f, Loader=yaml.CSafeLoader)
"""
YACRON_LOAD = """
import sys
from yacron.config import parse_config
parse_config(sys.argv[1])
"""


# ------------------------------------------------------------------ configurations


def flow_jobs(count: int, first: int = 0, yearly: bool = False, seed: int = 1) -> str:
    """One-line jobs; yearly ones (January 1st) never fire while the bench runs."""
    rng = random.Random(seed + first)
    tail = "1 1 *" if yearly else "* * *"
    return "".join(
        f'  - {{name: job-{i:06d}, command: "echo {i}", '
        f'schedule: "{rng.randint(0, 59)} {rng.randint(0, 23)} {tail}"}}\n'
        for i in range(first, first + count)
    )


def block_jobs(count: int, schedule: str | None = None, seed: int = 7) -> str:
    """yacron's block style (its strictyaml refuses flow mappings); ``date`` as the command."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        when = schedule or f"{rng.randint(0, 59)} {rng.randint(0, 23)} 1 1 *"
        out.append(
            f"  - name: job-{i:06d}\n    command:\n      - {DATE}\n"
            f'      - "+%s.%N"\n    schedule: "{when}"\n'
        )
    return "".join(out)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def split(count: int, per_file: int, yearly: bool = False) -> dict[str, str]:
    return {
        f"team{f:04d}.yaml": "jobs:\n" + flow_jobs(per_file, f * per_file, yearly)
        for f in range(count // per_file)
    }


# ------------------------------------------------------------------ processes


def rusage_of(argv: list[str], **kwargs: Any) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak RSS MiB, exit code) of a command run to its end."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {err[-500:]!r}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024, proc.returncode


def cronstable_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cronstable", *args]


class Report:
    def __init__(self) -> None:
        self.rows: list[str] = []
        self.verdicts: list[tuple[str, bool]] = []
        self.loads: list[tuple[str, float]] = []

    def line(self, text: str = "") -> None:
        print(text, flush=True)
        self.rows.append(text)

    def target(self, what: str, met: bool, detail: str) -> None:
        self.verdicts.append((what, met))
        self.line(f"  target: {what} -> {'met' if met else 'MISSED'} ({detail})")

    def load(self, phase: str) -> None:
        self.loads.append((phase, loadavg()))


def ratio(a: float, b: float) -> str:
    return "n/a" if b <= 0 or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}x"


# ------------------------------------------------------------------ a) load


def bench_load(report: Report, tmp: Path, quick: bool, yacron: Path | None) -> None:
    repeat = 2 if quick else 3
    report.line("\na) Load: validate, whole process, beside the PyYAML C loader on the same files")
    report.line(
        f"{'':34}{'cronstable CPU s':>17}{'floor CPU s':>12}{'ratio':>8}{'wall s':>8}{'RSS MiB':>9}"
    )
    cases = {
        "20,000 jobs, one file": write_tree(
            tmp / "load-20k", {"jobs.yaml": "jobs:\n" + flow_jobs(20_000)}
        ),
        "100,000 jobs, 1,000 files of 100": write_tree(tmp / "load-100k-dir", split(BIG, 100)),
        "100,000 jobs, one file": write_tree(
            tmp / "load-100k-one", {"jobs.yaml": "jobs:\n" + flow_jobs(BIG)}
        ),
    }
    for label, root in cases.items():
        files = sorted(str(p) for p in root.glob("*.yaml"))
        ours = [rusage_of(cronstable_argv("validate", *LIMITS, str(root))) for _ in range(repeat)]
        floor = [rusage_of([sys.executable, "-c", CSAFE, *files]) for _ in range(repeat)]
        cpu, wall, rss = min(r[0] for r in ours), min(r[1] for r in ours), max(r[2] for r in ours)
        base = min(r[0] for r in floor)
        report.line(f"{label:34}{cpu:17.2f}{base:12.2f}{ratio(cpu, base):>8}{wall:8.2f}{rss:9.0f}")
        if label.startswith("100,000"):
            report.target(
                f"{label}: <= {TARGET_LOAD}x the C loader",
                cpu <= TARGET_LOAD * base,
                ratio(cpu, base),
            )
            report.target(f"{label}: <= {TARGET_RSS:.0f} MB", rss <= TARGET_RSS, f"{rss:.0f} MiB")
        else:
            report.target(
                f"20,000 jobs: <= {TARGET_20K} s whole process",
                wall <= TARGET_20K,
                f"{wall:.2f} s wall, {cpu:.2f} CPU s",
            )
    report.load("load")
    if yacron is None:
        return
    peer = write_tree(tmp / "load-peer", {"jobs.yaml": "jobs:\n" + block_jobs(1000)})
    ours = [rusage_of(cronstable_argv("validate", str(peer))) for _ in range(repeat)]
    theirs = rusage_of([str(yacron), "-c", YACRON_LOAD, str(peer / "jobs.yaml")])
    floor = [rusage_of([sys.executable, "-c", CSAFE, str(peer / "jobs.yaml")]) for _ in range(2)]
    cpu = min(r[0] for r in ours)
    base = min(r[0] for r in floor)
    report.line(
        f"{'1,000 block-style jobs':34}{cpu:17.2f}{base:12.2f}{ratio(cpu, base):>8}"
        f"{min(r[1] for r in ours):8.2f}{max(r[2] for r in ours):9.0f}"
    )
    report.line(
        f"{'  yacron 0.19.0, the same file':34}{theirs[0]:17.2f}{'':12}{'':8}{theirs[1]:8.2f}"
        f"{theirs[2]:9.0f}   yacron / cronstable: {ratio(theirs[0], cpu)} CPU"
    )


# ------------------------------------------------------------------ b) reconcile


def bench_reconcile(report: Report, quick: bool) -> None:
    edits = 5 if quick else 12
    per_file = 100
    files = {
        f"jobs/team{t:04d}.yaml": ("jobs:\n" + flow_jobs(per_file, t * per_file)).encode()
        for t in range(BIG // per_file)
    }
    limits = Limits(max_revision_bytes=256 << 20, max_yaml_nodes=4_000_000)

    async def run() -> tuple[float, list[float], list[float]]:
        scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), ProcessSpawner(None))
        applier = Applier([JobsSection(scheduler, ProcessSpawner(None))], limits=limits)
        snap = Snapshot(content_revision(files), "bench", files)
        started = time.perf_counter()
        first = await applier.reconcile(snap)
        initial = time.perf_counter() - started
        assert first.outcome == "applied", first.errors
        current = dict(files)
        incremental: list[float] = []
        full: list[float] = []
        for edit in range(edits):
            team = (edit * 37) % (BIG // per_file)
            path = f"jobs/team{team:04d}.yaml"
            current = dict(current)
            current[path] = current[path].replace(b'"echo ', f'"echo edit{edit} '.encode(), 1)
            snap = Snapshot(content_revision(current), "bench", current)
            gc.collect()
            started = time.perf_counter()
            record = await applier.reconcile(snap)
            incremental.append(time.perf_counter() - started)
            assert record.outcome == "applied" and record.summary is not None
            assert record.summary["changed"] == 1, record.summary
            if edit < 2:
                started = time.perf_counter()
                load_snapshot(snap, limits=limits)
                full.append(time.perf_counter() - started)
        return initial, incremental, full

    initial, incremental, full = asyncio.run(run())
    best, median = min(incremental), statistics.median(incremental)
    report.line("\nb) Reconcile: a one-job edit in 100,000 jobs (1,000 files of 100), in process")
    report.line(
        f"  first apply (cold) {initial:.2f} s; full load of an edited revision, no cache:"
        f" {min(full):.2f} s (the floor without reuse)"
    )
    report.line(
        f"  one-job edit, snapshot to table swapped: best {best * 1000:.1f} ms, "
        f"median {median * 1000:.1f} ms of {len(incremental)}"
    )
    report.target(
        f"one-job edit <= {TARGET_RECONCILE * 1000:.0f} ms",
        best <= TARGET_RECONCILE,
        f"best {best * 1000:.1f} ms, {min(full) / best:.0f}x under a full load",
    )
    report.load("reconcile")


# ------------------------------------------------------------------ helpers for daemons


class Node:
    """One ``cronstable run`` in a directory of its own, its log and job output kept apart."""

    def __init__(self, daemons: Daemons, tmp: Path, name: str, files: dict[str, str]) -> None:
        self.dir = write_tree(tmp / "etc" / name, files)
        self.var = tmp / "var" / name
        self.var.mkdir(parents=True)
        self.out = self.var / "jobs.out"
        self.log = self.var / "daemon.log"
        self.daemons = daemons
        argv = cronstable_argv(
            "run", "-c", str(self.dir), *LIMITS, "--state-dir", str(self.var / "state")
        )
        self.started = time.monotonic()
        self.proc = daemons.start(argv, self.out, self.log)

    def wait_applied(self, timeout: float) -> float:
        """Seconds from the start to the first revision applied (its log line)."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cronstable exited: {self.log.read_text()[-800:]}")
            if " applied in " in self.log.read_text(errors="replace"):
                return time.monotonic() - self.started
            self.daemons.sleep(0.02)
        raise RuntimeError(f"no revision applied in {timeout:.0f} s")

    def url(self) -> str:
        found = re.search(r"HTTP API listening on (http://\S+)", self.log.read_text())
        if found is None:
            raise RuntimeError("the daemon's log names no listener")
        return found.group(1).rstrip("/")

    def stop(self) -> None:
        self.daemons.terminate(self.proc)


def web_section() -> str:
    return "web:\n  listen: [http://127.0.0.1:0]\n"


def state_section() -> str:
    return "state:\n  backend: filesystem\n"


def fetch(url: str) -> tuple[float, int, Any]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as answer:
        body = answer.read()
    took = time.perf_counter() - started
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    return took, len(body), data


# ------------------------------------------------------------------ c) start and idle


def bench_start(report: Report, tmp: Path, quick: bool, yacron: Path | None) -> None:
    window = 60.0  # also --quick: yacron re-reads its configuration once a minute
    daemons = Daemons(threading.Event())
    try:
        files = split(BIG, 100, yearly=True)
        files["web.yaml"] = web_section() + state_section()
        big = Node(daemons, tmp, "start-100k", files)
        applied = big.wait_applied(120)
        cpu_applied = cpu_seconds(big.proc.pid)
        validate = rusage_of(cronstable_argv("validate", *LIMITS, str(big.dir)))
        small = Node(daemons, tmp, "idle-1k", {"jobs.yaml": "jobs:\n" + block_jobs(1000)})
        peer = None
        if yacron is not None:
            peer_dir = write_tree(
                tmp / "etc" / "yacron-1k", {"jobs.yaml": "jobs:\n" + block_jobs(1000)}
            )
            peer = daemons.start(
                [str(yacron.parent / "yacron"), "-c", str(peer_dir / "jobs.yaml")],
                tmp / "var" / "yacron.out",
                tmp / "var" / "yacron.log",
            )
        for proc, what in ((big.proc, "cronstable 100,000"), (small.proc, "cronstable 1,000")):
            if wait_settled(daemons, proc, 120) is None:
                raise RuntimeError(f"{what} still busy 120 s after start")
        if peer is not None and wait_settled(daemons, peer, 120) is None:
            report.line("  note: yacron (1,000 jobs) was still busy 120 s after start")
        report.load("start")
        procs = {"cronstable, 100,000 jobs": big.proc, "cronstable, 1,000 jobs": small.proc}
        if peer is not None:
            procs["yacron 0.19.0, 1,000 jobs"] = peer
        # yacron re-reads its configuration every minute: a full window holds one such read
        before = {k: cpu_seconds(p.pid) for k, p in procs.items()}
        daemons.sleep(window)
        idle = {k: (cpu_seconds(p.pid) - before[k]) * 60 / window for k, p in procs.items()}
        rss = {k: rss_mib(p.pid) for k, p in procs.items()}
        page, page_bytes, page_data = fetch(f"{big.url()}/status?limit=1000")
        scrape, scrape_bytes, _ = fetch(f"{big.url()}/metrics")
        walk = time.perf_counter()
        pages = 1
        cursor = page_data["nextCursor"]
        while cursor:
            _, _, data = fetch(f"{big.url()}/status?limit=10000&cursor={cursor}")
            cursor = data["nextCursor"]
            pages += 1
        walk = time.perf_counter() - walk
        per_job_off = "Per-job metric series off" in big.log.read_text()
    finally:
        daemons.stop_all()
    report.line("\nc) Start and idle (durable state on, directory backend)")
    report.line(
        f"  100,000 jobs: applied {applied:.2f} s after start ({cpu_applied:.2f} CPU s); "
        f"validate of the same files {validate[1]:.2f} s ({validate[0]:.2f} CPU s)"
    )
    report.target(
        f"applied <= {TARGET_APPLIED:.0f} s after start",
        applied <= TARGET_APPLIED,
        f"{applied:.2f} s, {ratio(applied, validate[1])} the validate",
    )
    report.line(f"  {'':28}{'CPU-s / 60 s idle':>18}{'RSS MiB':>9}")
    for label in procs:
        report.line(f"  {label:28}{idle[label]:18.3f}{rss[label]:9.1f}")
    big_label = "cronstable, 100,000 jobs"
    report.target(
        f"100,000 jobs idle <= {TARGET_IDLE} CPU-s / 60 s",
        idle[big_label] <= TARGET_IDLE,
        f"{idle[big_label]:.3f}",
    )
    report.target(
        f"100,000 jobs <= {TARGET_RSS:.0f} MiB",
        rss[big_label] <= TARGET_RSS,
        f"{rss[big_label]:.0f} MiB",
    )
    peer_label = "yacron 0.19.0, 1,000 jobs"
    if peer_label in idle:
        small_label = "cronstable, 1,000 jobs"
        report.line(
            f"  at 1,000 jobs, yacron / cronstable: "
            f"CPU {ratio(idle[peer_label], idle[small_label])}"
            f", RSS {ratio(rss[peer_label], rss[small_label])}"
        )
    report.line(
        f"  /status?limit=1000: {page * 1000:.0f} ms, {page_bytes / 1024:.0f} KiB; all "
        f"{pages} pages {walk:.2f} s; /metrics {scrape * 1000:.0f} ms, {scrape_bytes / 1024:.0f}"
        f" KiB (per-job series {'off, as above 10,000 jobs' if per_job_off else 'ON'})"
    )
    report.load("idle")


# ------------------------------------------------------------------ d) spawn


def floor_burst(out: Path, instant: float, count: int) -> float:
    argv = [sys.executable, str(FLOOR), "burst", str(out), f"{instant:.6f}", str(count)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    return float(done.stdout)


def floor_late(out: Path, fires: int) -> list[tuple[float, float]]:
    argv = [sys.executable, str(FLOOR), "late", str(out), str(fires), "0.5"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=fires + 30)
    return [(float(a), float(b)) for a, b in (line.split() for line in done.stdout.splitlines())]


def wait_times(path: Path, lo: float, hi: float, count: int, until: float) -> list[float]:
    while True:
        found = [t for t in read_times(path) if lo <= t < hi]
        if len(found) >= count or time.time() >= until:
            return found
        time.sleep(0.1)


def bench_spawn(report: Report, tmp: Path, quick: bool) -> None:
    runs = 3 if quick else 7
    every = 10
    window = 4.0  # the burst's CPU: from 0.5 s before the instant to 3.5 s after
    daemons = Daemons(threading.Event())
    rows: list[tuple[float, float, float, float, float]] = []
    try:
        schedule = f"{every}-{60 - every}/{every} * * * * * *"
        node = Node(
            daemons,
            tmp,
            "spawn",
            {"jobs.yaml": state_section() + "jobs:\n" + block_jobs(BURST, schedule)},
        )
        node.wait_applied(60)
        wait_settled(daemons, node.proc, 60)
        report.load("spawn")
        instant = math.ceil((time.time() + 1.5) / every) * every
        while len(rows) < runs:
            if instant % 60 == 0 or time.time() > instant - 0.6:  # :00 is not in the schedule
                instant += every
                continue
            daemons.sleep_until(instant - 0.5)
            cpu = cpu_seconds(node.proc.pid)
            got = wait_times(node.out, instant, instant + every, BURST, instant + 8)
            if len(got) < BURST:
                raise RuntimeError(f"burst at {instant}: {len(got)} of {BURST} started")
            floor_at = instant + 5.0
            daemons.sleep_until(instant + window - 0.5)  # the ends are handled (reaped, recorded)
            cpu = cpu_seconds(node.proc.pid) - cpu
            out = node.var / f"floor-{len(rows)}.out"
            floor_cpu = floor_burst(out, floor_at, BURST)
            floor_times = read_times(out)
            # the daemon between bursts (its timers, its source's watch, the store's
            # polls): what the window holds besides the burst, which the floor has not
            quiet = time.time()
            idle = cpu_seconds(node.proc.pid)
            daemons.sleep_until(instant + every - 1.0)
            idle = (cpu_seconds(node.proc.pid) - idle) * window / (time.time() - quiet)
            rows.append((max(got) - instant, cpu, max(floor_times) - floor_at, floor_cpu, idle))
            instant += every
        node.stop()
        fires = 15 if quick else 30
        late = Node(
            daemons,
            tmp,
            "lateness",
            {"jobs.yaml": state_section() + "jobs:\n" + block_jobs(1, "* * * * * * *")},
        )
        late.wait_applied(60)
        wait_settled(daemons, late.proc, 30)
        rounds: list[tuple[list[float], list[float]]] = []
        for k in range(2):  # the better of two rounds: a busy second elsewhere is noise
            first = math.floor(time.time()) + 1
            out = late.var / f"floor-late-{k}.out"
            plan = floor_late(out, fires)
            records = wait_times(late.out, first, first + fires + 1, fires, time.time() + 3)
            ours_k = [t - math.floor(t) for t in records][:fires]
            floor_k = [rec - at for (at, _), rec in zip(plan, read_times(out), strict=False)]
            rounds.append((ours_k, floor_k))
    finally:
        daemons.stop_all()
    ours, floor = min(rounds, key=lambda r: statistics.median(r[0]) - statistics.median(r[1]))
    last = min(r[0] for r in rows)
    floor_last = min(r[2] for r in rows)
    by_run = [r[0] / r[2] for r in rows]
    raw_cpu = statistics.median(r[1] for r in rows)
    idle_cpu = statistics.median(r[4] for r in rows)
    cpu = statistics.median(r[1] - r[4] for r in rows)  # the burst's own
    floor_cpu = statistics.median(r[3] for r in rows)
    report.line(
        f"\nd) Spawn: {BURST} jobs due at one instant, durable state on (directory backend)"
    )
    report.line(f"  {'':30}{'last start ms (best)':>21}{'CPU ms (median)':>16}  last of each run")
    report.line(
        f"  {'cronstable':30}{last * 1000:21.0f}{cpu * 1000:16.0f}  "
        + " ".join(f"{r[0] * 1000:.0f}" for r in rows)
    )
    report.line(
        f"  {'floor: bare asyncio process':30}{floor_last * 1000:21.0f}{floor_cpu * 1000:16.0f}  "
        + " ".join(f"{r[2] * 1000:.0f}" for r in rows)
    )
    report.target(
        f"last start <= {TARGET_BURST}x the floor",
        last <= TARGET_BURST * floor_last,
        f"best {ratio(last, floor_last)}, run by run "
        + " ".join(f"{x:.2f}" for x in by_run)
        + f", median {statistics.median(by_run):.2f}x",
    )
    report.line(
        f"  cronstable's CPU: {raw_cpu * 1000:.0f} ms in the {window:g} s around each burst, of "
        f"which {idle_cpu * 1000:.0f} ms its rate between bursts; the burst's own "
        f"{cpu * 1000:.0f} ms (each run: "
        + " ".join(f"{(r[1] - r[4]) * 1000:.0f}" for r in rows)
        + ")"
    )
    report.target(
        f"spawn CPU <= {TARGET_SPAWN_CPU}x the floor",
        cpu <= TARGET_SPAWN_CPU * floor_cpu,
        f"{ratio(cpu, floor_cpu)} (the window whole, between-burst rate included: "
        f"{ratio(raw_cpu, floor_cpu)})",
    )
    own = statistics.median(ours) - statistics.median(floor)
    report.line(
        f"  lateness p50 {statistics.median(ours) * 1000:.1f} ms (p99 "
        f"{quantile(ours, 0.99) * 1000:.1f}), floor p50 {statistics.median(floor) * 1000:.1f}"
        f" ms, {len(ours)} fires"
    )
    report.target(
        f"lateness own share <= {TARGET_OWN * 1000:.1f} ms p50",
        own <= TARGET_OWN,
        f"{own * 1000:.2f} ms",
    )


# ------------------------------------------------------------------ e) throughput


def bench_throughput(report: Report, tmp: Path, quick: bool, per_second: int) -> None:
    window = 20 if quick else 60
    daemons = Daemons(threading.Event())
    try:
        instant_every = 15
        schedule = f"*/{instant_every} * * * * * *"
        node = Node(
            daemons,
            tmp,
            "same-second",
            {"jobs.yaml": "jobs:\n" + block_jobs(SAME_SECOND, schedule)},
        )
        node.wait_applied(60)
        wait_settled(daemons, node.proc, 60)
        report.load("throughput")
        rounds: list[tuple[int, float]] = []
        instant = math.ceil((time.time() + 1.5) / instant_every) * instant_every
        for _ in range(2):
            got = wait_times(node.out, instant, instant + instant_every, SAME_SECOND, instant + 12)
            rounds.append((len(got), max(got) - instant if got else math.nan))
            instant += instant_every
        node.stop()
        steady = Node(
            daemons,
            tmp,
            "per-second",
            {"jobs.yaml": "jobs:\n" + block_jobs(per_second, "* * * * * * *")},
        )
        steady.wait_applied(60)
        daemons.sleep(3)
        first = math.floor(time.time()) + 1
        cpu = cpu_seconds(steady.proc.pid)
        daemons.sleep_until(first + window + 2)
        cpu = cpu_seconds(steady.proc.pid) - cpu
        times = [t for t in read_times(steady.out) if first <= t < first + window]
        late = [t - math.floor(t) for t in times]
    finally:
        daemons.stop_all()
    expected = per_second * window
    report.line(f"\ne) Throughput: {SAME_SECOND:,} jobs due in the same second, twice")
    for started, last in rounds:
        report.line(
            f"  {started} started, {SAME_SECOND - started} missed, "
            f"last start {last * 1000:.0f} ms after the instant"
        )
    worst = max(r[1] for r in rounds)
    missed = sum(SAME_SECOND - r[0] for r in rounds)
    report.target(
        f"0 missed, last start <= {TARGET_SAME_SECOND:.0f} s",
        missed == 0 and worst <= TARGET_SAME_SECOND,
        f"{missed} missed, last {worst:.2f} s",
    )
    report.line(
        f"  {per_second} per-second jobs for {window} s: "
        f"{len(times) / window:.0f} fires/s sustained "
        f"({len(times)} of {expected}, {expected - len(times)} missed); start p50 "
        f"{statistics.median(late) * 1000:.0f} ms, p99 {quantile(late, 0.99) * 1000:.0f} ms after "
        f"the second; the daemon used {cpu / window:.2f} CPU"
    )


# ------------------------------------------------------------------ main


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{NCPU} CPUs ({model}), Python {sys.version.split()[0]}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows, fewer repeats")
    parser.add_argument(
        "--only",
        default="load,reconcile,start,spawn,throughput",
        help="comma-separated parts: load, reconcile, start, spawn, throughput",
    )
    parser.add_argument(
        "--per-second", type=int, default=250, help="per-second jobs of the throughput minute"
    )
    parser.add_argument("--no-peer", action="store_true", help="leave yacron out")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    # the daemons and commands started run this tree's cronstable, whatever the venv installed
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.getenv("PYTHONPATH")]))
    # as installed (pip compiles what it installs, PyYAML included): every process started
    # reads this tree's bytecode, even where PYTHONDONTWRITEBYTECODE keeps Python from
    # writing it, instead of compiling the modules changed since the last write
    compileall.compile_dir(str(ROOT / "cronstable"), quiet=1)
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    yacron = None if args.no_peer or not parts & {"load", "start"} else ensure_peer_venv()
    report = Report()
    began = time.monotonic()
    report.line(f"machine: {machine()}; load average {loadavg():.2f} at the start")
    steps: list[tuple[str, Callable[[Path], None]]] = [
        ("load", lambda tmp: bench_load(report, tmp, args.quick, yacron)),
        ("reconcile", lambda tmp: bench_reconcile(report, args.quick)),
        ("start", lambda tmp: bench_start(report, tmp, args.quick, yacron)),
        ("spawn", lambda tmp: bench_spawn(report, tmp, args.quick)),
        ("throughput", lambda tmp: bench_throughput(report, tmp, args.quick, args.per_second)),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for name, step in steps:
            if name in parts:
                step(Path(tmp) / name)
    report.line(
        "\nload average (1 min) by phase: "
        + "  ".join(
            f"{phase} {load:.2f}{' HIGH' if load > 0.75 * NCPU else ''}"
            for phase, load in report.loads
        )
    )
    met = sum(1 for _, ok in report.verdicts if ok)
    report.line(
        f"targets met: {met} of {len(report.verdicts)}"
        + "".join(f"\n  MISSED: {what}" for what, ok in report.verdicts if not ok)
    )
    report.line(f"total {time.monotonic() - began:.0f} s{' (--quick)' if args.quick else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
