"""Start-up cost of the command line: `--version` and `validate`, beside yacron 0.19.0.

    .venv/bin/python bench/bench_cli.py

Each command runs RUNS times as a fresh process; the median wall time is shown.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peer import ensure_peer_venv  # noqa: E402

RUNS = 20


def median_ms(argv: list[str]) -> float:
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    peer = ensure_peer_venv()
    ours = Path(sys.executable).parent / "cronstable"
    theirs = peer.parent / "yacron"
    example = str(ROOT / "examples" / "gitops-repo")
    yacron_example = str(ROOT.parent / "shared" / "compat" / "yacron-0.19.0" / "test.yaml")
    rows = [
        ("cronstable --version", median_ms([str(ours), "--version"])),
        ("yacron --version", median_ms([str(theirs), "--version"])),
        ("cronstable validate example", median_ms([str(ours), "validate", example])),
    ]
    if Path(yacron_example).exists():
        rows.append(
            ("yacron -c test.yaml -v", median_ms([str(theirs), "-c", yacron_example, "-v"]))
        )
    print(f"median of {RUNS} runs")
    for label, ms in rows:
        print(f"{label:32}{ms:8.1f} ms")
    print(f"\n--version: yacron / cronstable = {rows[1][1] / rows[0][1]:.1f}x")


if __name__ == "__main__":
    main()
