"""The one redaction function: credentials out of any text before it is shown.

Every source spec or URL that reaches a message, a log line, ``diff`` output
or an exception goes through :func:`redact`, and so does every configuration
error and warning (:class:`cronstable.errors.Problem`).  It works on arbitrary
text (an error message quoting a spec, a ``repr``), not only on a bare URL, and
is idempotent: redacting twice gives the same text.  A secret is replaced by
:data:`MASK` (``<hidden>``), or by what ``mask`` makes of it (``GET /config``
shows each as its ``sha256:<hex>`` digest, so two configurations still compare).

What it masks, in every ``scheme://…`` it finds:

* the password of the userinfo: ``git+https://deploy:s3cret@host/x.git`` →
  ``git+https://deploy:<hidden>@host/x.git``;
* a userinfo without a password on an HTTP(S) URL, where it is a token
  (``https://ghp_abc@github.com/…`` → ``https://<hidden>@github.com/…``); on other
  schemes (``git+ssh://git@host/…``) a lone user name is not a secret and stays;
* the value of a query parameter whose name says it holds a secret
  (``token``, ``access_token``, ``password``, ``secret``, ``api_key``, …).

With ``strict`` (text quoting configuration values: an error about a
configuration, a configured URL), a URL's whole userinfo and every one of its
query values are secrets, whatever the scheme and the parameter's name
(``http://u:PW@h/x?to=T`` → ``http://<hidden>@h/x?to=<hidden>``): a configured
webhook or DSN carries its key under any name.

``secrets`` are texts known to be secret (the inline secrets of a
configuration, the token a source was given): each is masked wherever it
appears, as written or as quoted by ``repr``.  Callers pass only what cannot
be mistaken for ordinary words of the message (see
:func:`cronstable.config.secrets.inline_secrets`).

A password holding an unencoded ``/``, ``?`` or ``#`` cannot be parsed as one
(the URL's host would end there), but it is still masked: ``USER:`` followed by
such a character and then an ``@`` is taken as a userinfo running to the last
``@`` of the word (``git+https://u:pa/ss@host/x`` → ``git+https://u:<hidden>@host/x``;
a URL with a port and an ``@`` in its path is masked too, wrongly but safely).
:func:`loose_password` finds such specs so that sources can refuse them.
Limits: a quote or whitespace in a password ends the word; it is masked only
up to there.  A part already masked (``<hidden>``, a ``sha256:<hex>`` digest)
stays as it is.

:func:`without_userinfo` is the other form: a URL with its userinfo removed
outright, for a source to name the remote it holds credentials for (its
description, the key of its cache, the origin a push notification is matched with).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

MASK = "<hidden>"

# scheme://userinfo@ : the userinfo runs up to the last "@" before the host part ends
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>(?:[^/?#@\s'\"<>]*@)+)"
)
# USER:PASS@ where PASS holds "/", "?" or "#" before any "@": the userinfo runs to the
# last "@" of the word (the standard pattern above stops at the "/")
_LOOSE = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*)://(?P<user>[^/?#@:\s'\"<>]*):"
    r"[^@\s'\"<>]*[/?#][^\s'\"<>]*@"
)
_PARAM = re.compile(r"(?P<lead>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<value>[^&#;\s'\"<>]*)")
_SECRET_NAME = re.compile(
    r"token|passw(?:or)?d|pwd|secret|api[_-]?key|credential|signature|^auth(?:orization)?$",
    re.IGNORECASE,
)
# one URL-like word: what strict mode rewrites as a whole
_URL_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s'\"<>]|<hidden>)*")
_MASKED = re.compile(r"<hidden>|sha256:[0-9a-f]{64}")

Mask = Callable[[str], str]


def _hide(_secret: str) -> str:
    return MASK


def _masked(text: str) -> bool:
    return _MASKED.fullmatch(text) is not None


def _mask_userinfo(match: re.Match[str], mask: Mask) -> str:
    scheme = match["scheme"]
    userinfo = match["userinfo"][:-1]  # without the final "@"
    user, colon, password = userinfo.partition(":")
    if _masked(userinfo) or _masked(password):
        masked = userinfo
    elif colon:
        masked = f"{user}:{mask(password)}" if password else userinfo
    elif scheme.lower().endswith(("http", "https")) and userinfo:
        masked = mask(userinfo)  # https://TOKEN@host: the user name is the secret
    else:
        masked = userinfo
    return f"{scheme}://{masked}@"


def _mask_loose(match: re.Match[str], mask: Mask) -> str:
    start = len(match["scheme"]) + 3 + len(match["user"]) + 1
    return f"{match['scheme']}://{match['user']}:{mask(match[0][start:-1])}@"


def _mask_param(match: re.Match[str], mask: Mask) -> str:
    value = match["value"]
    if value and not _masked(value) and _SECRET_NAME.search(match["name"]):
        return f"{match['lead']}{mask(value)}"
    return match[0]


def _strict_query(query: str, mask: Mask) -> str:
    """Every value of ``a=1&b=2;c`` masked (a parameter without ``=`` is a value too)."""
    parts = re.split(r"([&;])", query)
    for index in range(0, len(parts), 2):
        name, equals, value = parts[index].partition("=")
        if not equals:
            if name and not _masked(name):
                parts[index] = mask(name)
        elif value and not _masked(value):
            parts[index] = f"{name}={mask(value)}"
    return "".join(parts)


def _strict_url(match: re.Match[str], mask: Mask) -> str:
    """One URL with its whole userinfo and every query value masked."""
    word = match[0]
    scheme, _, rest = word.partition("://")
    loose = _LOOSE.match(word)
    if loose is not None:
        at = loose.end() - len(scheme) - 3 - 1
    else:
        authority = re.match(r"[^/?#]*", rest)
        at = authority[0].rfind("@") if authority is not None else -1
    if at >= 0:
        userinfo = rest[:at]
        shown = userinfo if not userinfo or _masked(userinfo) else mask(userinfo)
        rest = f"{shown}@{rest[at + 1 :]}"
    path, question, query = rest.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        rest = f"{path}?{_strict_query(query, mask)}{hash_}{fragment}"
    return f"{scheme}://{rest}"


def _mask_known(text: str, secrets: Iterable[str], mask: Mask) -> str:
    forms: dict[str, str] = {}  # as it may be shown → the secret
    for secret in secrets:
        if secret and not _masked(secret):
            quoted = repr(secret)
            for form in (secret, quoted[1:-1], quoted):
                forms.setdefault(form, secret)
    if not forms:
        return text
    # the masks first: a secret inside an earlier mask is no secret shown
    longest_first = sorted(forms, key=len, reverse=True)
    pattern = re.compile("|".join([_MASKED.pattern, *map(re.escape, longest_first)]))

    def replace(match: re.Match[str]) -> str:
        found = match[0]
        return found if found not in forms else mask(forms[found])

    return pattern.sub(replace, text)


def without_userinfo(url: str) -> str:
    """``url`` without its userinfo (``user:password@``), or ``url`` itself if it has none."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def loose_password(spec: str) -> bool:
    """Whether ``spec`` holds a ``USER:PASSWORD@`` whose password has an unencoded
    ``/``, ``?`` or ``#``: no URL parser reads it as a password (see the module doc)."""
    return "://" in spec and _LOOSE.search(spec) is not None


def redact(
    text: str,
    secrets: Iterable[str] = (),
    *,
    strict: bool = False,
    mask: Mask | None = None,
) -> str:
    """``text`` with the credentials of every URL-like spec in it, and every one of
    ``secrets``, masked as ``<hidden>`` (or as ``mask`` makes them); ``strict`` masks a
    URL's whole userinfo and every query value (see the module doc)."""
    hide = mask if mask is not None else _hide
    text = _mask_known(text, secrets, hide)
    if strict and "://" in text:
        # each URL rewritten whole; secret-named parameters masked in the text between
        out: list[str] = []
        last = 0
        for match in _URL_WORD.finditer(text):
            out += [_params(text[last : match.start()], hide), _strict_url(match, hide)]
            last = match.end()
        return "".join([*out, _params(text[last:], hide)])
    if "://" in text:
        text = _LOOSE.sub(lambda m: _mask_loose(m, hide), text)
        text = _USERINFO.sub(lambda m: _mask_userinfo(m, hide), text)
    return _params(text, hide)


def _params(text: str, mask: Mask) -> str:
    return _PARAM.sub(lambda m: _mask_param(m, mask), text) if "=" in text else text
