"""The wire form of a run's channel, shared by the daemon and the job-side clients.

The standard library only, and neither asyncio nor aiohttp (the clients start
without them; an import-linter contract holds it).

A client connects to the run's socket (``$CRONSTABLE_RUN_SOCKET``) and sends one
*request*: a JSON object on one line (UTF-8, ending in ``\\n``, at most
:data:`MAX_REQUEST` bytes, within :data:`REQUEST_TIMEOUT` seconds of connecting)::

    {"v": 1, "token": "<$CRONSTABLE_RUN_TOKEN>", "op": "state.get", "job": "export"}

The daemon answers with one line, ``{"ok": true, ...}`` or ``{"ok": false, "code":
CODE, "error": "why"}``, and closes the connection, except for ``lock``: its
answer comes once the lock is held (or the wait is over), and the connection then
*is* the hold.  The client closes it to release the lock; the daemon releases it
as well when the client goes away, when the run ends, and it sends one more line,
``{"event": "lost", "reason": "why"}``, before it closes a hold it can no longer
keep (another node took the lock, the run ended).

Operations: ``state.get`` (``job``: optional, the run's own by default),
``lock`` (``name``; ``wait``: seconds, or null to wait as long as the run lives), and
for a workflow's task ``xcom.push`` (``key``, ``value``) and ``xcom.pull`` (``task``,
``key``; answered ``{"ok": true, "value": …}``).
"""

from __future__ import annotations

import json
import re
from typing import Any

SOCKET_ENV = "CRONSTABLE_RUN_SOCKET"
"""The variable that gives a job its run's socket."""
TOKEN_ENV = "CRONSTABLE_RUN_TOKEN"
"""The variable that gives a job its run's token."""

VERSION = 1
"""The protocol's version, in every request (``v``); another one is refused."""
MAX_REQUEST = 512 * 1024
"""Bytes of one request line, its newline included (a value of 64 KiB, each character
escaped, fits)."""
MAX_ANSWER = 4 * 1024 * 1024
"""Bytes of one answer line a client reads at most."""
REQUEST_TIMEOUT = 5.0
"""Seconds the daemon waits for a whole request line after a client connected."""
WRITE_TIMEOUT = 5.0
"""Seconds the daemon waits for a client to take an answer."""
MAX_CONNECTIONS = 64
"""Connections one run may have open at once (locks held included); one more is refused."""

# what a refusal says (``code``)
UNAUTHORIZED = "unauthorized"
"""The token is not this run's (another run's, one that ended, or none)."""
BAD_REQUEST = "bad_request"
NOT_FOUND = "not_found"
"""No such job in the applied revision."""
TIMEOUT = "timeout"
"""``lock``: not held within ``wait``."""
BUSY = "busy"
"""Too many connections of this run, or too many waiting for this lock."""
ENDED = "ended"
"""The run ended (or the daemon stops) while the request waited."""
REFUSED = "refused"
"""``xcom.push``: the values would not fit (a run's values together), or the workflow run
ended."""

LOCK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,127}")
"""What a lock's name may be: 1-128 letters, digits and ``. _ : @ + / -``, starting
with a letter or digit."""


def encode(message: dict[str, Any]) -> bytes:
    """One line of the protocol."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """A line of the protocol as an object; ValueError when it is not one."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def refusal(code: str, error: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "error": error}
