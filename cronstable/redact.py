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

Limits: a password containing ``/``, ``?``, ``#``, a quote or whitespace must be
percent-encoded in the URL (it could not be parsed otherwise); an unencoded one
is masked only up to that character.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://userinfo@ : the userinfo runs up to the last "@" before the host part ends
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>(?:[^/?#@\s'\"<>]*@)+)"
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


def redact(text: str) -> str:
    """``text`` with the credentials of every URL-like spec in it masked as ``***``."""
    if "://" in text:
        text = _USERINFO.sub(_mask_userinfo, text)
    if "=" in text:
        text = _PARAM.sub(_mask_param, text)
    return text
