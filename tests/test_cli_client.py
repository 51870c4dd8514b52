"""The CLI client against real daemons: HTTP over TCP, TLS and unix sockets, every exit code."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from daemon_proc import DaemonProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "gitops-repo"
ODD_NAME = "reports/daily 50%?#"
"""A job name with every character a path segment must encode."""

CONFIG = """\
web:
  listen:
    - http://127.0.0.1:0
    - https://127.0.0.2:0
    - unix://${{XDG_RUNTIME_DIR}}/cronstable.sock
  tls: {{cert: {cert}, key: {key}}}
  authToken: {{fromEnvVar: ADMIN_TOKEN}}
  authTokens:
    - {{name: grafana, value: read-secret, scopes: [read]}}
    - {{name: ci, value: ci-secret, scopes: [trigger]}}
jobs:
  - name: "{odd}"
    command: echo hello from a manual start
    schedule: "@yearly"
    environment:
      - {{key: PASSWORD, value: hunter2}}
    enabled: false
    captureStdout: true
  - name: sleeper
    command: sleep 60
    schedule: "@yearly"
    concurrencyPolicy: Forbid
    killTimeout: 1
"""


@dataclass
class Daemon:
    http: str
    https: str
    unix: str
    runtime_dir: Path
    ca_file: Path
    log: Path
    conf: Path


def _start(conf: Path, log: Path, env: dict[str, str]) -> tuple[DaemonProcess, list[str]]:
    """The daemon on ``conf`` once it listens and applied its configuration; its URLs."""
    daemon = DaemonProcess(None, log, args=["-c", str(conf)], env=env).start()
    try:
        urls = daemon.urls(30)
        daemon.wait_log(" applied in ", 30)
    except BaseException:
        daemon.kill9()
        raise
    return daemon, urls


def _env(**extra: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_")}
    env["PYTHONPATH"] = str(REPO)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("daemon")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.2")
    cert.private_key_and_cert_chain_pem.write_to_path(str(root / "server.pem"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    conf = root / "conf"
    conf.mkdir()
    (conf / "cronstable.yaml").write_text(
        CONFIG.format(cert=root / "server.pem", key=root / "server.pem", odd=ODD_NAME)
    )
    log = root / "daemon.log"
    proc, urls = _start(conf, log, _env(ADMIN_TOKEN="admin-secret", XDG_RUNTIME_DIR=str(runtime)))
    try:
        [http_url] = [u for u in urls if u.startswith("http://")]
        [https_url] = [u for u in urls if u.startswith("https://")]
        assert f"unix://{runtime}/cronstable.sock" in urls
        yield Daemon(
            http_url,
            https_url,
            f"unix://{runtime}/cronstable.sock",
            runtime,
            root / "ca.pem",
            log,
            conf,
        )
    finally:
        assert proc.stop(30) == 0


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env if env is not None else _env(),
        timeout=timeout,
    )


def as_token(token: str, **extra: str | None) -> dict[str, str]:
    return _env(CRONSTABLE_TOKEN=token, **extra)


def _wait_finished(url: str, job: str) -> dict[str, object]:
    def finished() -> dict[str, object] | None:
        done = cli("runs", job, "--url", url, "--json", env=as_token("read-secret"))
        assert done.returncode == 0, done.stderr
        runs = json.loads(done.stdout)["runs"]
        return dict(runs[0]) if runs and runs[0]["outcome"] != "running" else None

    found: dict[str, object] = wait_for(finished, 30, "the run finished")
    return found


# ------------------------------------------------------------ exit 0


def test_status_with_no_flags_finds_the_local_socket(daemon: Daemon) -> None:
    # no --url, no CRONSTABLE_URL: the socket under $XDG_RUNTIME_DIR
    done = cli("status", env=as_token("read-secret", XDG_RUNTIME_DIR=str(daemon.runtime_dir)))
    assert done.returncode == 0, done.stderr
    assert "applied sha256:" in done.stdout
    assert re.search(r"^sleeper\s", done.stdout, re.M), done.stdout
    assert ODD_NAME in done.stdout and "disabled" in done.stdout


def test_status_json_over_each_transport(daemon: Daemon) -> None:
    env = as_token("read-secret", CRONSTABLE_URL=daemon.http)
    for args in (
        [],  # CRONSTABLE_URL
        ["--url", daemon.unix],
        ["--url", daemon.https, "--cacert", str(daemon.ca_file)],
    ):
        done = cli("status", "--json", *args, env=env)
        assert done.returncode == 0, (args, done.stderr)
        names = {job["name"] for job in json.loads(done.stdout)["jobs"]}
        assert names == {ODD_NAME, "sleeper"}


def test_start_then_runs_of_a_job_whose_name_needs_encoding(daemon: Daemon) -> None:
    started = cli("start", ODD_NAME, "--url", daemon.http, env=as_token("ci-secret"))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.removeprefix("started ").strip()
    assert run_id.startswith(f"{ODD_NAME}@") and run_id.endswith("#1")
    last = _wait_finished(daemon.http, ODD_NAME)
    assert (last["id"], last["outcome"], last["stdout"]) == (
        run_id,
        "succeeded",
        "hello from a manual start",
    )
    shown = cli("runs", ODD_NAME, "--output", "--url", daemon.unix, env=as_token("read-secret"))
    assert shown.returncode == 0, shown.stderr
    assert run_id in shown.stdout and "succeeded (manual)" in shown.stdout
    assert "hello from a manual start" in shown.stdout


def test_cancel_a_named_run_and_then_everything(daemon: Daemon) -> None:
    env = as_token("ci-secret")
    started = cli("start", "sleeper", "--url", daemon.http, "--json", env=env)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    # Forbid refuses a second run while the first is going: 409, exit 1, the reason shown
    again = cli("start", "sleeper", "--url", daemon.http, env=env)
    assert again.returncode == 1, again.stderr
    assert "answered 409" in again.stderr and "not started" in again.stderr
    # a run id that is not going: 404, exit 1
    wrong = cli("cancel", "sleeper", "--run", "sleeper@2000-01-01T00:00:00Z#1", "--url",
                daemon.http, env=env)  # fmt: skip
    assert wrong.returncode == 1 and "answered 404" in wrong.stderr
    # the run id carries '#' and ':': it travels encoded in the query
    named = cli("cancel", "sleeper", "--run", run_id, "--url", daemon.http, env=env)
    assert named.returncode == 0, named.stderr
    assert named.stdout == f"cancelling {run_id}\n"
    last = _wait_finished(daemon.http, "sleeper")
    assert (last["id"], last["outcome"]) == (run_id, "cancelled")
    nothing = cli("cancel", "sleeper", "--url", daemon.http, env=env)
    assert (nothing.returncode, nothing.stdout) == (0, "sleeper: nothing running\n")


def test_reload_with_the_admin_token(daemon: Daemon) -> None:
    token = daemon.runtime_dir.parent / "admin.token"
    token.write_text("admin-secret\n")
    done = cli("reload", "--url", daemon.http, "--token-file", str(token))
    assert (done.returncode, done.stdout) == (0, "reload requested\n")


# ------------------------------------------------------------ exit 1: refused


def test_unknown_job_is_refused(daemon: Daemon) -> None:
    done = cli("start", "no such job", "--url", daemon.http, env=as_token("ci-secret"))
    assert done.returncode == 1
    assert "answered 404: no job named 'no such job'" in done.stderr


# ------------------------------------------------------------ exit 4: unauthorized


def test_missing_bad_and_short_scoped_tokens_exit_4(daemon: Daemon) -> None:
    missing = cli("status", "--url", daemon.http)
    assert missing.returncode == 4
    assert "answered 401" in missing.stderr and "CRONSTABLE_TOKEN" in missing.stderr
    bad = cli("status", "--url", daemon.http, env=as_token("nope"))
    assert bad.returncode == 4 and "the token is not valid" in bad.stderr
    scoped = cli("start", "sleeper", "--url", daemon.http, "--json", env=as_token("read-secret"))
    assert scoped.returncode == 4
    assert json.loads(scoped.stdout)["missingScope"] == "trigger"
    assert "answered 403" in scoped.stderr
    # the token never shows, whatever fails
    assert "read-secret" not in scoped.stderr + scoped.stdout


# ------------------------------------------------------------ exit 3: unreachable or 5xx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_listening_exits_3_with_the_url_redacted(tmp_path: Path) -> None:
    port = _free_port()
    done = cli("status", "--url", f"http://deploy:hunter2@127.0.0.1:{port}")
    assert done.returncode == 3
    assert f"cannot reach http://deploy:<hidden>@127.0.0.1:{port}" in done.stderr
    assert "hunter2" not in done.stderr
    gone = cli("runs", "x", "--url", f"unix://{tmp_path}/none.sock")
    assert gone.returncode == 3 and "No such file or directory" in gone.stderr
    # no --url and no daemon on the default socket: the hint says how to point elsewhere
    default = cli("status", env=_env(XDG_RUNTIME_DIR=str(tmp_path)))
    assert default.returncode == 3 and "CRONSTABLE_URL" in default.stderr


def test_a_daemon_that_does_not_answer_in_time_exits_3() -> None:
    with socket.socket() as server:  # accepts (the kernel does) but never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        began = time.monotonic()
        done = cli("status", "--url", f"http://127.0.0.1:{port}", "--timeout", "0.5")
        assert done.returncode == 3, done.stderr
        assert "no complete answer within the timeout of 0.5 s" in done.stderr
        assert time.monotonic() - began < 30


def test_an_untrusted_certificate_exits_3(daemon: Daemon) -> None:
    done = cli("status", "--url", daemon.https, env=as_token("read-secret"))
    assert done.returncode == 3 and "TLS certificate not trusted" in done.stderr


class _BadGateway(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"error": "upstream daemon is down"}'
        self.send_response(502)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_a_5xx_answer_exits_3() -> None:
    # a reverse proxy in front of a daemon that is down answers 502
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        done = cli("status", "--url", f"http://127.0.0.1:{port}")
        assert done.returncode == 3
        assert "answered 502: upstream daemon is down" in done.stderr
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------ exit 2: usage


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert cli("start").returncode == 2  # JOB missing
    assert cli("status", "--timeout", "0").returncode == 2
    bad_url = cli("status", "--url", "ftp://127.0.0.1/")
    assert bad_url.returncode == 2 and "is not a daemon URL" in bad_url.stderr
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    done = cli("status", "--url", "http://127.0.0.1:1", "--token-file", str(empty))
    assert done.returncode == 2 and "is empty" in done.stderr
    missing = cli("status", "--url", "http://127.0.0.1:1", "--token-file", str(tmp_path / "no"))
    assert missing.returncode == 2 and "No such file" in missing.stderr


# ------------------------------------------------------------ the example repository


def test_the_example_repository_answers_status_with_no_flags(tmp_path: Path) -> None:
    # make run's configuration, on a free port, without XDG_RUNTIME_DIR: the socket goes to
    # <tmp>/cronstable-UID, made private, and `cronstable status` looks there by itself
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    root = repo / "cronstable.yaml"
    root.write_text(root.read_text().replace("127.0.0.1:8080", "127.0.0.1:0"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(XDG_RUNTIME_DIR=None, TMPDIR=str(tmp), XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc, urls = _start(repo, tmp_path / "daemon.log", env)
    try:
        private = tmp / f"cronstable-{os.geteuid()}"
        assert f"unix://{private}/cronstable.sock" in urls
        assert private.stat().st_mode & 0o777 == 0o700
        done = cli("status", env=env)
        assert done.returncode == 0, done.stderr
        assert "platform-heartbeat" in done.stdout
    finally:
        assert proc.stop(30) == 0


def test_status_does_not_import_asyncio_or_aiohttp(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        f"""\
        import contextlib, io, sys
        from cronstable.__main__ import main
        with contextlib.redirect_stderr(io.StringIO()):
            main(["status", "--url", "unix://{tmp_path}/none.sock"])
        print(sorted(m for m in ("asyncio", "aiohttp") if m in sys.modules))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------ cronstable diff URL PATH


def _changed_copy(daemon: Daemon, tmp_path: Path, old: str, new: str) -> Path:
    copy = tmp_path / "conf"
    shutil.copytree(daemon.conf, copy)
    path = copy / "cronstable.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return copy


def test_diff_of_a_daemon_and_the_repository_it_runs(daemon: Daemon, tmp_path: Path) -> None:
    env = as_token("admin-secret")
    for sides in ([daemon.unix, str(daemon.conf)], [str(daemon.conf), daemon.http]):
        done = cli("diff", *sides, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    # the same, as a git repository at a ref
    repo = tmp_path / "repo"
    shutil.copytree(daemon.conf, repo)
    for step in (["init", "-q"], ["add", "."], ["commit", "-qm", "config"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *step], cwd=repo, check=True
        )
    done = cli("diff", daemon.http, f"git:{repo}@HEAD", env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_diff_shows_a_changed_secret_as_digests_only(daemon: Daemon, tmp_path: Path) -> None:
    from cronstable.published import secret_digest

    changed = _changed_copy(daemon, tmp_path, "value: hunter2", "value: hunter3")
    done = cli("diff", daemon.http, str(changed), "--format", "json", env=as_token("admin-secret"))
    assert done.returncode == 1, done.stderr
    assert "hunter2" not in done.stdout and "hunter3" not in done.stdout
    [job] = json.loads(done.stdout)["jobs"]
    assert (job["name"], job["change"]) == (ODD_NAME, "changed")
    [field] = job["fields"]
    assert field == {
        "path": "environment.PASSWORD",
        "old": secret_digest("hunter2"),
        "new": secret_digest("hunter3"),
    }


def test_diff_shows_a_changed_token_as_digests_only(daemon: Daemon, tmp_path: Path) -> None:
    changed = _changed_copy(daemon, tmp_path, "value: read-secret", "value: read-secret-2")
    done = cli("diff", daemon.unix, str(changed), env=as_token("admin-secret"))
    assert done.returncode == 1, done.stderr
    assert "section web" in done.stdout
    # the digests GET /config shows, not digests of digests
    from cronstable.published import secret_digest

    as_json = cli(
        "diff", daemon.unix, str(changed), "--format", "json", env=as_token("admin-secret")
    )
    assert secret_digest("read-secret-2") in as_json.stdout, as_json.stdout
    assert secret_digest("read-secret") in as_json.stdout
    assert "read-secret" not in done.stdout + done.stderr


def test_diff_against_a_daemon_that_refuses_or_is_gone_exits_2(daemon: Daemon) -> None:
    refused = cli("diff", daemon.http, str(daemon.conf), env=as_token("read-secret"))
    assert refused.returncode == 2
    assert "GET /config answered 403" in refused.stderr and "admin" in refused.stderr
    port = _free_port()
    gone = cli("diff", f"http://u:pw@127.0.0.1:{port}", str(daemon.conf))
    assert gone.returncode == 2
    assert f"cannot reach http://u:<hidden>@127.0.0.1:{port}" in gone.stderr


def test_diff_with_a_daemon_shows_what_it_has_going(daemon: Daemon, tmp_path: Path) -> None:
    """The daemon's GET /status informs the time effects: its run going finishes under the
    old definition, and its API pause still skips the fires after the apply."""
    trigger = as_token("ci-secret")
    started = cli("start", "sleeper", "--url", daemon.http, "--json", env=trigger)
    assert started.returncode == 0, started.stderr
    paused = cli("pause", "sleeper", "--reason", "diff test", "--url", daemon.http, env=trigger)
    assert paused.returncode == 0, paused.stderr
    try:
        changed = _changed_copy(daemon, tmp_path, "command: sleep 60", "command: sleep 61")
        done = cli(
            "diff", daemon.http, str(changed), "--format", "json",
            "--at", "2026-12-31T23:00:00Z", env=as_token("admin-secret"),
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        body = json.loads(done.stdout)
        assert body["timeEffects"]["facts"] == daemon.http
        assert body["timeEffects"]["unknown"] == []
        [job] = body["jobs"]
        assert job["name"] == "sleeper"
        effects = job["times"]["atApply"]
        assert [(e["applied"], e["kind"], e["runs"], e["count"]) for e in effects] == [
            ("reload", "running", False, 1)
        ]
        after = job["times"]["after"]["fires"]
        assert after[0] == {
            "local": "2027-01-01T00:00:00+00:00",
            "utc": "2027-01-01T00:00:00Z",
            "skipped": "api pause",
        }
        text = cli("diff", daemon.unix, str(changed), env=as_token("admin-secret"))
        assert "1 run going: each finishes under the definition it started with" in text.stdout
        assert f"with what {daemon.unix} knows" in text.stdout
    finally:
        cli("resume", "sleeper", "--url", daemon.http, env=trigger)
        cli("cancel", "sleeper", "--url", daemon.http, env=trigger)
        _wait_finished(daemon.http, "sleeper")
