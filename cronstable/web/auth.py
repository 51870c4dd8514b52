"""API tokens: resolved from their sources on each revision, compared in constant time.

A request carries ``Authorization: Bearer TOKEN`` (the scheme in any case).
``admin`` implies every scope.  With no token configured, read routes answer
loopback peers and unix-socket listeners only.  A token that resolves empty is
a configuration error: the API never quietly runs open.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cronstable.config.models import SCOPES, SecretSource, TokenSource, WebConfig
from cronstable.errors import ConfigError, KeyPath, Problem


@dataclass(frozen=True, slots=True)
class Token:
    name: str
    secret: bytes
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


def resolve_secret(source: TokenSource | SecretSource) -> tuple[str, str]:
    """(the secret, why it would be empty): value, else fromFile, else fromEnvVar."""
    if source.value is not None:
        return source.value.strip(), "the value is empty"
    if source.from_file is not None:
        try:
            with open(source.from_file, encoding="utf-8") as handle:
                return handle.read().strip(), f"the file {source.from_file} is empty"
        except (OSError, UnicodeDecodeError) as exc:
            return "", f"cannot read {source.from_file}: {exc}"
    assert source.from_env_var is not None
    value = os.environ.get(source.from_env_var, "").strip()
    return value, f"the environment variable {source.from_env_var} is unset or empty"


def _entries(web: WebConfig) -> list[tuple[KeyPath, str, TokenSource, Sequence[str]]]:
    entries: list[tuple[KeyPath, str, TokenSource, Sequence[str]]] = []
    if web.auth_token is not None:
        entries.append((("web", "authToken"), "authToken", web.auth_token, SCOPES))
    for index, item in enumerate(web.auth_tokens):
        entries.append((("web", "authTokens", index), item.name, item, item.scopes))
    return entries


def token_files(web: WebConfig) -> list[str]:
    """The files tokens are read from."""
    return [source.from_file for _, _, source, _ in _entries(web) if source.from_file]


def reread_tokens(web: WebConfig, current: Sequence[Token]) -> tuple[list[Token], list[str]]:
    """Every token read again; one that resolves empty keeps its current value.

    Returns the tokens and, for each one kept, why (a file emptied or unreadable).
    """
    kept = {token.name: token for token in current}
    tokens: list[Token] = []
    problems: list[str] = []
    for _, name, source, scopes in _entries(web):
        value, why = resolve_secret(source)
        if value:
            tokens.append(Token(name, value.encode("utf-8"), frozenset(scopes)))
            continue
        problems.append(f"token {name!r} resolves empty ({why}); keeping the one read before")
        if name in kept:
            tokens.append(kept[name])
    return tokens, problems


def resolve_tokens(web: WebConfig, locate: Callable[[KeyPath, str], Problem]) -> list[Token]:
    """Every configured token, read now; ConfigError naming each one that resolves empty."""
    tokens: list[Token] = []
    problems: list[Problem] = []
    for key, name, source, scopes in _entries(web):
        value, why = resolve_secret(source)
        if not value:
            message = f"the token resolves empty ({why}); refusing to serve without it"
            problems.append(locate(key, message))
            continue
        tokens.append(Token(name, value.encode("utf-8"), frozenset(scopes)))
    if problems:
        raise ConfigError(problems)
    return tokens


def bearer(header: str | None) -> bytes | None:
    """The token of an ``Authorization: Bearer ...`` header (scheme in any case)."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip().encode("utf-8", "replace")


def match(tokens: Sequence[Token], presented: bytes) -> Token | None:
    """The token equal to ``presented``; every token is compared, in constant time."""
    found: Token | None = None
    for token in tokens:
        if hmac.compare_digest(token.secret, presented):
            found = token
    return found


def is_local_peer(transport: Any) -> bool:
    """A unix-socket connection, or a TCP peer on a loopback address."""
    if transport is None:
        return False
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == getattr(socket, "AF_UNIX", None):
        return True
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
