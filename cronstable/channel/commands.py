"""The job-side commands: ``cronstable state get [JOB]`` and ``cronstable lock NAME -- CMD``.

A job that cronstable runs finds its run's channel in its environment
(``CRONSTABLE_RUN_SOCKET``, ``CRONSTABLE_RUN_TOKEN``, :mod:`cronstable.channel`);
these commands are its thin clients.  They import neither asyncio nor aiohttp
(a contract and a test hold it).

``state get`` prints the job's last run, last success, pending retry and runs going
as JSON.  Exit 0; 1 no such job; 2 usage (not in a run); 3 the daemon does not
answer; 4 the token is refused (the run ended).

``lock`` holds the named lock while CMD runs and exits as CMD did (128 + N when a
signal N killed it); before CMD starts: 2 usage, 3 unreachable, 4 refused, 75 not
held within ``--wait`` (or too many wait); 126/127 CMD cannot be executed / is not
found; 69 when the lock was lost while CMD ran (another node took it, the daemon
went away): CMD is sent SIGTERM, SIGKILL :data:`STOP_GRACE` seconds later.  The
signals the client receives (TERM, INT, HUP, QUIT, USR1, USR2) are passed on to
CMD, except one CMD received as well (on Linux: one the daemon or a terminal sent
to the run's whole process group while CMD is in it).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from cronstable import xcom
from cronstable.channel import protocol
from cronstable.channel.client import (
    EXIT_NOT_FOUND,
    EXIT_TEMPFAIL,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Channel,
    ChannelError,
    Connection,
    Refused,
    Unreachable,
)

STOP_GRACE = 10.0
"""Seconds CMD has after SIGTERM, once its lock was lost, before SIGKILL."""
WAIT_MARGIN = 10.0
"""Seconds the client waits for the daemon's answer beyond ``--wait``."""
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_SI_KERNEL = 0x80
"""siginfo's si_code of a signal the kernel sent (a terminal's ^C, ^\\)."""
_PR_SET_PDEATHSIG = 1

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_wait(text: str) -> float:
    """``--wait``: seconds (``30``, ``2.5``) or with a unit (``30s``, ``5m``, ``1h``, ``1d``).
    ValueError when it is not one."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in _UNITS and value[-1:] != "" else ""
    number = value[: len(value) - len(unit)] if unit else value
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (30, 30s, 5m, 1h)") from None
    if not 0 <= seconds <= 1e9:
        raise ValueError(f"{text!r} is not a duration of 0 or more")
    return seconds


# ------------------------------------------------------------ the plain forms, at once


def fast(args: list[str]) -> int | None:
    """Run ``args`` when it is a job-side command in a plain form (``lock [--wait D]
    [--timeout S] NAME -- CMD ...``; in a run, ``state get [JOB] [--timeout S]``),
    without the command line's argument parser (which imports every command's
    options); its exit status.  None for anything else: the parser decides (help,
    other options, a usage error)."""
    if args[:1] == ["lock"]:
        return _fast_lock(args[1:])
    if args[:2] == ["state", "get"] and in_run():
        return _fast_state_get(args[2:])
    if args[:2] in (["xcom", "push"], ["xcom", "pull"]):
        return _fast_xcom(args[1], args[2:])
    return None


def in_run() -> bool:
    """Whether this process is a job's (the variables of its run are set)."""
    return bool(os.environ.get(protocol.SOCKET_ENV)) and bool(os.environ.get(protocol.TOKEN_ENV))


def _options(words: list[str], names: tuple[str, ...]) -> tuple[dict[str, str], list[str]] | None:
    """``--NAME VALUE`` / ``--NAME=VALUE`` of ``names``, and the other words; None when a
    word is another option (or one lacks its value)."""
    given: dict[str, str] = {}
    rest: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        key, equals, value = word.partition("=")
        if key in names:
            if not equals:
                index += 1
                if index == len(words):
                    return None
                value = words[index]
            given[key] = value
        elif word.startswith("-"):
            return None
        else:
            rest.append(word)
        index += 1
    return given, rest


def _seconds(text: str | None, default: float) -> float | None:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 3600 else None


def _fast_state_get(words: list[str]) -> int | None:
    parsed = _options(words, ("--timeout",))
    if parsed is None or len(parsed[1]) > 1:
        return None
    timeout = _seconds(parsed[0].get("--timeout"), 10.0)
    if timeout is None:
        return None
    return cmd_state_get(parsed[1][0] if parsed[1] else None, timeout)


def _fast_xcom(action: str, words: list[str]) -> int | None:
    parsed = _options(words, ("--timeout",))
    if parsed is None or len(parsed[1]) != 2:
        return None
    timeout = _seconds(parsed[0].get("--timeout"), 10.0)
    if timeout is None:
        return None
    first, second = parsed[1]
    if action == "push":
        return cmd_xcom_push(first, second, timeout)
    return cmd_xcom_pull(first, second, timeout)


def _fast_lock(words: list[str]) -> int | None:
    if "--" not in words:
        return None
    cut = words.index("--")
    parsed = _options(words[:cut], ("--wait", "--timeout"))
    command = words[cut + 1 :]
    if parsed is None or len(parsed[1]) != 1 or not command:
        return None
    timeout = _seconds(parsed[0].get("--timeout"), 10.0)
    wait_text = parsed[0].get("--wait")
    try:
        wait = None if wait_text is None else parse_wait(wait_text)
    except ValueError:
        return None
    if timeout is None:
        return None
    return cmd_lock(parsed[1][0], wait, command, timeout)


def _say(text: str) -> None:
    """One line on stderr; nothing when it is gone (a daemon killed with SIGKILL took its
    end of the run's pipes with it, and the command must still be stopped)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _fail(command: str, error: ChannelError) -> int:
    _say(f"cronstable {command}: {error}")
    return error.status


# ------------------------------------------------------------ state get


def cmd_state_get(job: str | None, timeout: float) -> int:
    try:
        channel = Channel.from_environment()
        fields = {} if job is None else {"job": job}
        answer = channel.request("state.get", timeout, **fields)
    except ChannelError as exc:
        return _fail("state get", exc)
    state = answer.get("state")
    if not isinstance(state, dict):
        return _fail("state get", Unreachable("the daemon's answer holds no state"))
    print(json.dumps(state, indent=2, sort_keys=True, ensure_ascii=False))
    return 0


# ------------------------------------------------------------ xcom


def cmd_xcom_push(key: str, value: str, timeout: float) -> int:
    """``cronstable xcom push KEY VALUE`` (``-``: the value is standard input)."""
    if value == "-":
        data = sys.stdin.buffer.read(xcom.MAX_VALUE + 1)
        try:
            value = data.decode()
        except UnicodeDecodeError:
            _say("cronstable xcom push: a value is UTF-8 text (standard input is not)")
            return EXIT_NOT_FOUND
    problem = xcom.key_problem(key) or xcom.value_problem(value)
    if problem is not None:
        _say(f"cronstable xcom push: {problem}")
        return EXIT_NOT_FOUND
    try:
        Channel.from_environment().request("xcom.push", timeout, key=key, value=value)
    except Refused as exc:
        if exc.code == protocol.REFUSED:
            _say(f"cronstable xcom push: {exc}")
            return EXIT_NOT_FOUND
        return _fail("xcom push", exc)
    except ChannelError as exc:
        return _fail("xcom push", exc)
    return 0


def cmd_xcom_pull(task: str, key: str, timeout: float) -> int:
    """``cronstable xcom pull TASK KEY``: the value on standard output, as it was left."""
    problem = xcom.key_problem(key)
    if problem is not None:
        _say(f"cronstable xcom pull: {problem}")
        return EXIT_USAGE
    try:
        answer = Channel.from_environment().request("xcom.pull", timeout, task=task, key=key)
    except ChannelError as exc:
        return _fail("xcom pull", exc)
    value = answer.get("value")
    if not isinstance(value, str):
        return _fail("xcom pull", Unreachable("the daemon's answer holds no value"))
    sys.stdout.write(value)
    sys.stdout.flush()
    return 0


# ------------------------------------------------------------ lock


def cmd_lock(name: str, wait: float | None, command: Sequence[str], timeout: float) -> int:
    if not command:
        _say("cronstable lock: give the command after --")
        return EXIT_USAGE
    try:
        channel = Channel.from_environment()
        fields: dict[str, Any] = {"name": name, "wait": wait}
        connection = channel.connect("lock", timeout, **fields)
    except ChannelError as exc:
        return _fail("lock", exc)
    try:
        deadline = None if wait is None else time.monotonic() + wait + WAIT_MARGIN
        try:
            connection.answer(deadline)
        except ChannelError as exc:
            if exc.status == EXIT_TEMPFAIL:
                _say(f"cronstable lock: {exc}")
                return EXIT_TEMPFAIL
            return _fail("lock", exc)
        return _Holder(connection, list(command)).run()
    finally:
        connection.close()


class _Holder:
    """CMD run while the lock is held; its exit status (see the module docstring)."""

    def __init__(self, connection: Connection, command: list[str]) -> None:
        self.connection = connection
        self.command = command
        self.daemon = connection.peer_pid()
        self.proc: subprocess.Popen[bytes] | None = None
        self.lost: str | None = None
        self.stop_at: float | None = None

    def run(self) -> int:
        waits = hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask")
        watched: set[int | signal.Signals] = {*FORWARDED, signal.SIGCHLD}
        before = signal.pthread_sigmask(signal.SIG_BLOCK, watched) if waits else None
        try:
            try:
                self.proc = subprocess.Popen(self.command, preexec_fn=_child_setup(before))
            except OSError as exc:
                _say(f"cronstable lock: cannot run {self.command[0]}: {exc.strerror}")
                return 127 if isinstance(exc, FileNotFoundError) else 126
            if waits:
                self._wait_for_signals(watched)
            else:
                self._wait_with_handlers()
        finally:
            if before is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
        if self.lost is not None:
            _say(f"cronstable lock: the lock was lost ({self.lost}); the command was stopped")
            return EXIT_UNAVAILABLE
        code = self.proc.returncode
        return 128 - code if code < 0 else code

    # the two ways of waiting: siginfo where the OS gives it, plain handlers elsewhere

    def _wait_for_signals(self, watched: set[int | signal.Signals]) -> None:
        proc = self.proc
        assert proc is not None
        while proc.poll() is None:
            info = signal.sigtimedwait(watched, self._pause())
            if info is not None and info.si_signo != signal.SIGCHLD:
                if not self._received_too(info.si_code, info.si_pid):
                    self._forward(info.si_signo)
            self._look()

    def _wait_with_handlers(self) -> None:
        proc = self.proc
        assert proc is not None
        previous: dict[int, Callable[..., Any] | int | None] = {}
        for sig in FORWARDED:
            previous[sig] = signal.signal(sig, lambda number, _frame: self._forward(number))
        try:
            while proc.poll() is None:
                try:
                    proc.wait(self._pause())
                except subprocess.TimeoutExpired:
                    pass
                self._look()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _pause(self) -> float:
        return 0.25

    def _received_too(self, code: int, sender: int) -> bool:
        """Whether CMD got this signal as well: sent by the kernel (a terminal) or by the
        daemon, to the run's process group, with CMD still in it."""
        proc = self.proc
        assert proc is not None
        try:
            same_group = os.getpgid(proc.pid) == os.getpgrp()
        except OSError:
            return False
        return same_group and (
            code == _SI_KERNEL or (self.daemon is not None and sender == self.daemon)
        )

    def _forward(self, number: int) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, number)
            except OSError:
                pass

    def _look(self) -> None:
        """Read what the daemon says (a lost lock, or its going away); stop CMD when the
        lock is lost."""
        proc = self.proc
        assert proc is not None
        if self.lost is None:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                try:
                    said = self.connection.line(time.monotonic() + 1.0)
                except Unreachable as exc:
                    said = {"event": "lost", "reason": str(exc)}
                if said is None:
                    said = {"event": "lost", "reason": "the daemon closed the connection"}
                if said.get("event") == "lost":
                    reason = said.get("reason")
                    self.lost = reason if isinstance(reason, str) else "lost"
                    self._forward(signal.SIGTERM)  # first: what is said may go nowhere
                    _say(f"cronstable lock: the lock was lost ({self.lost}); stopping the command")
                    self.stop_at = time.monotonic() + STOP_GRACE
        if self.stop_at is not None and time.monotonic() >= self.stop_at and proc.poll() is None:
            self._forward(signal.SIGKILL)
            self.stop_at = None


def _child_setup(mask: set[int | signal.Signals] | None) -> Callable[[], None]:
    """What CMD's process does before exec: the client's signal mask as it was, and (on
    Linux) SIGKILL should the client die first, so CMD never outlives the lock."""
    parent = os.getpid()
    prctl: Callable[..., int] | None = None
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def setup() -> None:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the client died before that took hold
                os._exit(EXIT_UNAVAILABLE)

    return setup
