"""The floors of bench_runtime.py, in a bare process of their own (stdlib asyncio only).

    python _runtime_floor.py late OUT FIRES OFFSET   # one spawn at each whole second + OFFSET
    python _runtime_floor.py burst OUT INSTANT COUNT  # COUNT spawns at once at INSTANT

Each spawn runs ``date +%s.%N`` with stdout appended to OUT, stdin from /dev/null,
stderr piped and a new session: what the daemon does for a job with the default
settings, minus everything a scheduler adds.  ``late`` prints one line per fire:
the scheduled instant and the moment the spawn was called; ``burst`` prints the
CPU seconds this process used from the instant until every child was reaped.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
import sys
import time

RECORD = [shutil.which("date") or "/usr/bin/date", "+%s.%N"]


async def spawn(fd: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *RECORD,
        stdin=subprocess.DEVNULL,
        stdout=fd,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


async def late(fd: int, fires: int, offset: float) -> None:
    instant = math.floor(time.time()) + 1 + offset
    for _ in range(fires):
        await asyncio.sleep(max(0.0, instant - time.time()))
        called = time.time()
        proc = await spawn(fd)
        await proc.communicate()
        print(f"{instant:.6f} {called:.6f}", flush=True)
        instant = max(instant + 1, math.floor(time.time()) + 1 + offset)


async def burst(fd: int, instant: float, count: int) -> None:
    await asyncio.sleep(max(0.0, instant - time.time()))
    cpu = time.process_time()
    procs = await asyncio.gather(*(spawn(fd) for _ in range(count)))
    await asyncio.gather(*(p.communicate() for p in procs))
    print(f"{time.process_time() - cpu:.6f}", flush=True)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if mode == "late":
            asyncio.run(late(fd, int(sys.argv[3]), float(sys.argv[4])))
        else:
            asyncio.run(burst(fd, float(sys.argv[3]), int(sys.argv[4])))
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
