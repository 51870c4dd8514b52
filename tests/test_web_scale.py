"""A large job table over the HTTP API: ``/status`` a page at a time, per-job metrics off.

Real sockets on loopback, a real daemon core (tests/web_stack.py), real runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from web_stack import Stack

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
LISTEN = "web:\n  listen: [http://127.0.0.1:0]\n  authToken: {value: admin-secret}\n"
ADMIN = {"Authorization": "Bearer admin-secret"}


def many(count: int, first: int = 0, extra: str = "") -> str:
    jobs = "".join(
        f'  - {{name: job-{i:04d}, command: "true", schedule: "@yearly"}}\n'
        for i in range(first, first + count)
    )
    return LISTEN + extra + "jobs:\n" + jobs


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any, str | None]:
    async with http.get(url, headers=ADMIN) as response:
        body = await response.text()
        data = json.loads(body) if response.content_type == "application/json" else body
        return response.status, data, response.headers.get("Link")


@pytest.mark.asyncio
async def test_status_pages_walk_every_job_once_in_order(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    await stack.apply(many(25))
    base = stack.url()
    status, page, link = await get(http, f"{base}/status?limit=10")
    assert status == 200 and page["jobCount"] == 25
    names = [job["name"] for job in page["jobs"]]
    assert names == [f"job-{i:04d}" for i in range(10)]
    assert link == f'</status?limit=10&cursor={page["nextCursor"]}>; rel="next"'
    while page["nextCursor"] is not None:
        status, page, link = await get(http, f"{base}/status?limit=10&cursor={page['nextCursor']}")
        assert status == 200
        names += [job["name"] for job in page["jobs"]]
    assert names == [f"job-{i:04d}" for i in range(25)] and link is None
    # without a limit: the first 1,000 (here all of them), and the text form pages alike
    status, whole, _ = await get(http, f"{base}/status")
    assert [j["name"] for j in whole["jobs"]] == names and whole["nextCursor"] is None
    text_form = {**ADMIN, "Accept": "text/plain"}
    async with http.get(f"{base}/status?limit=2", headers=text_form) as response:
        text = await response.text()
        assert text.splitlines()[0].startswith("job-0000: scheduled")
        assert len(text.splitlines()) == 2 and 'rel="next"' in response.headers["Link"]


@pytest.mark.asyncio
async def test_status_refuses_bad_pages_and_resumes_past_a_removed_job(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    await stack.apply(many(10))
    base = stack.url()
    for query in ("limit=0", "limit=10001", "limit=x", "limit=-1"):
        status, body, _ = await get(http, f"{base}/status?{query}")
        assert status == 400 and "limit must be a whole number" in body["error"], query
    for cursor in ("nope", "%FF", "LTE6am9iLTAwMDE"):  # the last is "-1:job-0001"
        status, body, _ = await get(http, f"{base}/status?cursor={cursor}")
        assert status == 400 and "cursor" in body["error"], cursor
    _, page, _ = await get(http, f"{base}/status?limit=4")
    cursor = page["nextCursor"]  # starts at job-0004
    # a reload removes job-0002 to job-0004: the page starts where job-0004 was, position 4
    # of the new table (job-0005 and job-0006 moved before it: a page walk across a reload
    # may skip jobs, or show some twice, and jobCount or applied.jobSetId tell it happened)
    await stack.apply(
        many(2)
        + "".join(
            f'  - {{name: job-{i:04d}, command: "true", schedule: "@yearly"}}\n'
            for i in range(5, 10)
        )
    )
    _, page, _ = await get(http, f"{base}/status?limit=4&cursor={cursor}")
    assert [j["name"] for j in page["jobs"]] == ["job-0007", "job-0008", "job-0009"]
    assert page["jobCount"] == 7


@pytest.mark.asyncio
async def test_cli_status_reads_every_page(stack: Stack, tmp_path: Path) -> None:
    await stack.apply(many(1205))
    token = tmp_path / "token"
    token.write_text("admin-secret\n")
    token.chmod(0o600)
    argv = [sys.executable, "-m", "cronstable", "status", "--url", stack.url()]
    argv += ["--token-file", str(token)]
    done = await asyncio.to_thread(
        subprocess.run, [*argv, "--json"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert [j["name"] for j in answer["jobs"]] == [f"job-{i:04d}" for i in range(1205)]
    assert answer["jobCount"] == 1205 and answer["nextCursor"] is None
    done = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "job-1204" in done.stdout and "job-0000" in done.stdout


async def run_once(stack: Stack, http: aiohttp.ClientSession, job: str) -> None:
    base = stack.url()
    async with http.post(f"{base}/jobs/{job}/start", headers=ADMIN) as response:
        assert response.status == 202, await response.text()
        run = (await response.json())["run"]
    async with asyncio.timeout(20):
        while True:
            _, runs, _ = await get(http, f"{base}/jobs/{job}/runs")
            if any(r["id"] == run and r["outcome"] != "running" for r in runs["runs"]):
                return
            await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_per_job_metrics_turn_off_and_on(
    stack: Stack, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.apply(many(3))
    await run_once(stack, http, "job-0000")
    _, text, _ = await get(http, f"{stack.url()}/metrics")
    assert 'cronstable_job_runs_total{job="job-0000",outcome="succeeded"} 1.0' in text
    assert 'cronstable_job_next_fire_timestamp_seconds{job="job-0002"}' in text

    caplog.set_level("INFO", "cronstable.runtime.control")
    await stack.apply(many(3, extra="metrics:\n  perJob: false\n"))
    assert "Per-job metric series off (each job's series dropped): metrics.perJob is false" in (
        caplog.text
    )
    await run_once(stack, http, "job-0001")
    _, text, _ = await get(http, f"{stack.url()}/metrics")
    assert 'job="' not in text  # no series is labelled by job
    assert "cronstable_fires_skipped_total" in text
    assert "cronstable_config_last_reload_successful 1.0" in text

    await stack.apply(many(3, extra="metrics:\n  perJob: true\n"))
    await run_once(stack, http, "job-0001")
    _, text, _ = await get(http, f"{stack.url()}/metrics")
    assert 'cronstable_job_runs_total{job="job-0001",outcome="succeeded"} 1.0' in text
    assert 'cronstable_job_running{job="job-0001"} 0.0' in text
    assert 'job="job-0000",outcome' not in text  # what was dropped stays dropped
