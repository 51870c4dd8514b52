"""Real git remotes for the tests: repositories made with the ``git`` CLI, served on loopback.

* :class:`WorkRepo` — a working repository and its bare ``origin`` (commit a dict
  of files, branch, tag, push, force-push), all through the ``git`` CLI with a
  configuration isolated from the machine's (no global or system gitconfig).
* :class:`GitDaemon` — ``git daemon`` serving a directory of bare repositories
  over ``git://127.0.0.1:PORT/NAME``.
* :class:`GitHttpServer` — ``git http-backend`` (smart HTTP, as CGI) behind a
  small threaded HTTP server on ``http://127.0.0.1:PORT/NAME``, optionally
  demanding HTTP basic credentials.
* :class:`SilentServer` — a TCP server that accepts connections and never
  answers: a hung remote, for ``git://`` and ``http://`` alike.

Both git servers are synchronous to drive (``start()``/``stop()``, context
managers), run outside the test's event loop (a process; a thread), and can be
stopped and started again on the same port to simulate an outage.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote

from daemon_proc import wait_for

GIT = shutil.which("git") or "/usr/bin/git"
GIT_CORE = Path("/usr/lib/git-core")


def git_env(home: Path | None = None) -> dict[str, str]:
    """An environment for the ``git`` CLI that ignores the machine's configuration."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home) if home else os.environ.get("HOME", "/tmp"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.invalid",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    return env


def git(*args: str, cwd: Path, input: bytes | None = None) -> str:
    """Run ``git ARGS`` in ``cwd``; its stdout, stripped.  Raises on failure, showing stderr."""
    proc = subprocess.run(
        [GIT, *args],
        cwd=cwd,
        env=git_env(),
        input=input,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed ({proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode().strip()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    wait_for(lambda: listening(port), timeout, f"something listening on 127.0.0.1:{port}")


class WorkRepo:
    """A working repository whose ``origin`` is a bare repository ``<root>/<name>.git``."""

    def __init__(self, work: Path, bare: Path) -> None:
        self.work = work
        self.bare = bare

    @classmethod
    def create(cls, root: Path, name: str = "repo", branch: str = "main") -> WorkRepo:
        """A new empty working repository on ``branch`` and its bare origin under ``root``."""
        bare = root / f"{name}.git"
        work = root / "work" / name
        bare.mkdir(parents=True)
        work.mkdir(parents=True)
        git("init", "--quiet", "--bare", "-b", branch, str(bare), cwd=root)
        git("init", "--quiet", "-b", branch, str(work), cwd=root)
        git("remote", "add", "origin", str(bare), cwd=work)
        return cls(work, bare)

    def git(self, *args: str, input: bytes | None = None) -> str:
        return git(*args, cwd=self.work, input=input)

    def write(self, files: Mapping[str, bytes | str], *, replace: bool = True) -> None:
        """Make ``files`` the work tree's content (only them, when ``replace``)."""
        if replace:
            for child in self.work.iterdir():
                if child.name == ".git":
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        for name, data in files.items():
            target = self.work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.encode() if isinstance(data, str) else data)

    def commit(
        self,
        files: Mapping[str, bytes | str],
        message: str = "change",
        *,
        replace: bool = True,
    ) -> str:
        """Commit exactly ``files`` (or add them, when not ``replace``); the new commit's sha."""
        self.write(files, replace=replace)
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", message)
        return self.rev_parse("HEAD")

    def rev_parse(self, rev: str) -> str:
        return self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")

    def checkout(self, branch: str, *, create: bool = False, start: str = "HEAD") -> None:
        if create:
            self.git("checkout", "--quiet", "-b", branch, start)
        else:
            self.git("checkout", "--quiet", branch)

    def tag(self, name: str, rev: str = "HEAD", *, message: str | None = None) -> None:
        """A lightweight tag, or an annotated one when ``message`` is given."""
        if message is None:
            self.git("tag", name, rev)
        else:
            self.git("tag", "-a", name, "-m", message, rev)

    def reset_hard(self, rev: str) -> None:
        self.git("reset", "--quiet", "--hard", rev)

    def push(self, *refspecs: str, force: bool = False) -> None:
        """``git push origin REFSPECS`` (the current branch when none)."""
        args = ["push", "--quiet", "origin"]
        if force:
            args.insert(1, "--force")
        self.git(*args, *(refspecs or ("HEAD",)))

    def set_origin_head(self, branch: str) -> None:
        """Point the bare origin's HEAD (its default branch) at ``branch``."""
        git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=self.bare)


class GitDaemon:
    """``git daemon`` exporting every repository under ``base_path`` on 127.0.0.1."""

    def __init__(self, base_path: Path, port: int | None = None) -> None:
        self.base_path = base_path
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self) -> None:
        if self._proc is not None:
            return
        self._proc = subprocess.Popen(
            [
                str(GIT_CORE / "git-daemon"),
                "--export-all",
                f"--base-path={self.base_path}",
                f"--port={self.port}",
                "--listen=127.0.0.1",
                "--reuseaddr",
                "--informative-errors",
                str(self.base_path),
            ],
            env=git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() ends in-flight children too
        )
        try:
            wait_for_port(self.port)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def __enter__(self) -> GitDaemon:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    status: int
    authorization: str | None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    project_root: Path
    credentials: tuple[str, str] | None
    requests: list[HttpRequest]


class _CgiHandler(BaseHTTPRequestHandler):
    """Hands each request to ``git http-backend`` as a CGI script."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output quiet

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized(self) -> bool:
        credentials = self.server.credentials
        if credentials is None:
            return True
        expected = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
        return self.headers.get("Authorization") == expected

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.server.requests.append(
            HttpRequest(self.command, self.path, status, self.headers.get("Authorization"))
        )
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.close_connection:  # the client asked for "Connection: close"
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        body = self._read_body()
        if not self._authorized():
            self._reply(
                HTTPStatus.UNAUTHORIZED,
                [("WWW-Authenticate", 'Basic realm="git"'), ("Content-Type", "text/plain")],
                b"authentication required\n",
            )
            return
        path, _, query = self.path.partition("?")
        env = git_env()
        env.update(
            {
                "GIT_PROJECT_ROOT": str(self.server.project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GATEWAY_INTERFACE": "CGI/1.1",
                "SERVER_PROTOCOL": "HTTP/1.1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": unquote(path),
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0],
            }
        )
        if self.server.credentials is not None:
            env["REMOTE_USER"] = self.server.credentials[0]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        proc = subprocess.run(
            [str(GIT_CORE / "git-http-backend")],
            input=body,
            env=env,
            capture_output=True,
            check=False,
        )
        raw_headers, _, out = proc.stdout.partition(b"\r\n\r\n")
        status = HTTPStatus.OK
        headers: list[tuple[str, str]] = []
        for line in raw_headers.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if not name:
                continue
            if name.lower() == "status":
                status = HTTPStatus(int(value.split()[0]))
            else:
                headers.append((name.strip(), value.strip()))
        if proc.returncode != 0 and not raw_headers:
            status, headers, out = HTTPStatus.INTERNAL_SERVER_ERROR, [], proc.stderr
        self._reply(status, headers, out)


class GitHttpServer:
    """``git http-backend`` for every repository under ``project_root``, on 127.0.0.1.

    With ``credentials=(user, password)``, every request must carry them as HTTP
    basic authentication (401 otherwise).  ``requests`` records what was asked.
    """

    def __init__(
        self,
        project_root: Path,
        *,
        credentials: tuple[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.project_root = project_root
        self.credentials = credentials
        self.port = port or free_port()
        self.requests: list[HttpRequest] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            return
        server = _Server(("127.0.0.1", self.port), _CgiHandler)
        server.project_root = self.project_root
        server.credentials = self.credentials
        server.requests = self.requests
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(10)

    def __enter__(self) -> GitHttpServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def outage(server: GitDaemon | GitHttpServer) -> Iterator[None]:
    """Stop ``server`` for the duration of the block, then start it again on the same port."""
    server.stop()
    try:
        yield
    finally:
        server.start()


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte.

    Stands for a hung remote (a stuck ``git daemon``, a proxy that lost its
    backend): ``git://`` and ``http://`` URLs pointing at it connect and then
    wait.  ``accepted`` counts the connections.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, scheme: str, name: str) -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{name}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed by stop()
                return
            self._held.append(conn)
            self.accepted += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(10)
        for conn in self._held:
            conn.close()

    def __enter__(self) -> SilentServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
