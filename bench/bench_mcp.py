"""What web.mcp costs in memory: a daemon's resident set with MCP off, on, and with
maxSessions sessions open.

    .venv/bin/python bench/bench_mcp.py

Three real daemons (`cronstable run`, tests/daemon_proc.py) serve the same 20 jobs on
loopback; one without `web.mcp`, two with it (maxSessions 16).  The peer is the daemon
without MCP, measured in the same run: each figure is printed with its ratio to it.
"on" is measured after one tools/call (the SDK is imported when the revision that
enables MCP is applied; a call builds what the first request needs); "16 sessions"
after 16 sessions were initialized and each called list_jobs, all left open.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from daemon_proc import DaemonProcess, http, write_config  # noqa: E402

SESSIONS = 16
JOBS = "".join(
    f"  - {{name: job{n}, command: 'true', schedule: '{n} 3 * * *'}}\n" for n in range(20)
)
HEADERS = {
    "Authorization": "Bearer bench",
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}


def config(mcp: bool) -> str:
    return (
        "web:\n  listen: [http://127.0.0.1:0]\n  authToken: {value: bench}\n"
        + (f"  mcp: {{enabled: true, maxSessions: {SESSIONS}}}\n" if mcp else "")
        + "jobs:\n"
        + JOBS
    )


def rpc(method: str, params: dict[str, object] | None = None, id: int | None = 1) -> bytes:
    message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


INITIALIZE = rpc(
    "initialize",
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
)


def open_session(url: str) -> str:
    status, headers, body = http(f"{url}/mcp", "POST", body=INITIALIZE, headers=HEADERS)
    assert status == 200, body
    session = next(v for k, v in headers.items() if k.lower() == "mcp-session-id")
    with_id = HEADERS | {"Mcp-Session-Id": session}
    http(f"{url}/mcp", "POST", body=rpc("notifications/initialized", id=None), headers=with_id)
    status, _, body = http(
        f"{url}/mcp", "POST", body=rpc("tools/call", {"name": "list_jobs"}, 2), headers=with_id
    )
    assert status == 200 and len(body["result"]["structuredContent"]["jobs"]) == 20, body
    return session


def settled_rss(daemon: DaemonProcess) -> int:
    """The resident set once two readings 0.5 s apart agree within 1 %."""
    last = daemon.rss_bytes()
    for _ in range(20):
        time.sleep(0.5)
        now = daemon.rss_bytes()
        if abs(now - last) <= last / 100:
            return now
        last = now
    return last


def main() -> None:
    figures: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        daemons: list[DaemonProcess] = []
        try:
            for name, mcp in (("off", False), ("on", True)):
                conf = write_config(root / name, config(mcp))
                daemon = DaemonProcess(conf, root / f"{name}.log", env=dict(os.environ))
                daemons.append(daemon.start())
            off, on = daemons
            off_url, on_url = off.url(), on.url()
            for url in (off_url, on_url):
                assert http(f"{url}/readyz")[0] == 200
            figures["MCP off"] = settled_rss(off)
            open_session(on_url)
            figures["MCP on, one call"] = settled_rss(on)
            for _ in range(SESSIONS - 1):  # the first one is still open
                open_session(on_url)
            figures[f"MCP on, {SESSIONS} sessions open"] = settled_rss(on)
            status, _, body = http(f"{on_url}/mcp", "POST", body=INITIALIZE, headers=HEADERS)
            assert status == 503, body  # maxSessions holds
        finally:
            for daemon in daemons:
                daemon.stop()
    peer = figures["MCP off"]
    print(
        f"daemon resident set, 20 jobs, peer: the same daemon without MCP ({peer / 2**20:.1f} MiB)"
    )
    for label, rss in figures.items():
        print(f"  {label:<28} {rss / 2**20:7.1f} MiB  {rss / peer:5.2f}x the peer")
    per = (figures[f"MCP on, {SESSIONS} sessions open"] - figures["MCP on, one call"]) / (
        SESSIONS - 1
    )
    print(f"  each session beyond the first: {per / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
