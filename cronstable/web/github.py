"""``POST /webhooks/github``: a signed GitHub push makes the git source fetch now.

The order of the checks is the point: everything that can be judged from the
headers is judged before one byte of the body is read, so an unsigned request
costs the daemon nothing but its headers.

1. no ``web.webhooks.github.secret`` configured: 404;
2. ``X-Hub-Signature-256`` missing (401) or not ``sha256=`` and 64 hex digits (401);
3. a body neither ``application/json`` nor GitHub's default form encoding
   (``application/x-www-form-urlencoded`` with the JSON in ``payload=``): 415;
4. ``X-GitHub-Event`` missing or not one of GitHub's event names
   (:data:`EVENTS`): 400; ``X-GitHub-Delivery`` not a plain id: 400;
5. a declared Content-Length over ``web.webhookMaxBodyBytes`` (default 25 MiB,
   GitHub's own cap): 413;
6. the bodies of every webhook request being received share one byte budget
   (``web.webhookBodyBudgetBytes``, default 4 x the limit): a request whose
   declared length (the whole limit for a chunked one) does not fit gets 503 with
   ``Retry-After``;
7. the body is read within ``web.bodyTimeout`` (408 past it, and the connection
   is closed), counted as it arrives (413 past the limit);
8. the signature must be the HMAC-SHA256 of the raw body under the secret,
   compared in constant time: 401 otherwise.  Nothing of the body is parsed
   before this;
9. the body decodes to a JSON object (400 otherwise);
10. an ``X-GitHub-Delivery`` id already handled (the last :data:`DELIVERIES_KEPT`
    are remembered) is answered 202 and ignored;
11. ``ping``: 200.  ``push`` to the followed repository and ref: the source is
    nudged with the pushed ``after`` sha and keeps fetching until that commit is
    visible (GitHub may notify before its mirrors serve the push); 202.  Any other
    event, repository, ref, or a branch deletion: 202, and nothing happens.

A push is ours when ``repository.full_name`` equals the ``owner/name`` ending the
source URL (case-insensitive, ``.git`` stripped) or ``repository.clone_url``
equals the source URL, and its ``ref`` is the ref the source follows (the
remote's default branch when the source names none).  No answer quotes the
request: refusals say what is wrong, ignored deliveries why.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web

from cronstable.config.models import WEBHOOK_MAX_BODY
from cronstable.ports import Trigger
from cronstable.web.answers import shown
from cronstable.web.bodies import BodyTooLarge, ByteBudget, read_body, timed_out
from cronstable.web.settings import Settings
from cronstable.web.view import DaemonApi

logger = logging.getLogger(__name__)

MAX_BODY = WEBHOOK_MAX_BODY
"""Largest body accepted by default (GitHub caps its payloads at 25 MiB)."""
DELIVERIES_KEPT = 1024
"""How many delivery ids are remembered to drop redeliveries."""
RETRY_AFTER = 5
"""Seconds a sender refused for the byte budget is told to wait."""
CONTENT_TYPES = ("application/json", "application/x-www-form-urlencoded")
EVENTS = frozenset(
    """
    branch_protection_configuration branch_protection_rule check_run check_suite
    code_scanning_alert commit_comment create custom_property custom_property_values delete
    dependabot_alert deploy_key deployment deployment_protection_rule deployment_review
    deployment_status discussion discussion_comment fork github_app_authorization gollum
    installation installation_repositories installation_target issue_comment issues label
    marketplace_purchase member membership merge_group meta milestone org_block organization
    package page_build personal_access_token_request ping project project_card
    project_column projects_v2 projects_v2_item projects_v2_status_update public pull_request
    pull_request_review pull_request_review_comment pull_request_review_thread push
    registry_package release repository repository_advisory repository_dispatch
    repository_import repository_ruleset repository_vulnerability_alert secret_scanning_alert
    secret_scanning_alert_location secret_scanning_scan security_advisory
    security_and_analysis sponsorship star status sub_issues team team_add watch
    workflow_dispatch workflow_job workflow_run
    """.split()
)
"""GitHub's webhook event names: ping and push are acted on, the others are answered
202 once signed; a name outside this set is refused before the body is read."""
_SIGNATURE = re.compile(r"sha256=[0-9a-fA-F]{64}")
_DELIVERY = re.compile(r"[0-9A-Za-z._-]{1,128}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def signature_matches(secret: bytes, body: bytes | bytearray, header: str | None) -> bool:
    """``header`` is ``sha256=<hex>`` of HMAC-SHA256(secret, body) (constant-time)."""
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().lower().encode("ascii", "replace"))


class BadPayload(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_payload(content_type: str, body: bytes | bytearray) -> dict[str, Any]:
    """The event's JSON object; :class:`BadPayload` (415 or 400) otherwise."""
    if content_type == "application/json":
        text = body
    elif content_type == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
        except UnicodeDecodeError:
            raise BadPayload(400, "the form body is not UTF-8") from None
        except ValueError:
            raise BadPayload(400, "the form body has more than 16 fields") from None
        values = form.get("payload")
        if not values or len(values) != 1:
            raise BadPayload(400, "the form body has no single payload= field")
        text = values[0].encode("utf-8")
    else:
        raise BadPayload(415, _WRONG_TYPE)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadPayload(
            400, f"the payload is not valid JSON (line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError):
        raise BadPayload(400, "the payload is not valid JSON") from None
    if not isinstance(payload, dict):
        raise BadPayload(400, "the payload is not a JSON object")
    return payload


_WRONG_TYPE = (
    "the body must be application/json or application/x-www-form-urlencoded "
    "(GitHub's two content types)"
)


def refusal_before_body(request: web.Request, max_body: int) -> tuple[int, str] | None:
    """(status, why) when the headers alone disqualify a delivery; None when they do not."""
    signature = request.headers.get("X-Hub-Signature-256")
    if signature is None:
        return 401, "missing or wrong X-Hub-Signature-256"
    if not _SIGNATURE.fullmatch(signature.strip()):
        return 401, "X-Hub-Signature-256 must be sha256= followed by 64 hex digits"
    if request.content_type not in CONTENT_TYPES:
        return 415, _WRONG_TYPE
    event = request.headers.get("X-GitHub-Event")
    if event is None:
        return 400, "the X-GitHub-Event header is missing"
    if event.strip() not in EVENTS:
        return 400, "X-GitHub-Event is not a GitHub event name"
    delivery = request.headers.get("X-GitHub-Delivery")
    if delivery is not None and not _DELIVERY.fullmatch(delivery.strip()):
        return 400, "X-GitHub-Delivery must be an id of letters, digits, '.', '_' or '-'"
    if request.content_length is not None and request.content_length > max_body:
        return 413, _too_large(max_body)
    return None


def _too_large(max_body: int) -> str:
    return f"the body is larger than {max_body} bytes (web.webhookMaxBodyBytes)"


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
        return "the push is to another repository than the one followed"
    pushed = payload.get("ref")
    if ref is None:
        default = repository.get("default_branch")
        ref = f"refs/heads/{default}" if isinstance(default, str) else None
    if pushed != ref:
        return "the push is to another ref than the one followed"
    after = payload.get("after")
    if payload.get("deleted") is True or not isinstance(after, str) or not _SHA.fullmatch(after):
        return "the push carries no new commit"
    if set(after) == {"0"}:
        return "the push deletes the branch"
    return None


def sender_of(payload: dict[str, Any]) -> str | None:
    """The login of the push's ``sender`` (else its ``pusher``'s name), escaped and cut."""
    sender, pusher = payload.get("sender"), payload.get("pusher")
    login = sender.get("login") if isinstance(sender, dict) else None
    if not isinstance(login, str) and isinstance(pusher, dict):
        login = pusher.get("name")
    return shown(login) if isinstance(login, str) and login else None


class GitHubWebhook:
    """The route's handler; remembers delivery ids for the daemon's life."""

    def __init__(self, daemon: DaemonApi, settings: Callable[[], Settings]) -> None:
        self.daemon = daemon
        self.settings = settings
        self.deliveries: OrderedDict[str, None] = OrderedDict()
        self.budget = ByteBudget()
        """Bytes held by the bodies being received now."""

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
        settings = self.settings()
        secret = settings.github_secret
        if secret is None:
            return _answer(404, error="no GitHub webhook is configured (web.webhooks.github)")
        refusal = refusal_before_body(request, settings.webhook_max_body)
        if refusal is not None:
            return _answer(refusal[0], error=refusal[1])
        size = 0
        if request.body_exists:
            size = request.content_length or settings.webhook_max_body
        if not self.budget.reserve(size, settings.webhook_budget):
            logger.warning(
                "GitHub webhook: refused a delivery, %d bytes of bodies are being received "
                "already (webhookBodyBudgetBytes %d)",
                self.budget.in_use,
                settings.webhook_budget,
            )
            response = _answer(
                503, error="too many webhook deliveries are being received now; retry later"
            )
            response.headers["Retry-After"] = str(RETRY_AFTER)
            return response
        try:
            try:
                body = await read_body(request, settings.webhook_max_body, settings.body_timeout)
            except TimeoutError:
                return await timed_out(request, settings.body_timeout)
            except BodyTooLarge:
                return _answer(413, error=_too_large(settings.webhook_max_body))
            return self._signed(request, secret, body)
        finally:
            self.budget.release(size)

    def _signed(self, request: web.Request, secret: bytes, body: bytearray) -> web.StreamResponse:
        if not signature_matches(secret, body, request.headers.get("X-Hub-Signature-256")):
            return _answer(401, error="missing or wrong X-Hub-Signature-256")
        try:
            payload = parse_payload(request.content_type, body)
        except BadPayload as exc:
            return _answer(exc.status, error=str(exc))
        delivery = (request.headers.get("X-GitHub-Delivery") or "").strip() or None
        if self._seen(delivery):
            return _answer(202, action="ignored", reason=f"delivery {delivery} was handled")
        event = request.headers.get("X-GitHub-Event", "").strip()
        if event == "ping":
            return _answer(200, action="pong")
        if event != "push":
            return _answer(202, action="ignored", reason=f"{event} event")
        origin = self.daemon.git_origin()
        if origin is None:
            return _answer(202, action="ignored", reason="the daemon follows no git repository")
        why = why_not_ours(payload, *origin)
        if why is not None:
            logger.info("GitHub delivery %s ignored: %s", delivery, why)
            return _answer(202, action="ignored", reason=why)
        after = str(payload["after"])
        logger.info(
            "GitHub delivery %s: %s pushed %s; fetching until it is visible",
            delivery,
            payload["ref"],  # the followed ref: why_not_ours compared it
            after[:12],
        )
        trigger = Trigger(
            "webhook",
            requested_at=datetime.now(UTC),
            delivery=delivery,  # checked before: a plain id of at most 128 characters
            sender=sender_of(payload),
            revision=after,
        )
        self.daemon.nudge(after, trigger)
        return _answer(202, action="fetching", after=after)


def _answer(status: int, **body: Any) -> web.Response:
    return web.json_response(body, status=status)
