"""Tests of cronstable.runtime.identity, and of jobs really running as another user."""

from __future__ import annotations

import grp
import json
import os
import pwd
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from cronstable.config import Job, MemoryTree, load
from cronstable.errors import CronstableError
from cronstable.runtime.identity import Identity, IdentityError, resolve_identity
from cronstable.runtime.process import JobProcess

pytestmark = pytest.mark.timeout(15)

IS_ROOT = os.geteuid() == 0


def _entry(kind: str, name: str) -> Any:
    try:
        return pwd.getpwnam(name) if kind == "user" else grp.getgrnam(name)
    except KeyError:
        return None


NOBODY = _entry("user", "nobody")
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs a root daemon")
needs_nobody = pytest.mark.skipif(NOBODY is None, reason="no 'nobody' user")


def nobody_identity() -> Identity:
    assert NOBODY is not None
    groups = tuple(os.getgrouplist("nobody", NOBODY.pw_gid))
    return Identity(uid=NOBODY.pw_uid, gid=NOBODY.pw_gid, extra_groups=groups)


def unused_id(kind: str) -> int:
    lookup = pwd.getpwuid if kind == "user" else grp.getgrgid
    for candidate in range(4_000_000, 4_000_100):
        try:
            lookup(candidate)
        except KeyError:
            return candidate
    raise AssertionError("no unused id")


# ------------------------------------------------------------------ resolution


def test_nothing_set_is_none() -> None:
    assert resolve_identity(None, None) is None


def test_own_identity_needs_no_switch() -> None:
    me = pwd.getpwuid(os.geteuid())
    own_groups = set(os.getgroups()) | {os.getegid()}
    listed = set(os.getgrouplist(me.pw_name, me.pw_gid)) | {me.pw_gid}
    expected = (
        None
        if me.pw_gid == os.getegid() and (listed == own_groups or not IS_ROOT)
        else Identity(me.pw_uid, me.pw_gid, tuple(os.getgrouplist(me.pw_name, me.pw_gid)))
    )
    assert resolve_identity(me.pw_name, None) == expected
    assert resolve_identity(str(me.pw_uid), None) == expected
    assert resolve_identity(str(me.pw_uid), str(me.pw_gid)) == expected


@needs_root
def test_root_by_name_and_by_uid() -> None:
    by_name = resolve_identity("root", None)
    assert by_name == resolve_identity("0", None) == resolve_identity("0", "root")
    assert by_name is None or (by_name.uid, by_name.gid) == (0, 0)


@needs_root
@needs_nobody
def test_user_brings_its_primary_and_supplementary_groups() -> None:
    assert resolve_identity("nobody", None) == nobody_identity()
    assert resolve_identity(str(NOBODY.pw_uid), None) == nobody_identity()


@needs_root
@needs_nobody
def test_group_overrides_the_gid_only() -> None:
    base = nobody_identity()
    assert resolve_identity("nobody", "root") == Identity(base.uid, 0, base.extra_groups)
    assert resolve_identity("nobody", "4242") == Identity(base.uid, 4242, base.extra_groups)


@needs_root
def test_group_only_keeps_the_daemons_user() -> None:
    gid = unused_id("group")
    assert resolve_identity(None, str(gid)) == Identity(os.geteuid(), gid, tuple(os.getgroups()))
    assert resolve_identity(None, str(os.getegid())) is None


@needs_root
def test_uid_without_passwd_entry_needs_a_group() -> None:
    uid = unused_id("user")
    with pytest.raises(IdentityError, match="has no passwd entry"):
        resolve_identity(str(uid), None)
    assert resolve_identity(str(uid), str(uid)) == Identity(uid, uid, ())


def test_unknown_user_and_group() -> None:
    with pytest.raises(IdentityError) as info:
        resolve_identity("nosuch", None)
    assert info.value.message == str(info.value) == "user 'nosuch' does not exist"
    assert isinstance(info.value, CronstableError)
    with pytest.raises(IdentityError, match="^group 'nosuchgroup' does not exist$"):
        resolve_identity(None, "nosuchgroup")
    with pytest.raises(IdentityError, match="^group 'nosuchgroup' does not exist$"):
        resolve_identity("root", "nosuchgroup")


def test_ids_out_of_range() -> None:
    with pytest.raises(IdentityError, match="uid 99999999999 is out of range"):
        resolve_identity("99999999999", None)
    with pytest.raises(IdentityError, match="gid 4294967295 is out of range"):
        resolve_identity(None, "4294967295")


def _resolve_as_nobody(cases: list[tuple[str | None, str | None]]) -> list[Any]:
    """Run resolve_identity in a forked child that really dropped to nobody."""
    assert NOBODY is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            out: list[Any] = []
            for user, group in cases:
                try:
                    found = resolve_identity(user, group)
                    out.append(None if found is None else [found.uid, found.gid])
                except IdentityError as exc:
                    out.append(exc.message)
            os.write(write_end, json.dumps(out).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(data)  # type: ignore[no-any-return]


@needs_root
@needs_nobody
def test_non_root_daemon_cannot_switch() -> None:
    uid, gid = NOBODY.pw_uid, NOBODY.pw_gid
    results = _resolve_as_nobody(
        [
            ("root", None),
            ("0", None),
            (None, "root"),
            ("nobody", None),
            (str(uid), str(gid)),
            (None, str(gid)),
            ("nosuch", None),
        ]
    )
    assert results == [
        "job wants to run as user 'root' (uid 0) but the daemon is not running as root",
        "job wants to run as user '0' (uid 0) but the daemon is not running as root",
        "job wants to run with group 'root' (gid 0) but the daemon is not running as root",
        None,
        None,
        None,
        "user 'nosuch' does not exist",
    ]


# ---------------------------------------------------------- running as nobody


def make_job(command: str, **settings: Any) -> Job:
    entry = {"name": "as-nobody", "schedule": "* * * * *", "command": command, **settings}
    text = yaml.safe_dump({"jobs": [entry]})
    return load(MemoryTree({"c.yaml": text.encode()}), "c.yaml").jobs["as-nobody"]


async def run_as(job: Job, identity: Identity | None) -> Any:
    proc = JobProcess(
        job, scheduled_time=datetime(2026, 3, 8, 7, 0, tzinfo=UTC), attempt=1, identity=identity
    )
    await proc.start()
    return await proc.wait()


@needs_root
@needs_nobody
@pytest.mark.asyncio
async def test_job_really_runs_as_nobody() -> None:
    job = make_job("id -u; id -g; id -G", user="nobody", captureStdout=True)
    identity = resolve_identity(job.config.user, job.config.group)
    assert identity is not None
    result = await run_as(job, identity)
    assert result.returncode == 0, result.stderr
    uid, gid, groups = (result.stdout or "").splitlines()
    assert (int(uid), int(gid)) == (NOBODY.pw_uid, NOBODY.pw_gid)
    assert set(map(int, groups.split())) == set(identity.extra_groups) | {int(gid)}


@needs_root
@needs_nobody
@pytest.mark.asyncio
async def test_group_override_and_priority_as_nobody() -> None:
    job = make_job(
        "sleep 0.2; id -g; ps -o ni= -p $$",
        user="nobody",
        group="0",
        priority=5,
        captureStdout=True,
    )
    result = await run_as(job, resolve_identity("nobody", "0"))
    assert result.returncode == 0, result.stderr
    assert [line.strip() for line in (result.stdout or "").splitlines()] == ["0", "5"]


@needs_root
@needs_nobody
@pytest.mark.asyncio
async def test_timeout_stops_a_job_running_as_nobody() -> None:
    job = make_job("sleep 300 & sleep 300", user="nobody", executionTimeout=0.3)
    result = await run_as(job, nobody_identity())
    assert result.returncode == -100 and result.timed_out
    assert result.duration < 2
