"""Source-notice latency: from a change at the origin to the snapshot being yielded.

    .venv/bin/python bench/bench_source_notice.py

For each kind of source, publishes ROUNDS changes to a real origin on loopback and
times each until the source yields the new snapshot:

* etcd: a transaction on a real etcd (Debian's etcd-server) → the watch fires;
* git: a push to `git daemon`, then a nudge naming the pushed sha (what the
  webhook receiver will do), and a push found by polling at interval=1;
* local directory: an atomic save (see also bench_local_source.py).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import harness_etcd  # noqa: E402
import harness_git  # noqa: E402
import harness_local  # noqa: E402

ROUNDS = 10


async def measure(module: object, nudge: bool, tmp: Path) -> list[float]:
    samples: list[float] = []
    async with module.harness(tmp) as h:  # type: ignore[attr-defined]
        await h.publish({"c.yaml": b"jobs: []\n"})
        source = h.source(tmp / "cache")
        await source.start()
        it = aiter(source.watch())
        await anext(it)
        try:
            for n in range(ROUNDS):
                files = {"c.yaml": f"jobs: []\n# change {n}\n".encode()}
                start = time.perf_counter()
                revision = await h.publish(files)
                if nudge:
                    source.nudge(revision)
                snap = await asyncio.wait_for(anext(it), 30)
                samples.append(time.perf_counter() - start)
                assert dict(snap.files) == files
        finally:
            await source.close()
    return samples


async def main() -> None:
    rows = [
        ("etcd watch (txn → snapshot)", harness_etcd, False),
        ("git push + nudge(sha)", harness_git, True),
        ("git push, found by polling (1 s)", harness_git, False),
        ("local dir atomic save", harness_local, False),
    ]
    print(f"{ROUNDS} changes each; milliseconds from publishing to the snapshot yielded")
    print(f"{'':36}{'median':>9}{'min':>9}{'max':>9}")
    for label, module, nudge in rows:
        with tempfile.TemporaryDirectory() as tmp:
            samples = await measure(module, nudge, Path(tmp))
        ms = [s * 1000 for s in samples]
        print(f"{label:36}{statistics.median(ms):9.1f}{min(ms):9.1f}{max(ms):9.1f}")


if __name__ == "__main__":
    asyncio.run(main())
