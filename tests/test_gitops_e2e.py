"""End to end on a git remote: a daemon following `git daemon` on loopback, on the real clock.

Commit a schedule change → the job fires on the new schedule; commit broken
YAML → the old schedule keeps firing and the error shows; commit a fix → it
applies.  Plus `cronstable diff` between local refs, as a pull-request check runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for
from git_server import GitDaemon, WorkRepo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def job_file(name: str, out: Path, schedule: str) -> str:
    return (
        "jobs:\n"
        f"  - name: {name}\n"
        f'    command: echo "{name} $CRONSTABLE_SCHEDULED_TIME" >> {out}\n'
        f'    schedule: "{schedule}"\n'
    )


def follower(spec: str, cache: Path, log: Path) -> DaemonProcess:
    """`cronstable run` on a source spec, as a daemon in these tests is started."""
    return DaemonProcess(None, log, args=["--source", spec, "--cache-dir", str(cache)])


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[WorkRepo, GitDaemon]]:
    repo = WorkRepo.create(tmp_path / "remotes", "cron")
    with GitDaemon(tmp_path / "remotes") as server:
        yield repo, server


WEB = "web: {listen: [http://127.0.0.1:0]}\n"
"""The API, for `cronstable audit` (a loopback peer reads without a token)."""


def audit(url: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "cronstable", "audit", "--url", url, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    entries: list[dict[str, object]] = json.loads(done.stdout)["entries"]
    return entries


def test_daemon_follows_a_git_remote(tmp_path: Path, origin: tuple[WorkRepo, GitDaemon]) -> None:
    repo, server = origin
    out = tmp_path / "fires"
    first = repo.commit(
        {"cron/jobs.yaml": WEB + job_file("every2", out, "*/2 * * * * * *")}, "first"
    )
    repo.push()
    spec = f"{server.url('cron.git')}?path=cron&interval=0.5"
    daemon = follower(spec, tmp_path / "cache", tmp_path / "daemon.log").start()
    output = daemon.output

    try:
        wait_for(lambda: len(lines(out)) >= 2)
        # every two seconds: scheduled times land on even seconds
        assert all(int(line[-8:-6]) % 2 == 0 for line in lines(out))

        # a schedule change: the job now fires every second under a new name
        sha = repo.commit(
            {"cron/jobs.yaml": WEB + job_file("every1", out, "* * * * * * *")}, "faster"
        )
        repo.push()
        wait_for(lambda: f"Revision {sha}" in output())
        wait_for(lambda: sum(line.startswith("every1") for line in lines(out)) >= 3)

        # a broken commit: rejected with file:line, and every1 keeps firing
        bad = repo.commit({"cron/jobs.yaml": "jobs:\n  - name: x\n    schedule: [oops\n"}, "oops")
        repo.push()
        wait_for(lambda: f"Revision {bad}" in output() and "rejected" in output())
        assert "jobs.yaml:3:15: invalid YAML: the '[' opened here is never closed" in output()
        before = sum(line.startswith("every1") for line in lines(out))
        wait_for(lambda: sum(line.startswith("every1") for line in lines(out)) >= before + 2)

        # the fix applies
        fixed = repo.commit(
            {"cron/jobs.yaml": WEB + job_file("fixed", out, "* * * * * * *")}, "fix"
        )
        repo.push()
        wait_for(lambda: f"Revision {fixed}" in output())
        wait_for(lambda: any(line.startswith("fixed") for line in lines(out)))

        # the audit trail: the start, then each push the poll noticed, the bad one too
        entries = audit(daemon.urls()[0])
        assert [(e["revision"], e["outcome"]) for e in entries] == [
            (fixed, "applied"),
            (bad, "rejected"),
            (sha, "applied"),
            (first, "applied"),
        ]
        kinds = [e["trigger"]["kind"] for e in entries]  # type: ignore[index]
        assert kinds == ["poll", "poll", "poll", "start"]
    finally:
        status = daemon.stop(30)
    assert status == 0


def diff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", "diff", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_diff_between_local_refs_like_a_pull_request_check(
    tmp_path: Path, origin: tuple[WorkRepo, GitDaemon]
) -> None:
    repo, _ = origin
    out = tmp_path / "unused"
    repo.commit({"jobs.yaml": job_file("nightly", out, "0 3 * * *")}, "base")
    repo.push()
    repo.git("fetch", "--quiet", "origin")
    repo.checkout("change", create=True)
    repo.commit({"jobs.yaml": job_file("nightly", out, "30 4 * * *")}, "later")

    same = diff("git:.@origin/main", "git:.@origin/main", cwd=repo.work)
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("No changes")

    changed = diff(
        "git:.@origin/main",
        "git:.@HEAD",
        "--format",
        "json",
        "--at",
        "2026-03-07T12:00:00",
        cwd=repo.work,
    )
    assert changed.returncode == 1, changed.stderr
    body = json.loads(changed.stdout)
    (job,) = body["jobs"]
    assert job["name"] == "nightly" and job["change"] == "changed"
    assert job["nextFires"]["before"][0] == "2026-03-08T03:00:00+00:00"
    assert job["nextFires"]["after"][0] == "2026-03-08T04:30:00+00:00"
    assert body["to"]["revision"] == repo.rev_parse("HEAD")

    md = diff("git:.@origin/main", "git:.@HEAD", "--format", "markdown", cwd=repo.work)
    assert md.returncode == 1 and "| ~ | `nightly` | `30 4 * * *` |" in md.stdout

    repo.commit({"jobs.yaml": "jobs: [{name: x}]\n"}, "broken")
    broken = diff("git:.@origin/main", "git:.@HEAD", cwd=repo.work)
    assert broken.returncode == 2
    assert "jobs.yaml:1:" in broken.stderr and "missing required key" in broken.stderr

    unknown = diff("git:.@origin/main", "git:.@no-such-ref", cwd=repo.work)
    assert unknown.returncode == 2
    assert "no-such-ref" in unknown.stderr


def test_diff_against_a_remote_source_spec(
    tmp_path: Path, origin: tuple[WorkRepo, GitDaemon]
) -> None:
    repo, server = origin
    out = tmp_path / "unused"
    repo.commit({"jobs.yaml": job_file("nightly", out, "0 3 * * *")}, "base")
    repo.push()
    local = tmp_path / "local"
    local.mkdir()
    (local / "jobs.yaml").write_text(job_file("nightly", out, "0 3 * * *"))
    result = diff(server.url("cron.git"), str(local), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (local / "jobs.yaml").write_text(job_file("nightly", out, "0 5 * * *"))
    result = diff(server.url("cron.git"), str(local), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "~ job nightly" in result.stdout


def test_restart_after_a_bad_push_runs_the_last_applied_revision(
    tmp_path: Path, origin: tuple[WorkRepo, GitDaemon]
) -> None:
    repo, server = origin
    out = tmp_path / "fires"
    good = repo.commit({"jobs.yaml": job_file("good", out, "* * * * * * *")}, "good")
    repo.push()
    spec = f"{server.url('cron.git')}?interval=0.5"
    cache = tmp_path / "cache"
    first = follower(spec, cache, tmp_path / "first.log").start()
    try:
        wait_for(lambda: len(lines(out)) >= 1)  # applied, and so recorded as last good
    finally:
        first.stop(30)

    repo.commit({"jobs.yaml": "jobs: [{name: broken}]\n"}, "bad")
    repo.push()
    second = follower(spec, cache, tmp_path / "second.log").start()
    try:
        before = len(lines(out))
        wait_for(lambda: len(lines(out)) >= before + 2)  # the good job keeps firing
        text = second.output()
        assert "rejected" in text
        assert f"starting from the last applied one, {good}" in text
    finally:
        status = second.stop(30)
    assert status == 0
