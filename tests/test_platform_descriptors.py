"""The open-files limit and the count of open descriptors (what spawns and listeners consult)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

from cronstable.platform import free_descriptors, open_descriptors, open_files_limit

RAISE = """
import json
from cronstable.platform import raise_open_files_limit
import resource
limit = raise_open_files_limit()
print(json.dumps([limit.soft_before, limit.soft, limit.hard, limit.error,
                  resource.getrlimit(resource.RLIMIT_NOFILE)[0]]))
"""


def run_with_limit(soft: int, hard: int) -> list[object]:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", RAISE], check=True, capture_output=True, text=True,
        preexec_fn=limits, timeout=30,
    )  # fmt: skip
    result: list[object] = json.loads(out.stdout)
    return result


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    assert run_with_limit(64, hard) == [64, hard, hard, "", hard]
    assert run_with_limit(hard, hard) == [hard, hard, hard, "", hard]


def test_open_descriptors_counts_what_this_process_opens() -> None:
    before = open_descriptors()
    assert before is not None
    pipes = [os.pipe() for _ in range(5)]
    try:
        assert open_descriptors() == before + 10
        assert free_descriptors() == open_files_limit() - before - 10
    finally:
        for read, write in pipes:
            os.close(read)
            os.close(write)
    assert open_descriptors() == before


def test_at_the_limit_every_descriptor_counts_as_taken() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened = open_descriptors()
    assert opened is not None
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 20, hard))
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        assert free_descriptors() == 0
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
