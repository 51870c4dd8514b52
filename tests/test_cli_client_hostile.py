"""The CLI client against hostile servers on loopback: a server that trickles its answer
a byte every 2 s (over TCP, TLS and a unix socket), and one that puts terminal control
sequences in every string it answers.  The real CLI runs as a subprocess."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

from cronstable.cli.untrusted import escape, json_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 3
"""The --timeout given; a command must end within TIMEOUT + a margin."""
MARGIN = 5.0
"""Seconds past the timeout a command may take to end: the tests assert behaviour, not
precise timing (start-up on a loaded machine included), so 3 s + 5 s < 8 s."""
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\r"
"""An OSC that sets the terminal's title, a clear-screen, a C1 CSI, a bidi override, a CR."""
HOSTILE_SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil\\r"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What must never reach the terminal (newline and tab may: they end and align lines)."""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cronstable", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env or _env(),
    )


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _finish(proc: subprocess.Popen[bytes], began: float) -> Done:
    out, err = proc.communicate(timeout=60)
    return Done(
        proc.returncode,
        out.decode("utf-8", "surrogateescape"),
        err.decode("utf-8", "surrogateescape"),
        time.monotonic() - began,
    )


def run(*args: str, env: dict[str, str] | None = None) -> Done:
    began = time.monotonic()
    return _finish(_cli(*args, env=env), began)


def run_all(commands: list[list[str]]) -> list[Done]:
    """Every command at once (each is timed from its own start)."""
    started = [(time.monotonic(), _cli(*args)) for args in commands]
    return [_finish(proc, began) for began, proc in started]


def assert_clean(done: Done) -> None:
    for name, text in (("stdout", done.stdout), ("stderr", done.stderr)):
        found = UNSAFE.search(text)
        assert found is None, f"raw {found[0]!r} on {name}: {text!r}"


# ------------------------------------------------------------ a server that trickles


@dataclass
class Trickler:
    """Reads a request, then sends its answer one byte every ``interval`` seconds, for
    ever; with ``head_at_once`` the status line and headers go at once, the body trickles."""

    listener: socket.socket
    head_at_once: bool
    tls: ssl.SSLContext | None = None
    interval: float = 2.0
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    connections: int = 0

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"

    def start(self) -> None:
        self.listener.settimeout(0.1)
        self._spawn(self._accept)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)
        self.listener.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            answer = self.HEAD + b"[" * 99999
            if self.head_at_once:
                conn.sendall(self.HEAD)
                answer = answer[len(self.HEAD) :]
            for byte in answer:
                conn.sendall(bytes([byte]))
                if self.stop.wait(self.interval):
                    return
        except OSError:
            return  # the client gave up: what it should do
        finally:
            conn.close()


@dataclass
class Trickling:
    url: str
    server: Trickler
    ca_file: Path | None = None


@pytest.fixture
def trickling(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Trickling]:
    """``request.param``: (transport, stage): tcp|tls|unix, head|body."""
    transport, stage = request.param
    ca_file = None
    tls = None
    if transport == "unix":
        path = tmp_path / "api.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        url = f"unix://{path}"
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        scheme = "https" if transport == "tls" else "http"
        url = f"{scheme}://deploy:hunter2@127.0.0.1:{listener.getsockname()[1]}"
        if transport == "tls":
            ca = trustme.CA()
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ca.issue_cert("127.0.0.1").configure_cert(tls)
            ca_file = tmp_path / "ca.pem"
            ca.cert_pem.write_to_path(str(ca_file))
    listener.listen(64)
    server = Trickler(listener, head_at_once=stage == "body", tls=tls)
    server.start()
    try:
        yield Trickling(url, server, ca_file)
    finally:
        server.close()


def _assert_gave_up(done: Done, url: str, timeout: float = TIMEOUT) -> None:
    assert done.returncode == 3, done
    assert done.seconds < timeout + MARGIN, done
    shown = url.replace(":hunter2@", ":<hidden>@")
    assert f"cannot reach {shown}: no complete answer within the timeout of {timeout:g} s" in (
        done.stderr
    ), done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize("trickling", [("tcp", "head")], indirect=True)
def test_every_client_command_gives_up_at_its_timeout(trickling: Trickling) -> None:
    # the issue's case: a byte every 2 s kept `status --timeout 3` waiting 40 s
    common = ["--url", trickling.url, "--timeout", str(TIMEOUT)]
    commands = [
        ["status", *common],
        ["status", "--json", *common],
        ["start", "a-job", *common],
        ["cancel", "a-job", *common],
        ["runs", "a-job", "--output", *common],
        ["reload", *common],
    ]
    for args, done in zip(commands, run_all(commands), strict=True):
        assert done.stdout == "", args
        _assert_gave_up(done, trickling.url)
    assert trickling.server.connections == len(commands)


@pytest.mark.parametrize(
    "trickling",
    [("tcp", "body"), ("unix", "head"), ("unix", "body"), ("tls", "head"), ("tls", "body")],
    indirect=True,
    ids=["tcp-body", "unix-head", "unix-body", "tls-head", "tls-body"],
)
def test_the_timeout_bounds_headers_and_body_on_every_transport(trickling: Trickling) -> None:
    args = ["status", "--url", trickling.url, "--timeout", str(TIMEOUT)]
    if trickling.ca_file is not None:
        args += ["--cacert", str(trickling.ca_file)]
    _assert_gave_up(run(*args), trickling.url)


@pytest.mark.parametrize("trickling", [("unix", "body")], indirect=True)
def test_diff_of_a_trickling_daemon_gives_up_at_the_default_timeout(
    trickling: Trickling, tmp_path: Path
) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("jobs: []\n")
    done = run("diff", trickling.url, str(conf))
    assert done.returncode == 2, done  # diff's exit status for a side it cannot read
    assert done.seconds < 10 + MARGIN, done
    assert f"cannot reach {trickling.url}: no complete answer within the timeout of 10 s" in (
        done.stderr
    )


# ------------------------------------------------------------ a server full of escapes


def _hostile_config(tmp_path: Path) -> tuple[dict[str, Any], str]:
    """GET /config as a daemon publishes a job named and written with control characters
    (what the models allow), with a hostile revision and job-set id; and its job name."""
    from cronstable.cli.sides import resolve
    from cronstable.published import published_config

    conf = tmp_path / "daemon-conf"
    conf.mkdir()
    (conf / "c.yaml").write_text(
        "jobs:\n"
        '  - name: "evil\\x9b2J\\u202eeman"\n'
        '    command: "echo \\e]0;pwned\\a"\n'
        '    schedule: "@daily"\n'
        "    environment:\n"
        '      - {key: "K\\e[2J", value: "v"}\n'
    )
    state = resolve(str(conf)).load()
    [name] = state.jobs
    published = published_config(state)
    published["revision"] = HOSTILE
    published["jobSetId"] = HOSTILE
    return published, name


def _answers(config: dict[str, Any]) -> dict[tuple[str, str], tuple[int, bytes, str]]:
    run_ = {
        "id": HOSTILE,
        "outcome": HOSTILE,
        "manual": True,
        "exitCode": HOSTILE,
        "startedAt": HOSTILE,
        "duration": HOSTILE,
        "stdout": f"line one\n\tindented {HOSTILE}\nline three\n",
        "stderr": HOSTILE,
    }
    status = {
        "applied": {"revision": HOSTILE, "source": HOSTILE, "time": HOSTILE},
        "lastRejected": {"revision": HOSTILE, "time": HOSTILE, "errors": [HOSTILE, "a\nb"]},
        "jobs": [
            {
                "name": HOSTILE,
                "schedule": HOSTILE,
                "enabled": True,
                "nextFire": HOSTILE,
                "retryPending": True,
                "running": [{"pid": HOSTILE}],
                "lastRun": run_,
                "alerts": {
                    "late": {"fire": HOSTILE, "lateSince": HOSTILE, "reportedBy": HOSTILE},
                    "stuck": [
                        {
                            "job": HOSTILE,
                            "run": HOSTILE,
                            "runningFor": HOSTILE,
                            "threshold": HOSTILE,
                            "basis": HOSTILE,
                            "reportedAt": HOSTILE,
                        }
                    ],
                    "stale": {
                        "lastSuccess": HOSTILE,
                        "staleSince": HOSTILE,
                        "maxSuccessAge": HOSTILE,
                        "reportedAt": HOSTILE,
                    },
                },
            }
        ],
    }
    as_json = "application/json"

    def body(data: Any) -> bytes:
        # raw characters on the wire, not \\u escapes: what a careless server sends
        return json.dumps(data, ensure_ascii=False).encode()

    return {
        ("GET", "/status"): (200, body(status), as_json),
        ("GET", "/jobs/a-job/runs"): (200, body({"job": HOSTILE, "runs": [run_]}), as_json),
        ("POST", "/jobs/a-job/start"): (200, body({"run": HOSTILE}), as_json),
        ("POST", "/jobs/a-job/cancel"): (
            200,
            body({"job": HOSTILE, "cancelled": [HOSTILE]}),
            as_json,
        ),
        ("POST", "/jobs/none/cancel"): (200, body({"job": HOSTILE, "cancelled": []}), as_json),
        ("POST", "/jobs/busy/start"): (409, body({"error": HOSTILE}), as_json),
        ("GET", "/jobs/proxy/runs"): (502, b"<h1>" + HOSTILE.encode() + b"</h1>", "text/html"),
        # a lone surrogate: valid JSON, but no UTF-8 can print it as it is
        ("GET", "/jobs/surrogate/runs"): (200, b'{"job": "x\\ud800", "runs": []}', as_json),
        ("GET", "/config"): (200, body(config), as_json),
        ("POST", "/reload"): (200, body({"reload": HOSTILE}), as_json),
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(URL, the hostile job name of its /config) of a server that answers every route
    with control sequences in every string."""
    config, name = _hostile_config(tmp_path_factory.mktemp("hostile"))
    answers = _answers(config)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            status, payload, content_type = answers.get(
                (self.command, self.path), (404, b'{"error": "no route"}', "application/json")
            )
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", name
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_status_text_shows_every_server_string_escaped(hostile: tuple[str, str]) -> None:
    done = run("status", "--url", hostile[0])
    assert done.returncode == 0, done
    assert_clean(done)
    lines = done.stdout.splitlines()
    assert lines[0] == f"applied {HOSTILE_SHOWN} from {HOSTILE_SHOWN} at {HOSTILE_SHOWN}"
    assert lines[1] == f"rejected {HOSTILE_SHOWN} at {HOSTILE_SHOWN}:"
    # one problem per line: a newline in a one-line field is shown as \n
    assert lines[2:4] == [f"  {HOSTILE_SHOWN}", "  a\\nb"]
    [row, *alerts] = [line for line in lines if line.startswith(HOSTILE_SHOWN)]
    assert f"pid {HOSTILE_SHOWN}" in row and "(retry pending)" in row
    # late, stuck, stale: one line each, every string of theirs escaped
    assert [line.split(": ")[1] for line in alerts] == ["late", "stuck", "stale"]
    assert f"reported by {HOSTILE_SHOWN}" in alerts[0]
    assert f"stuck: run {HOSTILE_SHOWN} going {HOSTILE_SHOWN}, over" in alerts[1]


def test_runs_output_keeps_its_lines_and_tabs_and_escapes_the_rest(
    hostile: tuple[str, str],
) -> None:
    done = run("runs", "a-job", "--output", "--url", hostile[0])
    assert done.returncode == 0, done
    assert_clean(done)
    assert f"\n--- {HOSTILE_SHOWN} stdout\nline one\n\tindented {HOSTILE_SHOWN}\nline three\n" in (
        done.stdout
    )
    # output is shown without its trailing whitespace, as before: the final CR goes too
    stripped = escape(HOSTILE.rstrip())
    assert f"\n--- {HOSTILE_SHOWN} stderr\n{stripped}\n" in done.stdout
    assert f"{HOSTILE_SHOWN} (manual)" in done.stdout


def test_start_cancel_reload_and_refusals_are_escaped(hostile: tuple[str, str]) -> None:
    url = hostile[0]
    commands = [
        ["start", "a-job", "--url", url],
        ["cancel", "a-job", "--url", url],
        ["cancel", "none", "--url", url],
        ["reload", "--url", url],
        ["start", "busy", "--url", url],
        ["runs", "proxy", "--url", url],
        ["runs", "surrogate", "--url", url],
    ]
    start, cancel, none, reload, busy, proxy, surrogate = run_all(commands)
    for done in (start, cancel, none, reload, busy, proxy, surrogate):
        assert_clean(done)
    assert (start.returncode, start.stdout) == (0, f"started {HOSTILE_SHOWN}\n")
    assert (cancel.returncode, cancel.stdout) == (0, f"cancelling {HOSTILE_SHOWN}\n")
    assert (none.returncode, none.stdout) == (0, f"{HOSTILE_SHOWN}: nothing running\n")
    assert (reload.returncode, reload.stdout) == (0, "reload requested\n")
    assert busy.returncode == 1
    assert busy.stderr == f"cronstable start: {url} answered 409: {HOSTILE_SHOWN}\n"
    # a proxy's HTML page: its start is quoted, escaped
    assert proxy.returncode == 3 and f"answered 502: <h1>{HOSTILE_SHOWN}</h1>" in proxy.stderr
    assert (surrogate.returncode, surrogate.stdout) == (
        0,
        "x\\ud800: no runs recorded since the daemon started\n",
    )


def test_json_mode_stays_valid_json_with_every_control_escaped(
    hostile: tuple[str, str],
) -> None:
    url = hostile[0]
    commands = [
        ["status", "--json", "--url", url],
        ["runs", "a-job", "--json", "--url", url],
        ["start", "busy", "--json", "--url", url],
        ["runs", "surrogate", "--json", "--url", url],
    ]
    status, runs, busy, surrogate = run_all(commands)
    for done in (status, runs, busy, surrogate):
        assert_clean(done)
    assert status.returncode == 0, status
    data = json.loads(status.stdout)
    assert data["jobs"][0]["name"] == HOSTILE  # the same strings, only written safely
    assert json.loads(runs.stdout)["runs"][0]["stdout"].endswith(f"{HOSTILE}\nline three\n")
    assert busy.returncode == 1 and json.loads(busy.stdout) == {"error": HOSTILE}
    assert json.loads(surrogate.stdout)["job"] == "x\ud800"


def test_diff_validate_and_next_of_a_hostile_daemon_are_escaped(
    hostile: tuple[str, str], tmp_path: Path
) -> None:
    url, name = hostile
    conf = tmp_path / "conf.yaml"
    # the same job, another command and no environment: a changed job, with field paths
    conf.write_text(
        f"jobs:\n  - name: {json.dumps(name)}\n    command: echo hi\n    schedule: '@daily'\n"
    )
    shown_name = escape(name)
    assert shown_name != name
    commands = [
        ["diff", url, str(conf)],
        ["diff", url, str(conf), "--format", "markdown"],
        ["diff", url, str(conf), "--format", "json"],
        ["validate", url],
        ["next", url, "--after", "2026-03-07T12:00:00Z"],
        ["job-set-id", url],
    ]
    text, markdown, as_json, validate, next_, job_set_id = run_all(commands)
    for done in (text, markdown, as_json, validate, next_, job_set_id):
        assert_clean(done)
    assert text.returncode == 1, text
    assert f"~ job {shown_name} (0 0 0 * * * *)" in text.stdout  # as /config writes it
    assert "    environment.K\\x1b[2J: 'sha256:" in text.stdout
    assert f"`{shown_name}`" in markdown.stdout
    assert as_json.returncode == 1, as_json
    plan = json.loads(as_json.stdout)
    assert plan["jobs"][0]["name"] == name
    assert plan["from"]["revision"] == HOSTILE_SHOWN  # a revision is a label: escaped
    assert validate.returncode == 0, validate
    assert validate.stdout == f"{url}: valid, 1 job, job-set id {HOSTILE_SHOWN}\n"
    assert next_.stdout == f"{shown_name}\t2026-03-08T00:00:00+00:00\n"
    assert job_set_id.stdout == f"{HOSTILE_SHOWN}\n"


# ------------------------------------------------------------ the one escaping function


@pytest.mark.parametrize(
    ("text", "line", "block"),
    [
        ("plain text, ünïcode ✓", "plain text, ünïcode ✓", "plain text, ünïcode ✓"),
        ("a\nb\tc", "a\\nb\\tc", "a\nb\tc"),
        ("\x1b]0;t\x07", "\\x1b]0;t\\x07", "\\x1b]0;t\\x07"),
        ("\x00\x7f\x85\x9b\r", "\\x00\\x7f\\x85\\x9b\\r", "\\x00\\x7f\\x85\\x9b\\r"),
        ("\u202eabc\u2066\u200f", "\\u202eabc\\u2066\\u200f", "\\u202eabc\\u2066\\u200f"),
        ("x\u2028y", "x\\u2028y", "x\u2028y"),
        ("\ud800", "\\ud800", "\\ud800"),
        ("back\\slash", "back\\slash", "back\\slash"),
    ],
)
def test_escape_one_line_and_block(text: str, line: str, block: str) -> None:
    assert escape(text) == line
    assert escape(text, block=True) == block
    assert escape(escape(text)) == escape(text)  # escaping twice changes nothing more


def test_json_text_is_valid_json_that_says_the_same() -> None:
    data = {"name": HOSTILE, "list": ["\x85", "\ud800", "ok ✓"], "n": 1}
    text = json_text(data)
    assert UNSAFE.search(text) is None
    assert json.loads(text) == data
    assert "✓" in text  # only what is unsafe is escaped
