"""The running daemon beside yacron 0.19.0, same run: fire lateness, idle cost, burst.

    .venv/bin/python bench/bench_runtime.py [--quick] [--loops asyncio,uvloop]

Each daemon runs as a real subprocess (``cronstable run -c`` / ``yacron -c``) on a
temp configuration, alone in a directory of its own (cronstable watches the whole
directory of its configuration file); job output and daemon logs go elsewhere.
Every job is ``date +%s.%N``, executed directly (no shell: the cheapest exec at
hand) with its standard output inherited from the daemon, a file opened O_APPEND:
each job writes its start time, one line in one write, as its first act.  Jobs
keep the defaults (stderr captured).

a) Lateness: recorded start minus the scheduled instant (the whole second for
   cronstable's per-second job, the whole minute for yacron's per-minute job).
   The floor is the same ``date`` spawned by a bare asyncio process
   (bench/_runtime_floor.py) sleeping to each x.5 s, between cronstable's fires;
   "spawn call -> started" is its pure spawn + exec time.
b) Idle cost: 1,000 and 10,000 yearly jobs, none due; CPU (utime + stime from
   /proc) over a window after start-up has settled, and VmRSS at its end.
   yacron re-reads its whole configuration every minute, so its window spans one
   minute boundary (full mode: exactly 60 s; quick: 15 s around a boundary plus
   the rate measured between boundaries).  One more cronstable (1,000 jobs)
   writes its own log inside its configuration directory.
c) Burst: 500 jobs due at one instant, time until the last has started; the
   floor is a bare asyncio process spawning the same 500 commands at once
   (``asyncio.create_subprocess_exec``, stderr piped, new session, like the
   daemon) 5 s after each cronstable burst.  Best of 5 (quick: 3); also the CPU
   the spawning process used per burst, which other load on the machine hardly
   moves.  yacron: one burst at the next minute.

--loops asyncio,uvloop runs the cronstable measurements once on each event loop
(``cronstable run --loop X``), one loop after the other, and prints them side by side
(yacron is left out of that mode).

yacron does its work at minute boundaries; the cronstable measurements keep
clear of them, so the two run side by side without sharing a busy instant.
Full mode takes about 5-7 minutes; --quick about 2-4.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._runtime_proc import (
    Daemons,
    Stopped,
    clear_of_minute,
    cpu_seconds,
    loadavg,
    next_minute,
    quantile,
    read_times,
    rss_mib,
    wait_settled,
)
from bench.peer import ensure_peer_venv

DATE = shutil.which("date") or "/usr/bin/date"
RECORD = [DATE, "+%s.%N"]
BURST = 500
BURST_EVERY = 10
"""cronstable's burst job fires at seconds 10, 20, ... 50 of every minute."""
FLOOR_OFFSET = 5.0
"""A floor burst runs this long after a cronstable burst instant."""
NCPU = os.cpu_count() or 1

TARGET_P99 = 0.010
TARGET_BURST_RATIO = 1.25
TARGET_IDLE_10K = 0.5
ISSUE_YACRON = {
    "lateness": "0.36-0.61 s",
    "burst": "300 jobs: last started 0.74 s after the minute",
    "idle": "1,000 jobs: 2.45 CPU-s / 60 s, 68.5 MB RSS",
}


# ------------------------------------------------------------------ configurations


def job_yaml(name: str, schedule: str) -> str:
    # block style throughout: yacron's strictyaml refuses flow sequences
    return (
        f"  - name: {name}\n"
        f"    command:\n"
        f"      - {RECORD[0]}\n"
        f'      - "{RECORD[1]}"\n'
        f'    schedule: "{schedule}"\n'
    )


def write_config(path: Path, jobs: list[tuple[str, str]]) -> Path:
    path.write_text("jobs:\n" + "".join(job_yaml(n, s) for n, s in jobs))
    return path


def idle_jobs(count: int) -> list[tuple[str, str]]:
    rng = random.Random(count)
    # yearly, at varied minutes and hours of January 1st: never due during the run
    return [
        (f"idle-{i:05d}", f"{rng.randint(0, 59)} {rng.randint(0, 23)} 1 1 *") for i in range(count)
    ]


# ------------------------------------------------------------------ floors

FLOOR = Path(__file__).resolve().parent / "_runtime_floor.py"


def floor_lateness(out: Path, fires: int) -> list[tuple[float, float]]:
    """``date`` spawned by a bare asyncio process at x.5 s; (instant, spawn call) per fire."""
    argv = [sys.executable, str(FLOOR), "late", str(out), str(fires), "0.5"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=fires + 30)
    return [(float(a), float(b)) for a, b in (line.split() for line in done.stdout.splitlines())]


def floor_burst(out: Path, instant: float) -> float:
    """BURST ``date`` spawned at once at ``instant`` by a bare asyncio process; its CPU-s."""
    argv = [sys.executable, str(FLOOR), "burst", str(out), f"{instant:.6f}", str(BURST)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    return float(done.stdout)


# ------------------------------------------------------------------ helpers


class Ctx:
    def __init__(
        self, quick: bool, tmp: Path, cronstable: Path, yacron: Path, loop: str | None = None
    ) -> None:
        self.quick = quick
        self.loop = loop
        """``--loop`` for every cronstable started (None: the daemon's default)."""
        self.tmp = tmp
        self.var = tmp / "var"
        """Job output and daemon logs: away from the configurations, which are watched."""
        self.var.mkdir()
        self.cronstable = cronstable
        self.yacron = yacron
        self.stop = threading.Event()
        self.daemons = Daemons(self.stop)
        self.cs_busy_done = threading.Event()
        """Set when cronstable's latency-sensitive measurements are over."""
        self.results: dict[str, Any] = {}
        self.notes: list[str] = []
        self.loads: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    def load(self, phase: str) -> None:
        with self._lock:
            self.loads.append((phase, loadavg()))

    def config(self, name: str, jobs: list[tuple[str, str]]) -> Path:
        """A configuration in a directory of its own: cronstable watches (and snapshots)
        the whole directory of a configuration file, so nothing else may be written there."""
        directory = self.tmp / "etc" / name
        directory.mkdir(parents=True)
        return write_config(directory / "jobs.yaml", jobs)

    def cronstable_argv(self, config: Path) -> list[str]:
        loop = ["--loop", self.loop] if self.loop else []
        return [str(self.cronstable), "run", "-c", str(config), *loop]

    def start_cronstable(self, name: str, config: Path) -> subprocess.Popen[bytes]:
        argv = self.cronstable_argv(config)
        return self.daemons.start(argv, self.var / f"{name}.out", self.var / f"{name}.log")

    def start_yacron(self, name: str, config: Path) -> subprocess.Popen[bytes]:
        argv = [str(self.yacron), "-c", str(config)]
        return self.daemons.start(argv, self.var / f"{name}.out", self.var / f"{name}.log")

    def check_log(self, name: str) -> None:
        """Note the warnings and errors a daemon logged (none are expected)."""
        lines = (self.var / f"{name}.log").read_text(errors="replace").splitlines()
        bad = [line for line in lines if " WARNING " in line or " ERROR " in line]
        bad += [line for line in lines if line.startswith(("WARNING:", "ERROR:"))]
        if bad:
            self.note(f"{name}: {len(bad)} warning/error lines in its log, first: {bad[0][:160]}")

    def settle(self, proc: subprocess.Popen[bytes], what: str, timeout: float) -> float:
        """Wait for start-up to end; the monotonic time at which the process went quiet."""
        called = time.monotonic()
        took = wait_settled(self.daemons, proc, timeout)
        if took is None:
            raise RuntimeError(f"{what} still busy {timeout:.0f} s after start")
        return called + took


def wait_records(
    ctx: Ctx, path: Path, lo: float, hi: float, count: int, until: float
) -> list[float]:
    """Times in [lo, hi) from ``path``, waiting until ``count`` are there or ``until``."""
    while True:
        found = [t for t in read_times(path) if lo <= t < hi]
        if len(found) >= count or time.time() >= until:
            return found
        ctx.daemons.sleep(0.1)


# ------------------------------------------------------------------ cronstable track


def cronstable_lateness(ctx: Ctx) -> None:
    fires = 30 if ctx.quick else 65
    cfg = ctx.config("cs-late", [("tick", "* * * * * * *")])
    proc = ctx.start_cronstable("cs-late", cfg)
    ctx.settle(proc, "cronstable (lateness)", 30)
    ctx.load("lateness")
    first = math.floor(time.time()) + 1
    floor_out = ctx.var / "floor-late.out"
    plan = floor_lateness(floor_out, fires)
    last = first + fires
    records = wait_records(ctx, ctx.var / "cs-late.out", first, last + 1, fires, time.time() + 3)
    ctx.daemons.terminate(proc)
    seconds = [math.floor(t) for t in records]
    lateness = [t - s for t, s in zip(records, seconds, strict=True)]
    if len(set(seconds)) != len(seconds) or len(seconds) < fires:
        ctx.note(
            f"cronstable lateness: {len(records)} records for {fires} seconds, "
            f"{len(seconds) - len(set(seconds))} in a shared second (fires > 1 s late?)"
        )
    floor_records = read_times(floor_out)
    pairs = list(zip(plan, floor_records, strict=False))
    ctx.results.setdefault("lateness", {}).update(
        cronstable=lateness[:fires],
        floor=[rec - instant for (instant, _), rec in pairs],
        spawn=[rec - called for (_, called), rec in pairs],
    )


def cronstable_burst(ctx: Ctx) -> None:
    runs = 3 if ctx.quick else 5
    schedule = f"{BURST_EVERY}-{60 - BURST_EVERY}/{BURST_EVERY} * * * * * *"
    cfg = ctx.config("cs-burst", [(f"b-{i:03d}", schedule) for i in range(BURST)])
    clear_of_minute(ctx.daemons, needs=10)
    out = ctx.var / "cs-burst.out"
    proc = ctx.start_cronstable("cs-burst", cfg)
    ctx.settle(proc, "cronstable (burst)", 30)
    ctx.load("burst")
    rows: dict[str, list[tuple[float, float, float]]] = {"cronstable": [], "floor": []}
    instant = math.ceil((time.time() + 1) / BURST_EVERY) * BURST_EVERY
    while len(rows["cronstable"]) < runs:
        if instant % 60 == 0 or time.time() > instant - 0.6:
            # never at a minute (yacron's instant); never without a CPU reading before it
            instant += BURST_EVERY
            continue
        ctx.daemons.sleep_until(instant - 0.5)
        cpu = cpu_seconds(proc.pid)
        got = wait_records(ctx, out, instant, instant + BURST_EVERY, BURST, instant + 8)
        if len(got) < BURST:
            raise RuntimeError(f"cronstable burst at {instant}: only {len(got)} of {BURST} ran")
        # the runs' ends are handled too (reaped, logged) before the CPU is read again
        start = instant + FLOOR_OFFSET
        ctx.daemons.sleep_until(start - 1.5)
        cpu = cpu_seconds(proc.pid) - cpu
        rows["cronstable"].append((min(got) - instant, max(got) - instant, cpu))
        floor_out = ctx.var / f"floor-burst-{len(rows['floor'])}.out"
        cpu = floor_burst(floor_out, start)
        got = read_times(floor_out)
        if len(got) < BURST:
            raise RuntimeError(f"floor burst: only {len(got)} of {BURST} ran")
        rows["floor"].append((min(got) - start, max(got) - start, cpu))
        instant += BURST_EVERY
    ctx.daemons.terminate(proc)
    ctx.results["burst"] = rows


def cronstable_idle(ctx: Ctx) -> None:
    window = 15.0 if ctx.quick else 60.0
    clear_of_minute(ctx.daemons, needs=15)
    procs = {}
    for count in (1000, 10000):
        cfg = ctx.config(f"cs-idle-{count}", idle_jobs(count))
        procs[count] = (ctx.start_cronstable(f"cs-idle-{count}", cfg), time.monotonic())
    # the same 1,000 jobs with the daemon's own log written inside the watched directory
    cfg = ctx.config("cs-idle-logdir", idle_jobs(1000))
    argv = ctx.cronstable_argv(cfg)
    logdir_log = cfg.parent / "daemon.log"
    logdir = ctx.daemons.start(argv, ctx.var / "cs-idle-logdir.out", logdir_log)
    rows = {}
    for count, (proc, started) in procs.items():
        quiet = ctx.settle(proc, f"cronstable ({count} idle jobs)", 60)
        rows[count] = {"settled": quiet - started}
    ctx.load("idle (cronstable)")
    before = {count: cpu_seconds(p.pid) for count, (p, _) in procs.items()}
    before_logdir = cpu_seconds(logdir.pid), len(logdir_log.read_bytes().splitlines())
    ctx.daemons.sleep(window)
    for count, (proc, _) in procs.items():
        cpu = cpu_seconds(proc.pid) - before[count]
        rows[count] |= {"cpu": cpu, "per60": cpu * 60 / window, "rss": rss_mib(proc.pid)}
        rows[count]["how"] = f"{window:.0f} s window"
    text = logdir_log.read_text(errors="replace")
    ctx.results["idle_logdir"] = {
        "per60": (cpu_seconds(logdir.pid) - before_logdir[0]) * 60 / window,
        "lines60": (len(text.splitlines()) - before_logdir[1]) * 60 / window,
        "stuck": "keeps changing" in text,
    }
    for proc, _ in procs.values():
        ctx.daemons.terminate(proc)
    ctx.daemons.terminate(logdir)
    ctx.results.setdefault("idle", {})["cronstable"] = rows


def cronstable_track(ctx: Ctx) -> None:
    try:
        cronstable_lateness(ctx)
        cronstable_burst(ctx)
    finally:
        ctx.cs_busy_done.set()
    cronstable_idle(ctx)


# ------------------------------------------------------------------ yacron track


def yacron_lateness(ctx: Ctx) -> float:
    """The per-minute job's first fires; returns the last boundary used."""
    fires = 1 if ctx.quick else 3
    cfg = ctx.config("ya-late", [("tick", "* * * * *")])
    out = ctx.var / "ya-late.out"
    proc = ctx.start_yacron("ya-late", cfg)
    first = next_minute(time.time() + 5)
    ctx.settle(proc, "yacron (lateness)", 30)
    lateness = []
    boundary = first
    for k in range(fires):
        boundary = first + 60 * k
        got = wait_records(ctx, out, boundary, boundary + 30, 1, boundary + 20)
        if not got:
            raise RuntimeError(f"yacron did not fire at {boundary}")
        lateness.append(min(got) - boundary)
    ctx.daemons.terminate(proc)
    ctx.results.setdefault("lateness", {})["yacron"] = lateness
    return boundary


def yacron_burst(ctx: Ctx, after: float) -> float:
    cfg = ctx.config("ya-burst", [(f"b-{i:03d}", "* * * * *") for i in range(BURST)])
    # its start-up parses and its burst would disturb cronstable's burst: wait for the end
    while not ctx.cs_busy_done.is_set():
        ctx.daemons.sleep(0.5)
    ctx.daemons.sleep_until(after + 2)
    out = ctx.var / "ya-burst.out"
    proc = ctx.start_yacron("ya-burst", cfg)
    boundary = next_minute(time.time() + 12)
    if wait_settled(ctx.daemons, proc, boundary - time.time() - 1) is None:
        ctx.note("yacron (burst) was still loading its configuration 1 s before the minute")
    got = wait_records(ctx, out, boundary, boundary + 60, BURST, boundary + 40)
    ctx.daemons.terminate(proc)
    if not got:
        raise RuntimeError("yacron burst: no job ran")
    ctx.results["burst_yacron"] = {
        "first": min(got) - boundary,
        "last": max(got) - boundary,
        "ran": len(got),
    }
    return boundary


def yacron_idle(ctx: Ctx, after: float) -> None:
    ctx.daemons.sleep_until(after + 5)
    procs = {}
    for count in (1000, 10000):
        cfg = ctx.config(f"ya-idle-{count}", idle_jobs(count))
        procs[count] = (ctx.start_yacron(f"ya-idle-{count}", cfg), time.monotonic())
    small, started = procs[1000]
    _, big_started = procs[10000]
    rows: dict[int, dict[str, Any]] = {1000: {}, 10000: {}}
    rows[1000]["settled"] = ctx.settle(small, "yacron (1,000 idle jobs)", 120) - started
    ctx.load("idle (yacron)")
    if ctx.quick:
        # 15 s around the next boundary (one config reload) + the rate between reloads
        boundary = next_minute(time.time() + 9.5)
        base0 = {c: (time.time(), cpu_seconds(p.pid)) for c, (p, _) in procs.items()}
        ctx.daemons.sleep_until(boundary - 7.5)
        win0 = {c: cpu_seconds(p.pid) for c, (p, _) in procs.items()}
        now = time.time()
        ctx.daemons.sleep_until(boundary + 7.5)
        for count, (proc, _) in procs.items():
            cpu = cpu_seconds(proc.pid) - win0[count]
            t0, c0 = base0[count]
            rate = (win0[count] - c0) / max(1e-9, now - t0)
            rows[count] |= {
                "cpu": cpu,
                "per60": cpu + rate * 45,
                "how": "15 s around a minute + rate between",
            }
    else:
        clear_of_minute(ctx.daemons, margin=8, needs=0)
        before = {c: cpu_seconds(p.pid) for c, (p, _) in procs.items()}
        ctx.daemons.sleep(60)
        for count, (proc, _) in procs.items():
            cpu = cpu_seconds(proc.pid) - before[count]
            rows[count] |= {"cpu": cpu, "per60": cpu, "how": "60 s window"}
    for count, (proc, _) in procs.items():
        rows[count]["rss"] = rss_mib(proc.pid)
    # yacron parses the whole file at start-up, again at its first loop, then every minute:
    # with 10,000 jobs the first parse outlasts the whole benchmark (strictyaml)
    big = procs[10000][0]
    cpu = cpu_seconds(big.pid)
    ctx.daemons.sleep(1.0)
    busy = cpu_seconds(big.pid) - cpu > 0.5
    age = time.monotonic() - big_started
    rows[10000]["settled"] = None if busy else age
    rows[10000]["loading"] = busy
    rows[10000]["age"] = age
    for proc, _ in procs.values():
        ctx.daemons.terminate(proc)
    ctx.results.setdefault("idle", {})["yacron"] = rows


def yacron_track(ctx: Ctx, errors: list[BaseException]) -> None:
    try:
        last = yacron_lateness(ctx)
        last = yacron_burst(ctx, last)
        yacron_idle(ctx, last)
    except Stopped:
        pass
    except BaseException as exc:
        errors.append(exc)
        traceback.print_exc()
        ctx.stop.set()


# ------------------------------------------------------------------ report


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0 or math.isnan(a) or math.isnan(b):
        return "n/a"
    return f"{a / b:.1f}x"


def report(ctx: Ctx) -> None:
    res = ctx.results
    print(f"\nrecorder: {' '.join(RECORD)} executed directly, stdout inherited (O_APPEND file)")
    late = res.get("lateness", {})
    if "cronstable" in late or "yacron" in late:
        print(
            "\na) Fire lateness: recorded start - scheduled instant (ms; p99 of < 100 is the max)"
        )
        print(f"{'':34}{'fires':>6}{'p50':>10}{'p99':>10}{'max':>10}")
        rows = (
            ("cronstable (per-second job)", late.get("cronstable")),
            ("floor: bare asyncio process", late.get("floor")),
            ("floor: spawn call -> started", late.get("spawn")),
            ("yacron 0.19.0 (per-minute job)", late.get("yacron")),
        )
        for label, values in rows:
            if values:
                print(
                    f"{label:34}{len(values):6d}{ms(statistics.median(values))} "
                    f"{ms(quantile(values, 0.99))} {ms(max(values))}"
                )
        ours, floor, theirs = late.get("cronstable"), late.get("floor"), late.get("yacron")
        if ours:
            p50, p99 = statistics.median(ours), quantile(ours, 0.99)
            verdict = "met" if p99 <= TARGET_P99 else "MISSED"
            print(f"target: p99 <= {TARGET_P99 * 1000:.0f} ms -> {verdict} ({p99 * 1000:.1f} ms)")
            if floor:
                own = p50 - statistics.median(floor)
                print(f"cronstable's own share (p50 - floor p50): {own * 1000:.1f} ms")
            if theirs:
                print(
                    f"yacron / cronstable: p50 {ratio(statistics.median(theirs), p50)}, "
                    f"max {ratio(max(theirs), p99)} (yacron vs cronstable p99)"
                )
        print(f"issue, yacron: {ISSUE_YACRON['lateness']}")

    idle = res.get("idle", {})
    if idle:
        print("\nb) Idle cost: no job due; CPU after start-up has settled")
        head = f"{'':26}{'jobs':>7}{'start s':>9}{'CPU-s':>8}{'CPU-s/60s':>11}{'RSS MiB':>9}"
        print(head + "  window")
        for daemon in ("cronstable", "yacron"):
            for count, row in sorted(idle.get(daemon, {}).items()):
                label = "cronstable" if daemon == "cronstable" else "yacron 0.19.0"
                settled = row.get("settled")
                start = (
                    f"{settled:9.1f}"
                    if settled is not None
                    else f"{'>' + format(row['age'], '.0f'):>9}"
                )
                print(
                    f"{label:26}{count:7,d}{start}{row['cpu']:8.2f}{row['per60']:11.2f}"
                    f"{row['rss']:9.1f}  {row['how']}"
                )
        ours = idle.get("cronstable", {})
        theirs = idle.get("yacron", {})
        if 10000 in ours:
            per60 = ours[10000]["per60"]
            verdict = "met" if per60 <= TARGET_IDLE_10K else "MISSED"
            print(f"target: 10,000 idle jobs <= {TARGET_IDLE_10K} CPU-s / 60 s -> {verdict}")
        for count in (1000, 10000):
            if count in ours and count in theirs:
                mine, peer = ours[count], theirs[count]
                print(
                    f"yacron / cronstable at {count:,} jobs: "
                    f"CPU {ratio(peer['per60'], mine['per60'])}, "
                    f"RSS {ratio(peer['rss'], mine['rss'])}"
                )
        if theirs.get(10000, {}).get("loading"):
            print(
                f"yacron with 10,000 jobs was still busy loading its configuration "
                f"{theirs[10000]['age']:.0f} s after start (it re-reads it every minute; "
                "its CPU-s/60s above is that parse, not a steady state)"
            )
        extra = res.get("idle_logdir")
        if extra:
            print(
                f"cronstable, 1,000 jobs, its own log written inside the config directory: "
                f"{extra['per60']:.2f} CPU-s/60s, {extra['lines60']:.0f} log lines/60s"
                + (", source reports it 'keeps changing' (reloads wait)" if extra["stuck"] else "")
            )
        print(f"issue, yacron: {ISSUE_YACRON['idle']}")

    burst = res.get("burst")
    ya = res.get("burst_yacron")
    if burst or ya:
        print(f"\nc) Burst: {BURST} jobs due at one instant; until the last has started (ms)")
        print(
            f"{'':30}{'runs':>5}{'last (best)':>12}{'its first':>10}{'CPU ms':>10}"
            "  last of each run"
        )
        if burst:
            for label, key in (
                ("cronstable", "cronstable"),
                ("floor: bare asyncio process", "floor"),
            ):
                runs = burst[key]
                first, last, cpu = min(runs, key=lambda r: r[1])
                each = " ".join(f"{r[1] * 1000:.0f}" for r in runs)
                cpus = sorted(r[2] for r in runs)
                print(
                    f"{label:30}{len(runs):5d}{ms(last):>12}{ms(first):>10}"
                    f"{statistics.median(cpus) * 1000:10.0f}  {each}"
                )
        if ya:
            label = "yacron 0.19.0 (next minute)"
            print(f"{label:30}{1:5d}{ms(ya['last']):>12}{ms(ya['first']):>10}  ({ya['ran']} ran)")
        if burst:
            best = min(r[1] for r in burst["cronstable"])
            floor = min(r[1] for r in burst["floor"])
            verdict = "met" if best <= TARGET_BURST_RATIO * floor else "MISSED"
            print(
                f"cronstable / floor (best last start): {best / floor:.2f}x "
                f"(target <= {TARGET_BURST_RATIO}x -> {verdict})"
            )
            ours = [r[1] / f[1] for r, f in zip(burst["cronstable"], burst["floor"], strict=True)]
            print(
                "cronstable / floor, run by run (each beside the floor 5 s later): "
                + " ".join(f"{x:.2f}" for x in ours)
                + f"; median {statistics.median(ours):.2f}x"
            )
            cpu = statistics.median(r[2] for r in burst["cronstable"])
            cpu_floor = statistics.median(r[2] for r in burst["floor"])
            print(
                f"CPU of the spawning process per burst (median, load-proof): "
                f"cronstable / floor {ratio(cpu, cpu_floor)}"
            )
            if ya:
                print(f"yacron / cronstable: {ratio(ya['last'], best)}")
        print(f"issue, yacron: {ISSUE_YACRON['burst']}")

    print("\nload average (1 min) by phase:", end="")
    for phase, load in ctx.loads:
        flag = " HIGH" if load > 0.75 * NCPU else ""
        print(f"  {phase} {load:.2f}{flag}", end="")
    print(f"  ({NCPU} CPUs)")
    if any(load > 0.75 * NCPU for _, load in ctx.loads):
        print("the load average was high during the run: other work shares the CPUs, expect noise")
    for note in ctx.notes:
        print(f"note: {note}")


# ------------------------------------------------------------------ main


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def loops_side_by_side(results: dict[str, dict[str, Any]]) -> None:
    """One row per event loop: the headline figures of each measurement."""
    print("\nEvent loops side by side (cronstable run --loop X; same machine, one after the other)")
    head = (
        f"{'loop':10}{'late p50':>10}{'p99':>8}{'max':>8}{'burst last':>12}{'burst CPU':>11}"
        f"{'idle 1k':>9}{'idle 10k':>10}{'RSS 1k':>8}{'RSS 10k':>9}"
    )
    print(head)
    print(f"{'':10}{'ms':>10}{'ms':>8}{'ms':>8}{'ms (best)':>12}{'ms (med)':>11}"
          f"{'CPU-s/60':>9}{'CPU-s/60':>10}{'MiB':>8}{'MiB':>9}")  # fmt: skip
    for loop, res in results.items():
        late = res.get("lateness", {}).get("cronstable") or [math.nan]
        burst = res.get("burst", {}).get("cronstable") or [(math.nan, math.nan, math.nan)]
        idle = res.get("idle", {}).get("cronstable", {})
        nan = {"per60": math.nan, "rss": math.nan}
        small, big = idle.get(1000, nan), idle.get(10000, nan)
        print(
            f"{loop:10}{ms(statistics.median(late)):>10}{quantile(late, 0.99) * 1000:8.1f}"
            f"{max(late) * 1000:8.1f}{min(r[1] for r in burst) * 1000:12.1f}"
            f"{statistics.median(r[2] for r in burst) * 1000:11.0f}"
            f"{small['per60']:9.2f}{big['per60']:10.2f}{small['rss']:8.1f}{big['rss']:9.1f}"
        )


def compare_loops(args: argparse.Namespace, cronstable: Path) -> int:
    """--loops: the cronstable track once per loop, then the figures side by side."""
    loops = [name.strip() for name in args.loops.split(",") if name.strip()]
    results: dict[str, dict[str, Any]] = {}
    began = time.monotonic()
    for loop in loops:
        with tempfile.TemporaryDirectory(prefix=f"bench-runtime-{loop}-") as tmp:
            ctx = Ctx(args.quick, Path(tmp), cronstable, Path("/nonexistent/yacron"), loop)
            ctx.cs_busy_done.set()
            ctx.load("start")
            try:
                cronstable_track(ctx)
            finally:
                ctx.stop.set()
                ctx.daemons.stop_all()
            for log in sorted(ctx.var.glob("*.log")):
                ctx.check_log(log.stem)
                text = log.read_text(errors="replace")
                if "Event loop: " in text:
                    ran_on = text.split("Event loop: ", 1)[1].split(" (", 1)[0]
                    if not ran_on.startswith(loop):
                        ctx.note(f"{log.stem} ran on {ran_on}, not {loop}")
            ctx.load("end")
            print(f"\n==================== --loop {loop}")
            report(ctx)
            results[loop] = ctx.results
    loops_side_by_side(results)
    print(f"\ntotal {time.monotonic() - began:.0f} s{' (--quick)' if args.quick else ''}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows (about 3 min)")
    parser.add_argument(
        "--loops",
        metavar="LOOP,LOOP",
        default=None,
        help="run cronstable's measurements on each event loop (asyncio,uvloop) and "
        "print them side by side; yacron is not run",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    if args.loops:
        return compare_loops(args, Path(sys.executable).parent / "cronstable")
    yacron = ensure_peer_venv().parent / "yacron"
    cronstable = Path(sys.executable).parent / "cronstable"
    began = time.monotonic()
    errors: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        ctx = Ctx(args.quick, Path(tmp), cronstable, yacron)
        ctx.load("start")
        peer = threading.Thread(target=yacron_track, args=(ctx, errors), daemon=True)
        try:
            peer.start()
            cronstable_track(ctx)
            while peer.is_alive():
                peer.join(0.5)
        except Stopped:
            pass
        except BaseException as exc:
            errors.append(exc)
            if not isinstance(exc, KeyboardInterrupt):
                traceback.print_exc()
        finally:
            ctx.stop.set()
            peer.join(10)
            ctx.daemons.stop_all()
        for log in sorted(ctx.var.glob("*.log")):
            ctx.check_log(log.stem)
        ctx.load("end")
        report(ctx)
    print(f"\ntotal {time.monotonic() - began:.0f} s{' (--quick)' if args.quick else ''}")
    if errors:
        print(f"incomplete: {errors[0]!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
