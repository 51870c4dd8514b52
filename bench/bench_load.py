"""Load time of a large configuration: cronstable beside yacron 0.19.0, same file, same run.

    .venv/bin/python bench/bench_load.py [JOBS]

Writes a JOBS-job file (default 2,000; about 12 lines per job, yacron's format),
then times parse + validation into a desired state: cronstable in this process,
yacron in its own venv (bench/.venv-yacron, created on first use).  Also times
the error path: the same file with one bad schedule in the last job, which
cronstable must report with file, line and column.

yacron's strictyaml parse grows faster than linearly (a 2,000-job file ran for
minutes), so yacron gets a 1,000-job file, once, and the ratio compares the
cost per 1,000 jobs.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peer import ensure_peer_venv
from cronstable.config import ConfigError, load_path

REPEAT = 7
PEER_JOBS = 1000


def make_config(jobs: int, broken: bool = False) -> str:
    rng = random.Random(2026)
    out = [
        "defaults:\n  shell: /bin/bash\n  environment:\n    - key: TEAM\n      value: data\n",
        "jobs:\n",
    ]
    for i in range(jobs):
        minute = 61 if broken and i == jobs - 1 else rng.randint(0, 59)
        out.append(
            f"""  - name: job-{i:05d}
    command: /usr/local/bin/task --id {i} --verbose
    schedule: "{minute} {rng.randint(0, 23)} * * *"
    captureStdout: true
    concurrencyPolicy: Forbid
    environment:
      - key: JOB_ID
        value: "{i}"
    onFailure:
      retry:
        maximumRetries: 3
        initialDelay: 2
"""
        )
    return "".join(out)


def time_cronstable(path: Path) -> list[float]:
    samples = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        try:
            load_path(str(path))
        except ConfigError:
            pass
        samples.append(time.perf_counter() - start)
    return samples


YACRON_PROBE = """
import sys, time
from yacron.config import parse_config, ConfigError
samples = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    try:
        parse_config(sys.argv[1])
    except ConfigError:
        pass
    samples.append(time.perf_counter() - start)
print(" ".join(map(str, samples)))
"""


def time_yacron(python: Path, path: Path, repeat: int) -> list[float]:
    out = subprocess.run(
        [str(python), "-c", YACRON_PROBE, str(path), str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [float(x) for x in out.split()]


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    python = ensure_peer_venv()
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp, "jobs.yaml")
        good.write_text(make_config(jobs))
        bad = Path(tmp, "broken.yaml")
        bad.write_text(make_config(jobs, broken=True))
        lines = good.read_text().count("\n")
        try:
            load_path(str(bad))
        except ConfigError as exc:
            print(f"error reported: {exc.problems[0]}")
        ours = time_cronstable(good)
        ours_bad = time_cronstable(bad)
        peer = Path(tmp, "peer.yaml")
        peer.write_text(make_config(PEER_JOBS))
        theirs = time_yacron(python, peer, 1)
    print(f"\n{jobs} jobs, {lines} lines; cronstable: median of {REPEAT}")
    print(f"{'':28}{'jobs':>6}{'median ms':>12}{'best ms':>10}{'ms / 1000 jobs':>16}")
    for label, count, samples in (
        ("cronstable (valid)", jobs, ours),
        ("cronstable (1 error)", jobs, ours_bad),
        ("yacron 0.19.0 (one run)", PEER_JOBS, theirs),
    ):
        median = statistics.median(samples) * 1000
        print(
            f"{label:28}{count:6d}{median:12.1f}{min(samples) * 1000:10.1f}"
            f"{median * 1000 / count:16.1f}"
        )
    ratio = (statistics.median(theirs) / PEER_JOBS) / (statistics.median(ours) / jobs)
    print(f"\nper 1,000 jobs, yacron / cronstable: {ratio:.1f}x (target: 2,000 jobs <= 400 ms)")


if __name__ == "__main__":
    main()
