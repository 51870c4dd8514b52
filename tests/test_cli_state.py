"""``cronstable state ls|get|rm`` run as a real process, on a real directory store (one
of them filled by a real daemon) and on a real etcd."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for
from etcd_server import EtcdServer, free_port

from cronstable.platform import boot_id, process_start_ticks
from cronstable.state.base import Record, StateStore, key, node_key
from cronstable.state.etcd import EtcdStore
from cronstable.state.filesystem import FilesystemStore

pytestmark = [pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def put_all(store: StateStore, records: dict[str, Record]) -> None:
    async def main() -> None:
        try:
            for k, record in records.items():
                await store.put(k, record)
        finally:
            await store.close()

    asyncio.run(main())


def listed(store: StateStore) -> list[str]:
    async def main() -> list[str]:
        try:
            return list(await store.list(""))
        finally:
            await store.close()

    return asyncio.run(main())


RECORDS: dict[str, Record] = {
    node_key("n1", "retries", "backup/nightly"): {
        "job": "backup/nightly",
        "digest": "v1:a",
        "status": "pending",
        "count": 2,
        "notBefore": "2026-12-01T10:00:30Z",
        "scheduled": "2026-12-01T10:00:00Z",
    },
    node_key("n1", "fires", "report"): {
        "job": "report",
        "digest": "v1:b",
        "fire": "2026-12-01T09:00:00Z",
    },
    node_key("n1", "history", "report"): {
        "job": "report",
        "runs": [
            {"outcome": "failed", "finishedAt": "2026-12-01T08:00:01Z"},
            {"outcome": "succeeded", "finishedAt": "2026-12-01T09:00:01Z"},
        ],
    },
    node_key("n2", "retries", "report"): {"job": "report", "status": "settled", "reason": "x"},
    key("cluster", "reboot", "migrate"): {
        "job": "migrate",
        "digest": "v1:c",
        "node": "n2",
        "at": "2026-12-01T07:00:00Z",
    },
}


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(configuration, state directory) of a filesystem store holding :data:`RECORDS`."""
    conf = write(
        tmp_path / "conf" / "c.yaml",
        """\
        state: {backend: filesystem}
        jobs: [{name: report, command: "true", schedule: "@daily"}]
        """,
    )
    state_dir = tmp_path / "state"
    put_all(FilesystemStore(state_dir), RECORDS)
    yield conf, state_dir


def state(conf: Path, state_dir: Path, *args: str, node: str = "n1") -> list[str]:
    return [
        "state",
        *args,
        "-c",
        str(conf),
        "--state-dir",
        str(state_dir),
        "--node-name",
        node,
    ]


def test_ls_lists_this_nodes_records_with_decoded_keys(fs: tuple[Path, Path]) -> None:
    result = cli(*state(*fs, "ls"))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["KEY", "KIND", "JOB", "SUMMARY"]
    assert [row[:3] for row in rows[1:]] == [
        ["fires/report", "fire", "report"],
        ["history/report", "history", "report"],
        ["retries/backup/nightly", "retry", "backup/nightly"],
    ]
    lines = result.stdout.splitlines()
    assert lines[1].endswith("last fire 2026-12-01T09:00:00Z")
    assert lines[2].endswith("2 runs, last succeeded at 2026-12-01T09:00:01Z")
    assert lines[3].endswith("pending, 2 retries so far, next not before 2026-12-01T10:00:30Z")


def test_ls_all_nodes_prefix_and_json(fs: tuple[Path, Path]) -> None:
    result = cli(*state(*fs, "ls", "--all-nodes"))
    assert result.returncode == 0, result.stderr
    keys = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert keys == [
        "cluster/reboot/migrate",
        "nodes/n1/fires/report",
        "nodes/n1/history/report",
        "nodes/n1/retries/backup/nightly",
        "nodes/n2/retries/report",
    ]
    assert "ran by node n2 at 2026-12-01T07:00:00Z" in result.stdout
    assert "settled (x)" in result.stdout

    result = cli(*state(*fs, "ls", "retries/", "--format", "json"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "key": "retries/backup/nightly",
            "record": {**RECORDS[node_key("n1", "retries", "backup/nightly")], "version": 1},
        }
    ]
    # another node's records, as this node's
    result = cli(*state(*fs, "ls", "--format", "json", node="n2"))
    assert [item["key"] for item in json.loads(result.stdout)] == ["retries/report"]

    result = cli(*state(*fs, "ls", node="n3"))
    assert result.returncode == 0
    assert result.stdout == ""
    assert "no records of node n3" in result.stderr


def test_get_prints_a_record_and_exits_1_when_absent(fs: tuple[Path, Path]) -> None:
    result = cli(*state(*fs, "get", "retries/backup/nightly"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        **RECORDS[node_key("n1", "retries", "backup/nightly")],
        "version": 1,
    }
    assert result.stdout.startswith("{\n  ")  # pretty

    # another node's, and the cluster's, by their full keys; --format json as ls gives it
    result = cli(*state(*fs, "get", "nodes/n2/retries/report", "--format", "json"))
    assert json.loads(result.stdout)["record"]["reason"] == "x"
    assert json.loads(result.stdout)["key"] == "nodes/n2/retries/report"
    result = cli(*state(*fs, "get", "cluster/reboot/migrate"))
    assert json.loads(result.stdout)["node"] == "n2"

    result = cli(*state(*fs, "get", "retries/backup"))  # a prefix of a key is not the key
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no record retries/backup" in result.stderr

    result = cli(*state(*fs, "get", "backup"))
    assert result.returncode == 2
    assert "is not a key" in result.stderr


def test_rm_one_key_then_several_need_yes(fs: tuple[Path, Path]) -> None:
    conf, state_dir = fs
    result = cli(*state(*fs, "rm", "fires/report"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "removed fires/report\n"
    assert node_key("n1", "fires", "report") not in listed(FilesystemStore(state_dir))

    result = cli(*state(*fs, "rm", "fires/report"))
    assert result.returncode == 1
    assert "no record fires/report" in result.stderr

    # two keys: refused without --yes, and nothing is removed
    two = ("history/report", "retries/backup/nightly")
    result = cli(*state(*fs, "rm", *two))
    assert result.returncode == 2
    assert "give --yes to remove 2 records" in result.stderr
    assert result.stdout == ""
    assert len(listed(FilesystemStore(state_dir))) == 4

    result = cli(*state(*fs, "rm", *two, "nope/x", "--yes"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "removed history/report",
        "removed retries/backup/nightly",
    ]
    assert "no record nope/x" in result.stderr
    assert sorted(listed(FilesystemStore(state_dir))) == [
        key("cluster", "reboot", "migrate"),
        node_key("n2", "retries", "report"),
    ]


def test_rm_job_removes_that_jobs_records_on_this_node(fs: tuple[Path, Path]) -> None:
    conf, state_dir = fs
    result = cli(*state(*fs, "rm", "--job", "report"))
    assert result.returncode == 2
    assert "would remove fires/report" in result.stderr

    result = cli(*state(*fs, "rm", "--job", "report", "--yes"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["removed fires/report", "removed history/report"]
    left = listed(FilesystemStore(state_dir))
    assert node_key("n2", "retries", "report") in left  # another node's stays

    result = cli(*state(*fs, "rm", "--job", "report"))
    assert result.returncode == 1
    assert "no record of job 'report' on node n1" in result.stderr

    result = cli(*state(*fs, "rm", "--job", "report", "fires/report"))
    assert result.returncode == 2


def test_rm_of_a_live_runs_record_needs_yes(fs: tuple[Path, Path]) -> None:
    conf, state_dir = fs
    proc = subprocess.Popen(["sleep", "30"])
    try:
        ticks = process_start_ticks(proc.pid)
        assert ticks is not None and boot_id() is not None
        run = "sleeper@2026-12-01T10:00:00Z#1"
        put_all(
            FilesystemStore(state_dir),
            {
                node_key("n1", "running", run): {
                    "job": "sleeper",
                    "runId": run,
                    "pid": proc.pid,
                    "startTicks": ticks,
                    "bootId": boot_id(),
                    "startedAt": "2026-12-01T10:00:00Z",
                }
            },
        )
        result = cli(*state(*fs, "rm", f"running/{run}"))
        assert result.returncode == 2
        assert f"pid {proc.pid} is still running" in result.stderr
        assert "second copy of a Forbid job" in result.stderr

        result = cli(*state(*fs, "rm", f"running/{run}", "--yes"))
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"removed running/{run}\n"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("layout", ["log", "old files"])
def test_a_record_this_version_cannot_read(fs: tuple[Path, Path], layout: str) -> None:
    conf, state_dir = fs
    # a record from a later format: written through the store, or (the older layout,
    # imported by the CLI's first use of the directory) the file filesystem.py wrote
    if layout == "log":
        put_all(FilesystemStore(state_dir), {node_key("n1", "retries", "old"): {"version": 99}})
    else:
        (state_dir / "records.log").unlink()
        put_all(FilesystemStore(state_dir, shared=True), RECORDS)
        (state_dir / "nodes" / "n1" / "retries" / "old.json").write_text('{"version": 99}')
    result = cli(*state(*fs, "ls", "retries/old"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split(None, 3) == [
        "retries/old",
        "retry",
        "old",
        "unreadable (not a record this version of cronstable writes)",
    ]
    result = cli(*state(*fs, "get", "retries/old"))
    assert result.returncode == 1
    assert "cannot read (remove it with rm)" in result.stderr
    result = cli(*state(*fs, "rm", "retries/old"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "removed retries/old\n"
    assert sorted(p.name for p in state_dir.iterdir()) == ["records.log"]
    assert len(listed(FilesystemStore(state_dir))) == len(RECORDS)


def test_node_name_from_the_environment(fs: tuple[Path, Path]) -> None:
    conf, state_dir = fs
    args = ["state", "ls", "-c", str(conf), "--state-dir", str(state_dir), "--format", "json"]
    result = cli(*args, env={"CRONSTABLE_NODE_NAME": "n2"})
    assert [item["key"] for item in json.loads(result.stdout)] == ["retries/report"]


def test_a_configuration_without_state_or_invalid(tmp_path: Path) -> None:
    conf = write(tmp_path / "c.yaml", 'jobs: [{name: a, command: "true", schedule: "@daily"}]\n')
    result = cli("state", "ls", "-c", str(conf), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"cronstable state: {conf} has no state section, so a daemon running it keeps no "
        "records (give the configuration the daemon runs with -c PATH)"
    ]
    # the global -c works too
    assert cli("-c", str(conf), "state", "ls").returncode == 2

    bad = write(tmp_path / "bad.yaml", "state: {backend: disk}\n")
    result = cli("state", "ls", "-c", str(bad))
    assert result.returncode == 1
    assert "invalid" in result.stderr


@pytest.mark.slow  # a real `cronstable run`, started twice
def test_records_of_a_real_daemon(tmp_path: Path) -> None:
    """A daemon with a state section runs its @reboot job once and stops; ls shows the
    marker and the history it left; rm --job clears them, so the next start runs the
    @reboot job again in the same boot."""
    out = tmp_path / "boot.out"
    conf = write(
        tmp_path / "conf" / "c.yaml",
        f"""\
        state: {{backend: filesystem}}
        jobs:
          - name: boot/once
            command: echo ran >> {out}
            schedule: "@reboot"
        """,
    )
    state_dir = tmp_path / "state"
    where = ["-c", str(conf), "--state-dir", str(state_dir), "--node-name", "n1"]

    daemon = DaemonProcess(None, tmp_path / "daemon.log", args=where)

    def run_daemon_until(runs: int) -> None:
        daemon.start()
        try:
            wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= runs, 15)
            assert daemon.stop(30) == 0
        finally:
            daemon.kill9()

    run_daemon_until(1)
    result = cli("state", "ls", *where)
    assert result.returncode == 0, result.stderr
    rows = [line.split(None, 3) for line in result.stdout.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        ["history/boot/once", "history", "boot/once"],
        ["reboot/boot/once", "reboot", "boot/once"],
    ]
    assert rows[0][3].startswith("1 run, last succeeded at ")
    assert rows[1][3].startswith(f"boot {boot_id()}, at ")

    result = cli("state", "get", "reboot/boot/once", *where)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bootId"] == boot_id()

    result = cli("state", "rm", "--job", "boot/once", "--yes", *where)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["removed history/boot/once", "removed reboot/boot/once"]
    # without its marker, this boot's next start runs the @reboot job again
    run_daemon_until(2)
    assert out.read_text().splitlines() == ["ran", "ran"]


def etcd_conf(tmp_path: Path, endpoint: str, prefix: str) -> Path:
    return write(
        tmp_path / "etcd-conf" / "c.yaml",
        f"""\
        cluster:
          backend: etcd
          etcd: {{endpoints: ["{endpoint}"], prefix: "{prefix}"}}
        state: {{backend: etcd}}
        jobs: [{{name: report, command: "true", schedule: "@daily"}}]
        """,
    )


def test_ls_get_rm_on_etcd(
    tmp_path: Path, shared_etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    put_all(EtcdStore([shared_etcd_server.endpoint], prefix=etcd_prefix), RECORDS)
    conf = etcd_conf(tmp_path, shared_etcd_server.endpoint, etcd_prefix)
    where = ["-c", str(conf), "--node-name", "n1"]

    result = cli("state", "ls", *where)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == [
        "fires/report",
        "history/report",
        "retries/backup/nightly",
    ]
    result = cli("state", "ls", "--all-nodes", "--format", "json", *where)
    assert len(json.loads(result.stdout)) == len(RECORDS)

    result = cli("state", "get", "retries/backup/nightly", *where)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["count"] == 2

    result = cli("state", "rm", "retries/backup/nightly", *where)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "removed retries/backup/nightly\n"
    left = listed(EtcdStore([shared_etcd_server.endpoint], prefix=etcd_prefix))
    assert node_key("n1", "retries", "backup/nightly") not in left
    assert len(left) == len(RECORDS) - 1
    assert cli("state", "get", "retries/backup/nightly", *where).returncode == 1


def test_a_store_that_cannot_be_reached_is_one_redacted_line(tmp_path: Path) -> None:
    endpoint = f"http://deploy:s3cret@127.0.0.1:{free_port()}"
    conf = etcd_conf(tmp_path, endpoint, "/t/none/")
    result = cli("state", "ls", "-c", str(conf), "--node-name", "n1")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("cronstable state: ")
    assert "s3cret" not in result.stderr

    # an incomplete etcd login in the environment
    result = cli("state", "ls", "-c", str(conf), env={"CRONSTABLE_ETCD_USERNAME": "deploy"})
    assert result.returncode == 2
    assert "CRONSTABLE_ETCD_PASSWORD" in result.stderr
