"""The job-side clients in real daemons: jobs that call ``cronstable state get`` and
``cronstable lock`` as the daemon runs them.

* One daemon: a job reads its own state through a failure, a pending retry and a success;
  another job reads it from outside; the socket and its directory are closed to others;
  a run's token is refused on another run's socket, and once its run ended its socket
  is gone.
* Two daemons sharing a cluster (a real etcd, a shared directory): their jobs take one
  lock every second, and the lock's own stamps show no two holders at once, on both
  nodes; a node killed with SIGKILL while it holds the lock stops its command (the lock
  is lost with its daemon) and the other node takes over once the record expires.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import ClusterBackend
from daemon_proc import DaemonProcess, http, stop_all, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

REPO = Path(__file__).resolve().parent.parent
CLI = f"{sys.executable} -m cronstable"


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A runtime directory short enough for the runs' socket paths."""
    made = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def daemon_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_RUN_")}
    return env | {"PYTHONPATH": str(REPO), "TZ": "UTC"} | more


# ------------------------------------------------------------ one daemon


def one_daemon_config(out: Path) -> str:
    return textwrap.dedent(
        f"""\
        web:
          listen: ["http://127.0.0.1:0"]
          authToken: {{value: t0ken}}
        jobs:
          - name: export
            command: >-
              {CLI} state get > {out}/export.tmp;
              mv {out}/export.tmp {out}/export.$CRONSTABLE_ATTEMPT.json;
              stat -c '%a %u' "$(dirname "$(dirname "$CRONSTABLE_RUN_SOCKET")")"
              "$(dirname "$CRONSTABLE_RUN_SOCKET")" "$CRONSTABLE_RUN_SOCKET" > {out}/modes.tmp;
              mv {out}/modes.tmp {out}/modes;
              test "$CRONSTABLE_ATTEMPT" -ge 2
            schedule: "@reboot"
            onFailure:
              retry: {{maximumRetries: 1, initialDelay: 6, maximumDelay: 6}}
          - name: peek
            command: {CLI} state get export > {out}/peek.tmp && mv {out}/peek.tmp {out}/peek.json
            schedule: "@yearly"
          - name: holder
            command: >-
              echo "$CRONSTABLE_RUN_SOCKET $CRONSTABLE_RUN_TOKEN" > {out}/holder.tmp &&
              mv {out}/holder.tmp {out}/holder; while [ ! -e {out}/holder-go ]; do sleep 0.05; done
            schedule: "@yearly"
          - name: thief
            command: >-
              read path token < {out}/holder;
              CRONSTABLE_RUN_TOKEN=$token {CLI} state get > {out}/stolen.json 2>> {out}/thief.err;
              echo "other-token $?" >> {out}/thief;
              CRONSTABLE_RUN_TOKEN=forged {CLI} state get > /dev/null 2>> {out}/thief.err;
              echo "forged $?" >> {out}/thief;
              {CLI} state get > {out}/own.json 2>> {out}/thief.err;
              echo "own $?" >> {out}/thief
            schedule: "@yearly"
        """
    )


def start(url: str, job: str) -> None:
    status, _, body = http(
        f"{url}/jobs/{job}/start", "POST", headers={"Authorization": "Bearer t0ken"}
    )
    assert status in (200, 202), body


def test_a_job_reads_its_state_and_no_run_acts_for_another(
    tmp_path: Path, runtime: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "cronstable.yaml").write_text(one_daemon_config(out))
    daemon = DaemonProcess(
        conf, tmp_path / "d.log", args=["--runtime-dir", str(runtime)], env=daemon_env()
    )
    daemon_procs.append(daemon.start())
    url = daemon.url()
    # attempt 1 (the @reboot run) knows no run before it, and fails: a retry is armed
    first = out / "export.1.json"
    wait_for(first.exists, what="attempt 1's state")
    state = json.loads(first.read_text())
    assert state["job"] == "export"
    assert (state["lastRun"], state["lastSuccess"], state["pendingRetry"]) == (None, None, None)
    assert [run["attempt"] for run in state["running"]] == [1]  # itself
    daemon.wait_log(r"Job export: retry 1 of 1 in")
    # another job reads export's state meanwhile: its failure and the retry to come
    start(url, "peek")
    peek = out / "peek.json"
    wait_for(peek.exists, what="peek's answer")
    seen = json.loads(peek.read_text())
    assert seen["lastRun"]["outcome"] == "failed" and seen["lastRun"]["attempt"] == 1
    assert seen["pendingRetry"]["attempt"] == 2
    assert seen["pendingRetry"]["due"] > seen["lastRun"]["finishedAt"]
    # attempt 2 sees attempt 1's failure, and succeeds
    second = out / "export.2.json"
    wait_for(second.exists, timeout=30, what="attempt 2's state")
    state = json.loads(second.read_text())
    assert state["lastRun"]["outcome"] == "failed" and state["lastSuccess"] is None
    assert state["pendingRetry"] is None
    daemon.wait_log(r"Job export finished: succeeded")
    # a run started later sees that success as its last one
    (out / "export.1.json").unlink()
    start(url, "export")
    wait_for(first.exists, what="the manual run's state")
    state = json.loads(first.read_text())
    assert state["lastSuccess"]["attempt"] == 2 and state["lastSuccess"]["outcome"] == "succeeded"
    # the node's socket: the runs' directory and the daemon's 0711 and the socket 0666 as
    # root (a token serves its run's user only), else 0700 and 0600
    root = os.geteuid() == 0
    runs, home, sock = (line.split() for line in (out / "modes").read_text().splitlines())
    assert runs == ["711" if root else "700", str(os.geteuid())]
    assert home == ["711" if root else "700", str(os.geteuid())]
    assert sock == ["666" if root else "600", str(os.geteuid())]
    # every run has the one socket; a token is its run's (the holder's answers as the
    # holder), a forged one nothing
    start(url, "holder")
    wait_for((out / "holder").exists, what="holder running")
    holder_socket = (out / "holder").read_text().split()[0]
    start(url, "thief")
    wait_for(lambda: len(_lines(out / "thief")) == 3, what="the thief's three tries")
    assert _lines(out / "thief") == ["other-token 0", "forged 4", "own 0"]
    assert json.loads((out / "stolen.json").read_text())["job"] == "holder"
    assert json.loads((out / "own.json").read_text())["job"] == "thief"
    # once the holder's run ended its token reaches nothing; the socket serves the others
    (out / "holder-go").touch()
    daemon.wait_log(r"Job holder finished: succeeded")
    assert os.path.exists(holder_socket)
    (out / "thief").unlink()
    start(url, "thief")
    wait_for(lambda: len(_lines(out / "thief")) == 3, what="the thief's tries, late")
    assert _lines(out / "thief") == ["other-token 4", "forged 4", "own 0"]
    assert "no run's going" in (out / "thief.err").read_text()
    assert daemon.stop() == 0
    assert not (runtime / "runs").exists()  # every run's socket removed, then the directory


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# ------------------------------------------------------------ two daemons, one lock

TTL = 2
STAMP = 'echo "$CRONSTABLE_NODE_NAME {what} $EPOCHREALTIME" >> "$RUNS"'


class Cluster:
    def __init__(self, root: Path, runtime: Path, backend: ClusterBackend) -> None:
        self.root = root
        self.runtime = runtime
        self.out = root / "runs"
        self.exits = root / "exits"
        self.config = root / "config"
        self.config.mkdir()
        body = root / "body.sh"
        body.write_text(
            f"trap '{STAMP.format(what='end')}; exit 1' TERM\n"
            f"{STAMP.format(what='start')}\n"
            "sleep 0.3 & wait\n"
            f"{STAMP.format(what='end')}\n"
        )
        command = f'{CLI} lock db -- bash {body}; echo "$CRONSTABLE_NODE_NAME $?" >> {self.exits}'
        (self.config / "cronstable.yaml").write_text(
            backend.yaml(TTL)
            + textwrap.dedent(
                f"""\
                jobs:
                  - name: a
                    command: {json.dumps(command)}
                    schedule: "* * * * * * *"
                """
            )
        )
        self.daemons: dict[str, DaemonProcess] = {}

    def start(self, name: str) -> DaemonProcess:
        (self.runtime / name).mkdir(exist_ok=True)
        daemon = self.daemons[name] = DaemonProcess(
            self.config,
            self.root / f"{name}.log",
            args=["--node-name", name, "--runtime-dir", str(self.runtime / name)],
            env=daemon_env(CRONSTABLE_NODE_NAME=name, RUNS=str(self.out)),
        )
        return daemon.start()

    def events(self) -> list[tuple[float, str, str]]:
        """(time, start|end, node) of every stamp, by time."""
        if not self.out.exists():
            return []
        found = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                node, what, when = parts
                found.append((float(when), what, node))
        return sorted(found)


def most_at_once(events: list[tuple[float, str, str]]) -> int:
    going = top = 0
    for _, what, _ in events:
        going += 1 if what == "start" else -1
        top = max(top, going)
    return top


@pytest.fixture
def cluster(cluster_backend: ClusterBackend, tmp_path: Path, runtime: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, runtime, cluster_backend)
    try:
        yield made
    finally:
        stop_all(list(made.daemons.values()), signals=2, timeout=15)


@pytest.mark.parametrize("cluster_backend", ["etcd", "filesystem"], indirect=True)
def test_two_daemons_never_hold_one_lock_at_once(cluster: Cluster) -> None:
    n1, n2 = cluster.start("n1"), cluster.start("n2")
    n1.wait_log(r"Cluster locks: cronstable lock holds its locks in")

    def both_held() -> bool:
        nodes = {node for _, what, node in cluster.events() if what == "end"}
        return nodes == {"n1", "n2"} and len(cluster.events()) >= 16

    wait_for(both_held, timeout=45, what="each node held the lock, eight times in all")
    assert most_at_once(cluster.events()) == 1
    assert "(in the cluster)" in n1.current() and "(in the cluster)" in n2.current()
    # n1 dies while its job holds the lock: its client stops the command (exit 69), and
    # n2 holds the lock once n1's record expired, never before
    n1.wait_log(r"run a@\S+ holds lock db", count=1)
    wait_for(
        lambda: cluster.events() and cluster.events()[-1][1:] == ("start", "n1"),
        timeout=30,
        what="n1 holding the lock",
    )
    n1.kill9()
    killed = time.time()
    wait_for(lambda: "n1 69" in _lines(cluster.exits), timeout=20, what="n1's command stopped")
    wait_for(
        lambda: any(
            what == "start" and node == "n2" and when > killed
            for when, what, node in cluster.events()
        ),
        timeout=30,
        what="n2 holding the lock after n1 died",
    )
    stop_all([n2], signals=2, timeout=15)
    events = cluster.events()
    assert most_at_once(events) == 1  # the whole history, n1's last hold included
    n1_end = max(when for when, what, node in events if node == "n1" and what == "end")
    n2_after = min(when for when, what, node in events if node == "n2" and when > killed)
    assert n1_end < n2_after
