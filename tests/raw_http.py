"""HTTP/1.1 by hand over a real socket: for requests a client library will not send
(a body that never comes, HEAD read to the end, odd Host and Origin headers)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.host = host
        """The Host sent unless a request names another."""

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, parts.port), 10
        )
        return cls(reader, writer, parts.netloc)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> None:
        headers = {"Host": self.host} | headers
        if body and not {"content-length", "transfer-encoding"} & {k.lower() for k in headers}:
            headers["Content-Length"] = str(len(body))
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
        await self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    async def answer(self, timeout: float = 10.0, head: bool = False) -> Answer:
        """The next response; its body by Content-Length (none for ``head``)."""
        async with asyncio.timeout(timeout):
            raw = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = raw.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            length = 0 if head else int(headers.get("content-length", "0"))
            body = await self.reader.readexactly(length)
        return Answer(int(status_line.split()[1]), headers, body)

    async def rest(self, timeout: float = 10.0) -> bytes:
        """Everything until the server closes the connection."""
        async with asyncio.timeout(timeout):
            return await self.reader.read()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def exchange(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> Answer:
    """One request on a fresh connection."""
    connection = await Connection.open(url)
    try:
        await connection.request(method, path, headers, body)
        return await connection.answer(head=method == "HEAD")
    finally:
        await connection.close()
