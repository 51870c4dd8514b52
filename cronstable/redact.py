"""The one redaction function (minimal stand-in; the CLI/redaction work brings the full one).

:func:`redact` masks the password of every ``scheme://user:password@`` in a text.
"""

from __future__ import annotations

import re

MASK = "***"

_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:)[^/?#@\s]*@")


def redact(text: str) -> str:
    """``text`` with every URL password replaced by ``***``."""
    return _PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
