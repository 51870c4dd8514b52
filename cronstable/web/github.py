"""``POST /webhooks/github``: a signed GitHub push makes the git source fetch now.

The order of the checks is the point:

1. no ``web.webhooks.github.secret`` configured: 404, nothing read;
2. the body is read up to :data:`MAX_BODY` (GitHub's own cap, 25 MiB): 413 past
   it, without reading the rest;
3. ``X-Hub-Signature-256`` must be ``sha256=`` HMAC-SHA256 of the raw body under
   the secret, compared in constant time: 401 otherwise.  Nothing of the body is
   parsed before this;
4. the body is JSON (``application/json``) or GitHub's default form encoding
   (``application/x-www-form-urlencoded`` with the JSON in ``payload=``): 415 for
   any other type, 400 when it does not decode to a JSON object;
5. an ``X-GitHub-Delivery`` id already handled (the last :data:`DELIVERIES_KEPT`
   are remembered) is answered 202 and ignored;
6. ``ping``: 200.  ``push`` to the followed repository and ref: the source is
   nudged with the pushed ``after`` sha and keeps fetching until that commit is
   visible (GitHub may notify before its mirrors serve the push); 202.  Any other
   event, repository, ref, or a branch deletion: 202, and nothing happens.

A push is ours when ``repository.full_name`` equals the ``owner/name`` ending the
source URL (case-insensitive, ``.git`` stripped) or ``repository.clone_url``
equals the source URL, and its ``ref`` is the ref the source follows (the
remote's default branch when the source names none).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web

from cronstable.redact import redact
from cronstable.web.view import DaemonApi

logger = logging.getLogger(__name__)

MAX_BODY = 25 * 1024 * 1024
"""Largest body accepted (GitHub caps its payloads at 25 MiB)."""
DELIVERIES_KEPT = 1024
"""How many delivery ids are remembered to drop redeliveries."""
READ_TIMEOUT = 30.0
"""Seconds a sender gets to deliver the whole body."""
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def signature_matches(secret: bytes, body: bytes, header: str | None) -> bool:
    """``header`` is ``sha256=<hex>`` of HMAC-SHA256(secret, body) (constant-time)."""
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode("utf-8", "replace"))


class BadPayload(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_payload(content_type: str, body: bytes) -> dict[str, Any]:
    """The event's JSON object; :class:`BadPayload` (415 or 400) otherwise."""
    if content_type == "application/json":
        text = body
    elif content_type == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadPayload(400, f"the form body cannot be decoded: {exc}") from None
        values = form.get("payload")
        if not values or len(values) != 1:
            raise BadPayload(400, "the form body has no single payload= field")
        text = values[0].encode("utf-8")
    else:
        raise BadPayload(
            415,
            f"a {content_type} body is not a GitHub payload "
            "(send application/json or application/x-www-form-urlencoded)",
        )
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadPayload(400, f"the payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadPayload(400, "the payload is not a JSON object")
    return payload


def repository_name(url: str) -> str:
    """``owner/name`` ending a repository URL, lower case, without ``.git``."""
    path = urlsplit(url).path.rstrip("/").removesuffix(".git")
    return "/".join([part for part in path.split("/") if part][-2:]).lower()


def why_not_ours(payload: dict[str, Any], url: str, ref: str | None) -> str | None:
    """None when ``payload`` is a push to ``url``'s ``ref``; else why it is ignored."""
    repository = payload.get("repository")
    if not isinstance(repository, dict):
        return "the payload names no repository"
    full_name = repository.get("full_name")
    clone_url = repository.get("clone_url")
    same = (isinstance(full_name, str) and full_name.lower() == repository_name(url)) or (
        isinstance(clone_url, str) and clone_url == url
    )
    if not same:
        return f"{full_name!s} is not the repository followed"
    pushed = payload.get("ref")
    if ref is None:
        default = repository.get("default_branch")
        ref = f"refs/heads/{default}" if isinstance(default, str) else None
    if pushed != ref:
        return f"{pushed!s} is not the ref followed ({ref})"
    after = payload.get("after")
    if payload.get("deleted") is True or not isinstance(after, str) or not _SHA.fullmatch(after):
        return "the push carries no new commit"
    if set(after) == {"0"}:
        return "the push deletes the branch"
    return None


class GitHubWebhook:
    """The route's handler; remembers delivery ids for the daemon's life."""

    def __init__(
        self, daemon: DaemonApi, secret: Callable[[], bytes | None], max_body: int = MAX_BODY
    ) -> None:
        self.daemon = daemon
        self.secret = secret
        self.max_body = max_body
        self.deliveries: OrderedDict[str, None] = OrderedDict()

    async def _body(self, request: web.Request) -> bytes | None:
        """The raw body, or None when it is larger than ``max_body``."""
        if request.content_length is not None and request.content_length > self.max_body:
            return None
        chunks: list[bytes] = []
        size = 0
        async with asyncio.timeout(READ_TIMEOUT):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > self.max_body:
                    return None
                chunks.append(chunk)
        return b"".join(chunks)

    def _seen(self, delivery: str | None) -> bool:
        if not delivery:
            return False
        if delivery in self.deliveries:
            self.deliveries.move_to_end(delivery)
            return True
        self.deliveries[delivery] = None
        while len(self.deliveries) > DELIVERIES_KEPT:
            self.deliveries.popitem(last=False)
        return False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        secret = self.secret()
        if secret is None:
            return _answer(404, error="no GitHub webhook is configured (web.webhooks.github)")
        try:
            body = await self._body(request)
        except TimeoutError:
            return _answer(408, error=f"the body did not arrive within {READ_TIMEOUT:g} s")
        if body is None:
            return _answer(413, error=f"the body is larger than {self.max_body} bytes")
        if not signature_matches(secret, body, request.headers.get("X-Hub-Signature-256")):
            return _answer(401, error="missing or wrong X-Hub-Signature-256")
        try:
            payload = parse_payload(request.content_type, body)
        except BadPayload as exc:
            return _answer(exc.status, error=str(exc))
        delivery = request.headers.get("X-GitHub-Delivery")
        if self._seen(delivery):
            return _answer(202, action="ignored", reason=f"delivery {delivery} was handled")
        event = request.headers.get("X-GitHub-Event", "")
        if event == "ping":
            return _answer(200, action="pong")
        if event != "push":
            return _answer(202, action="ignored", reason=f"{event or 'no'} event")
        origin = self.daemon.git_origin()
        if origin is None:
            return _answer(202, action="ignored", reason="the daemon follows no git repository")
        why = why_not_ours(payload, *origin)
        if why is not None:
            logger.info("GitHub delivery %s ignored: %s", delivery, redact(why))
            return _answer(202, action="ignored", reason=why)
        after = str(payload["after"])
        logger.info(
            "GitHub delivery %s: %s pushed %s; fetching until it is visible",
            delivery,
            payload["ref"],
            after[:12],
        )
        self.daemon.nudge(after)
        return _answer(202, action="fetching", after=after)


def _answer(status: int, **body: Any) -> web.Response:
    return web.json_response(body, status=status)
