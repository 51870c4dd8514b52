"""Text that came from elsewhere (a daemon's answer), made safe to print on a terminal.

A daemon, or anything answering on its URL, chooses every string the client
commands print: job names, run ids, revisions, error messages, captured
output.  Printed raw, an ``ESC ] 0 ; … BEL`` sets the terminal's title, an
``ESC [ 2 J`` clears the screen, a bidirectional override reorders what the
line seems to say.  :func:`escape` is the one function that every such
string goes through before it is printed.  It replaces, by a visible escape
(``\\x1b``, ``\\x9b``, ``\\u202e``):

* the C0 controls, DEL and the C1 controls (U+0000-U+001F, U+007F-U+009F);
* the bidirectional formatting characters (U+061C, U+200E, U+200F,
  U+202A-U+202E, U+2066-U+2069);
* lone surrogates (U+D800-U+DFFF), which a JSON answer can hold and which
  cannot be written as UTF-8;
* in a one-line field, also the line and paragraph separators (U+2028, U+2029).

A one-line field (a name, an error) has its newlines and tabs escaped as
``\\n`` and ``\\t`` too, so it stays on its line and in its column.  A block
of text (a run's captured output) keeps them: they are the output's own
lines.  A backslash is left as it is, so a string holding the four
characters ``\\x1b`` prints the same as one holding ESC: the escape is for
safety, not a lossless encoding (``--json`` is that).

``for_json=True`` escapes the same characters as JSON ``\\uXXXX`` escapes, in
text that :func:`json.dumps` made (where every raw newline is between
values): the result is still valid JSON, and says the same.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BLOCK = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_IN_BLOCK = re.compile(f"[{_BLOCK}]")
_UNSAFE_IN_LINE = re.compile(f"[\t\n{_BLOCK}\u2028\u2029]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match[0]
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


def escape(text: str, *, block: bool = False, for_json: bool = False) -> str:
    """``text`` with its control characters escaped (see the module doc): a one-line
    field by default, a block of lines with ``block=True``, JSON text with ``for_json``."""
    if for_json:
        return _UNSAFE_IN_BLOCK.sub(_json_escape, text)
    pattern = _UNSAFE_IN_BLOCK if block else _UNSAFE_IN_LINE
    return pattern.sub(_visible, text)


def json_text(data: Any) -> str:
    """``data`` as indented JSON, one line per value, safe on a terminal; ends in a newline."""
    return escape(json.dumps(data, indent=2, ensure_ascii=False), for_json=True) + "\n"
