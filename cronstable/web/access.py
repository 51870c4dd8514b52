"""Who may ask what: the bearer token of a request checked against a scope, the one rule
the HTTP routes and the MCP endpoint share (see :mod:`cronstable.web.auth` for tokens)."""

from __future__ import annotations

from typing import Any

from cronstable.web.auth import Token, bearer, is_local_peer, match
from cronstable.web.calls import Refused
from cronstable.web.settings import Settings


def authorize(
    settings: Settings, authorization: str | None, transport: Any, scope: str
) -> Token | None:
    """The token of the ``Authorization`` header, if it allows ``scope``; None for a peer
    that may read without one (no token configured, a loopback or unix-socket peer).

    Raises :class:`~cronstable.web.calls.Refused`: 401 for no token or one that is not
    valid, 403 for a token without the scope (``admin`` has every scope).
    """
    presented = bearer(authorization)
    if presented is not None:
        token = match(settings.tokens, presented)
        if token is None:
            raise Refused(401, "the token is not valid", missingScope=scope)
        if not token.allows(scope):
            raise Refused(
                403, f"the token {token.name!r} lacks scope {scope!r}", missingScope=scope
            )
        return token
    if settings.tokens or scope != "read":
        raise Refused(401, f"this route needs a token with scope {scope!r}", missingScope=scope)
    if not is_local_peer(transport):
        raise Refused(
            401,
            "no token is configured, so only loopback and unix-socket peers may read",
            missingScope=scope,
        )
    return None
