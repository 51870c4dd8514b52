"""Credentials in a source spec never reach stdout or stderr, whatever the command and
whatever goes wrong: every command, every error that can be provoked, real servers
on loopback (a git HTTP remote that wants the password, closed ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess
from git_server import GitHttpServer, WorkRepo, free_port

REPO = Path(__file__).resolve().parent.parent
SECRET = "Sup3rS3cretPw"
CONFIG = "jobs:\n  - {name: a, command: 'true', schedule: '@daily'}\n"


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)},
    )


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An HTTP git remote that wants deploy:SECRET; its base URL and a local config dir."""
    root = tmp_path_factory.mktemp("remote")
    work = WorkRepo.create(root, name="cron")
    work.commit({"ops/c.yaml": CONFIG}, "config")
    work.push()
    local = root / "local"
    local.mkdir()
    (local / "c.yaml").write_text(CONFIG)
    with GitHttpServer(root, credentials=("deploy", SECRET)) as server:
        yield f"127.0.0.1:{server.port}", local


def error_specs(http: str) -> dict[str, str]:
    closed = f"127.0.0.1:{free_port()}"
    user = f"deploy:{SECRET}"
    return {
        "unknown scheme": f"https://{user}@{closed}/cron.git",
        "unknown scheme (ftp)": f"ftp://{user}@{closed}/cron.git",
        "typo'd option": f"git+https://{user}@{closed}/cron.git?branch=main",
        "secret in an option": f"git+http://{closed}/cron.git?token={SECRET}",
        "bad interval": f"git+http://{user}@{closed}/cron.git?interval=soon",
        "https, closed port": f"git+https://{user}@{closed}/cron.git",
        "http, closed port": f"git+http://{user}@{closed}/cron.git?path=ops",
        "token as user name": f"git+https://{SECRET}@{closed}/cron.git",
        "git://, closed port": f"git://{user}@{closed}/cron.git",
        "ssh password": f"git+ssh://{user}@{closed}/cron.git",
        "etcd, closed port": f"etcd://{user}@{closed}/cron/",
        "etcd, no port": f"etcd://{user}@127.0.0.1/cron/",
        "bad ref": f"git+http://{user}@{http}/cron.git?ref=no-such-branch&path=ops",
        "missing path": f"git+http://{user}@{http}/cron.git?path=no/such/dir",
        "wrong password": f"git+http://deploy:x{SECRET}x@{http}/cron.git?path=ops",
    }


COMMANDS = {
    "validate": lambda spec, local, cache: ["validate", spec],
    "next": lambda spec, local, cache: ["next", spec],
    "job-set-id": lambda spec, local, cache: ["job-set-id", spec],
    "diff OLD": lambda spec, local, cache: ["diff", spec, str(local)],
    "diff NEW": lambda spec, local, cache: ["diff", str(local), spec],
    "run": lambda spec, local, cache: ["run", "--cache-dir", str(cache), spec],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_error_path_prints_the_password(
    command: str, remote: tuple[str, Path], tmp_path: Path
) -> None:
    http, local = remote
    runs = [
        (why, COMMANDS[command](spec, local, tmp_path / "cache"))
        for why, spec in error_specs(http).items()
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda run: cli(*run[1], cache=tmp_path / "xdg"), runs))
    for (why, args), result in zip(runs, results, strict=True):
        shown = f"{why}: cronstable {' '.join(args)}\n{result.stdout}{result.stderr}"
        assert result.returncode != 0, shown  # every one of them is an error
        assert SECRET not in result.stdout + result.stderr, shown
        assert "Traceback" not in result.stderr, shown
        assert result.stderr.strip(), shown  # and it says so


@pytest.mark.slow
def test_successful_commands_do_not_print_the_password(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    http, local = remote
    spec = f"git+http://deploy:{SECRET}@{http}/cron.git?ref=main&path=ops"
    for args in (
        ["validate", spec],
        ["job-set-id", spec],
        ["next", spec],
        ["diff", spec, str(local)],
        ["diff", "--format", "json", str(local), spec],
        ["diff", "--format", "markdown", spec, str(local)],
    ):
        result = cli(*args, cache=tmp_path)
        shown = f"cronstable {' '.join(args)}\n{result.stdout}{result.stderr}"
        assert result.returncode == 0, shown
        assert SECRET not in result.stdout + result.stderr, shown
    validated = cli("validate", spec, cache=tmp_path)
    assert f"deploy:<hidden>@{http}" in validated.stdout


@pytest.mark.slow
def test_the_daemon_does_not_log_the_password(
    remote: tuple[str, Path], tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    http, _ = remote
    spec = f"git+http://deploy:{SECRET}@{http}/cron.git?path=ops&interval=0.2"
    daemon = DaemonProcess(
        None,
        tmp_path / "daemon.log",
        args=["-l", "DEBUG", "--cache-dir", str(tmp_path / "cache"), spec],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    daemon_procs.append(daemon.start())
    daemon.wait_log(" applied in ", 60)
    daemon.send(signal.SIGHUP)  # a reload logs the source again
    daemon.wait_log("Reload requested", 60)
    assert daemon.stop(60, sig=signal.SIGINT) == 0
    output = daemon.output()
    assert "Stopped" in output
    assert SECRET not in output


USAGE_ERRORS = {
    "a spec where the command goes": ["{spec}"],
    "a second spec to run": ["run", "{spec}", "{spec}"],
    "a spec after diff's two sides": ["diff", "a", "b", "{spec}"],
    "a spec given to schema": ["schema", "{spec}"],
    "a spec as the value of a choice": ["--log-format", "{spec}", "run"],
    "a spec as a limit": ["validate", "--max-yaml-nodes", "{spec}"],
    "a spec as a count": ["next", "-n", "{spec}"],
}


@pytest.mark.parametrize("why", list(USAGE_ERRORS))
def test_usage_errors_do_not_print_the_password(why: str, tmp_path: Path) -> None:
    # argparse quotes what it could not place; those messages go through redact too
    spec = f"git+https://deploy:{SECRET}@127.0.0.1:1/cron.git"
    args = [arg.format(spec=spec) for arg in USAGE_ERRORS[why]]
    result = cli(*args, cache=tmp_path)
    shown = f"{why}: cronstable {' '.join(args)}\n{result.stdout}{result.stderr}"
    assert result.returncode == 2, shown
    assert "error:" in result.stderr, shown
    assert SECRET not in result.stdout + result.stderr, shown


@pytest.mark.parametrize("odd", ["/", "?", "#"])
@pytest.mark.parametrize("scheme", ["git+https", "git", "etcd", "https"])
def test_a_password_with_an_unencoded_slash_question_mark_or_hash_is_refused(
    odd: str, scheme: str, tmp_path: Path
) -> None:
    # parsed as a URL, the host would end at that character: before, pieces of the
    # password reached messages ('unknown git source option(s) SECRET@…',
    # 'https://deploy:pa hung up') where redact could not tell them apart
    spec = f"{scheme}://deploy:pa{odd}{SECRET}@127.0.0.1:{free_port()}/cron/"
    for args in (["validate", spec], ["run", "--cache-dir", str(tmp_path), spec]):
        result = cli(*args, cache=tmp_path)
        shown = f"cronstable {' '.join(args)}\n{result.stdout}{result.stderr}"
        assert result.returncode != 0, shown
        assert SECRET not in result.stdout + result.stderr, shown
        assert "pa" + odd not in result.stdout + result.stderr, shown
        assert f"{scheme}://deploy:<hidden>@127.0.0.1:" in result.stderr, shown
        if scheme != "https":
            assert "percent-encode them (%2F, %3F, %23)" in result.stderr, shown
