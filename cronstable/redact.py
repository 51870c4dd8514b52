"""The one redaction function: credentials out of any text before it is shown.

Every source spec or URL that reaches a message, a log line, ``diff`` output
or an exception goes through :func:`redact`.  It works on arbitrary text (an
error message quoting a spec, a ``repr``), not only on a bare URL, and is
idempotent: redacting twice gives the same text.

What it masks, in every ``scheme://…`` it finds:

* the password of the userinfo: ``git+https://deploy:s3cret@host/x.git`` →
  ``git+https://deploy:***@host/x.git``;
* a userinfo without a password on an HTTP(S) URL, where it is a token
  (``https://ghp_abc@github.com/…`` → ``https://***@github.com/…``); on other
  schemes (``git+ssh://git@host/…``) a lone user name is not a secret and stays;
* the value of a query parameter whose name says it holds a secret
  (``token``, ``access_token``, ``password``, ``secret``, ``api_key``, …).

A password holding an unencoded ``/``, ``?`` or ``#`` cannot be parsed as one
(the URL's host would end there), but it is still masked: ``USER:`` followed by
such a character and then an ``@`` is taken as a userinfo running to the last
``@`` of the word (``git+https://u:pa/ss@host/x`` → ``git+https://u:***@host/x``;
a URL with a port and an ``@`` in its path is masked too, wrongly but safely).
:func:`loose_password` finds such specs so that sources can refuse them.
Limits: a quote or whitespace in a password ends the word; it is masked only
up to there.
"""

from __future__ import annotations

import re

MASK = "***"

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


def _mask_userinfo(match: re.Match[str]) -> str:
    scheme = match["scheme"]
    userinfo = match["userinfo"][:-1]  # without the final "@"
    user, colon, password = userinfo.partition(":")
    if colon:
        masked = f"{user}:{MASK}" if password else userinfo
    elif scheme.lower().endswith(("http", "https")) and userinfo:
        masked = MASK  # https://TOKEN@host: the user name is the secret
    else:
        masked = userinfo
    return f"{scheme}://{masked}@"


def _mask_param(match: re.Match[str]) -> str:
    if match["value"] and _SECRET_NAME.search(match["name"]):
        return f"{match['lead']}{MASK}"
    return match[0]


def loose_password(spec: str) -> bool:
    """Whether ``spec`` holds a ``USER:PASSWORD@`` whose password has an unencoded
    ``/``, ``?`` or ``#``: no URL parser reads it as a password (see the module doc)."""
    return "://" in spec and _LOOSE.search(spec) is not None


def redact(text: str) -> str:
    """``text`` with the credentials of every URL-like spec in it masked as ``***``."""
    if "://" in text:
        text = _LOOSE.sub(lambda m: f"{m['scheme']}://{m['user']}:{MASK}@", text)
        text = _USERINFO.sub(_mask_userinfo, text)
    if "=" in text:
        text = _PARAM.sub(_mask_param, text)
    return text
