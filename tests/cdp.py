"""Headless Chromium driven over the DevTools protocol (a websocket, with aiohttp).

No Playwright: it cannot download its browsers here, and the system's
``chromium`` with a few protocol calls is all the dashboard test needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from daemon_proc import until

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,1000",
]


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        async with asyncio.timeout(30):
            answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 20) -> Any:
        """Poll ``expression`` (every 0.1 s) until it is truthy; its value."""
        return await until(lambda: self.evaluate(expression), timeout, expression, every=0.1)

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self.ws.close()


@contextlib.asynccontextmanager
async def browser(binary: str, profile: Path) -> AsyncIterator[Page]:
    """A fresh headless Chromium (its own profile directory) and its first page."""
    await asyncio.to_thread(profile.mkdir)
    log = profile.parent / "chromium.log"
    err = await asyncio.to_thread(os.open, log, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        proc = await asyncio.create_subprocess_exec(
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    finally:
        os.close(err)
    try:
        async with asyncio.timeout(60):
            while (port := await asyncio.to_thread(_devtools_port, profile)) is None:
                assert proc.returncode is None, await asyncio.to_thread(log.read_text)
                await asyncio.sleep(0.1)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with asyncio.timeout(30):
                while True:
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                        targets = await response.json()
                    pages = [t for t in targets if t["type"] == "page"]
                    if pages:
                        break
                    await asyncio.sleep(0.1)
            ws = await session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
            page = Page(ws)
            try:
                yield page
            finally:
                await page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def _devtools_port(profile: Path) -> int | None:
    """The port Chromium wrote once its DevTools server listens."""
    try:
        words = (profile / "DevToolsActivePort").read_text().split()
    except FileNotFoundError:
        return None
    return int(words[0]) if len(words) >= 2 else None
