"""Benchmark: parse + one next fire for 10,000 distinct cron expressions.

Run with ``.venv/bin/python bench/bench_schedule.py [--count N] [--repeat R]``.

Times cronstable.schedule with cold caches, and for comparison cronsim and
croniter when importable, and yacron 0.19.0's engine (the ``crontab``
package) in its own venv (see peer.py), run as a subprocess.  Expressions are
plain 5-field ones that every engine reads the same way (numbers, ranges,
steps, lists; day of month at most 28).  Each engine's figure is the best of
``--repeat`` runs over the whole set.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cronstable import schedule as cronstable_schedule  # noqa: E402

NOW = datetime(2026, 5, 17, 10, 23, 45, tzinfo=UTC)
SEED = 20260517


def _field(rng: random.Random, lo: int, hi: int) -> str:
    r = rng.random()
    if r < 0.30:
        return "*"
    if r < 0.50:
        return str(rng.randint(lo, hi))
    if r < 0.62:
        a = rng.randint(lo, hi - 1)
        return f"{a}-{rng.randint(a + 1, hi)}"
    if r < 0.72:  # the crontab package wants the step to stay inside the range
        step = rng.randint(2, 4)
        a = rng.randint(lo, hi - step)
        return f"{a}-{rng.randint(a + step, hi)}/{step}"
    if r < 0.85:
        return f"*/{rng.randint(2, max(2, (hi - lo + 1) // 2))}"
    values = sorted(rng.sample(range(lo, hi + 1), rng.randint(2, 4)))
    return ",".join(map(str, values))


def expressions(count: int, seed: int = SEED) -> list[str]:
    """``count`` distinct valid 5-field expressions, the same for a given seed."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < count:
        expr = " ".join(
            [
                _field(rng, 0, 59),
                _field(rng, 0, 23),
                _field(rng, 1, 28),
                _field(rng, 1, 12),
                _field(rng, 0, 6),
            ]
        )
        seen.setdefault(expr, None)
    return list(seen)


def best_of(repeat: int, run: Callable[[], None], reset: Callable[[], None] | None = None) -> float:
    best = float("inf")
    for _ in range(repeat):
        if reset is not None:
            reset()
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def time_cronstable(exprs: list[str], repeat: int, tz: tzinfo = UTC) -> float:
    parse = cronstable_schedule.parse_schedule

    def run() -> None:
        for e in exprs:
            parse(e).next_fire(NOW, tz)

    return best_of(repeat, run, cronstable_schedule._parse_text.cache_clear)


def time_cronsim(exprs: list[str], repeat: int) -> float | None:
    try:
        from cronsim import CronSim
    except ImportError:
        return None

    def run() -> None:
        for e in exprs:
            next(CronSim(e, NOW))

    return best_of(repeat, run)


def time_croniter(exprs: list[str], repeat: int) -> float | None:
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError:
        return None

    def run() -> None:
        for e in exprs:
            croniter(e, NOW).get_next(datetime)

    return best_of(repeat, run)


YACRON_SCRIPT = """
import json, sys, time
from datetime import datetime, timezone
from crontab import CronTab
exprs = json.load(open(sys.argv[1]))
now = datetime(2026, 5, 17, 10, 23, 45, tzinfo=timezone.utc)
best = float("inf")
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    for e in exprs:
        CronTab(e).next(now=now, default_utc=True)
    best = min(best, time.perf_counter() - t0)
print(best)
"""


def time_yacron(exprs: list[str], repeat: int) -> tuple[float | None, str]:
    try:
        from peer import ensure_peer_venv  # type: ignore[import-not-found]

        python = ensure_peer_venv()
    except (subprocess.CalledProcessError, OSError) as exc:
        return None, f"peer venv unavailable: {exc}"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(exprs, fh)
        path = fh.name
    try:
        out = subprocess.run(
            [str(python), "-c", YACRON_SCRIPT, path, str(repeat)],
            capture_output=True,
            text=True,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        return None, f"yacron run failed: {exc.stderr.strip()[-300:]}"
    finally:
        pathlib.Path(path).unlink(missing_ok=True)
    return float(out.stdout.strip().splitlines()[-1]), ""


def agreement_with_cronsim(exprs: list[str]) -> str:
    try:
        from cronsim import CronSim
    except ImportError:
        return "cronsim not importable"
    differ = 0
    for e in exprs:
        ours = cronstable_schedule.parse_schedule(e).next_fire(NOW, UTC)
        if ours != next(CronSim(e, NOW)):
            differ += 1
    return f"{len(exprs) - differ}/{len(exprs)} next fires identical to cronsim's (UTC)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-yacron", action="store_true", help="skip the yacron peer venv")
    args = ap.parse_args()

    exprs = expressions(args.count)
    n = len(exprs)
    print(f"{n} distinct 5-field expressions (seed {SEED})")
    print(f"parse + one next fire strictly after {NOW.isoformat()}")
    print(f"best of {args.repeat} runs, cold parse cache for cronstable\n")

    rows: list[tuple[str, float | None, str]] = []
    base = time_cronstable(exprs, args.repeat)
    rows.append(("cronstable (UTC)", base, ""))
    rows.append(
        (
            "cronstable (America/New_York)",
            time_cronstable(exprs, args.repeat, ZoneInfo("America/New_York")),
            "",
        )
    )
    rows.append(("cronsim", time_cronsim(exprs, args.repeat), "not importable"))
    rows.append(("croniter", time_croniter(exprs, args.repeat), "not importable"))
    if args.no_yacron:
        rows.append(("yacron 0.19.0 (crontab)", None, "skipped"))
    else:
        secs, why = time_yacron(exprs, args.repeat)
        rows.append(("yacron 0.19.0 (crontab)", secs, why))

    print(f"{'engine':32s} {'total s':>9s} {'us/expr':>9s} {'x cronstable':>13s}")
    print("-" * 66)
    for name, secs, why in rows:
        if secs is None:
            print(f"{name:32s} {'-':>9s} {'-':>9s} {'-':>13s}  ({why})")
        else:
            print(f"{name:32s} {secs:9.3f} {secs * 1e6 / n:9.1f} {secs / base:13.2f}")
    print()
    print(agreement_with_cronsim(exprs))


if __name__ == "__main__":
    main()
