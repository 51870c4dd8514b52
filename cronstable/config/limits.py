"""How much input one revision may hold: the memory bound on configuration.

One :class:`Limits` object is handed to every source and to the loader, for
every command (``run``, ``validate``, ``diff``).  It is set from the command
line only (``--max-file-bytes``, ``--max-revision-bytes``, ``--max-yaml-nodes``),
never from the repository: the input being bounded must not raise its own bound.

* ``max_file_bytes``: the largest file the loader reads (a configuration file,
  an ``include`` target, an ``env_file``);
* ``max_revision_bytes``: every file of a snapshot together (what a source
  holds in memory), and every file the loader reads together;
* ``max_yaml_nodes``: YAML values (scalars, lists, mappings) in all the files of
  a revision, each use of an alias counted as a copy of what it names.  It is
  enforced while the YAML is composed, so a document of millions of tiny values
  is refused after building at most this many nodes;
* ``max_files``: files (and directories) below a local source's root.

Leaf module: imports nothing of cronstable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

OPTION_FILE_BYTES = "--max-file-bytes"
OPTION_REVISION_BYTES = "--max-revision-bytes"
OPTION_YAML_NODES = "--max-yaml-nodes"


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on one revision's input (see the module docstring)."""

    max_file_bytes: int = 4 * MIB
    max_revision_bytes: int = 64 * MIB
    max_yaml_nodes: int = 250_000
    max_files: int = 10_000

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_revision_bytes", "max_yaml_nodes", "max_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")

    # -- messages: each names the limit and the option that raises it ----------------

    def file_too_big(self) -> str:
        return (
            f"larger than the limit of {size_text(self.max_file_bytes)} per file "
            f"(raise it with {OPTION_FILE_BYTES})"
        )

    def revision_too_big(self) -> str:
        return (
            f"the revision holds more than {size_text(self.max_revision_bytes)} of files "
            f"(raise the limit with {OPTION_REVISION_BYTES})"
        )

    def too_many_nodes(self) -> str:
        return (
            f"the revision holds more than {self.max_yaml_nodes:,} YAML values, counting each "
            f"use of an alias as a copy (raise the limit with {OPTION_YAML_NODES})"
        )


DEFAULT_LIMITS = Limits()

_SIZE = re.compile(r"\s*(\d+)\s*(?:([kmg])(?:i?b)?|b)?\s*", re.IGNORECASE)
_UNITS = {"k": KIB, "m": MIB, "g": GIB}


def parse_size(text: str) -> int:
    """``4194304``, ``4096k``, ``4M``, ``4MiB``, ``1G`` → bytes (binary units); ValueError."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K, M or G)")
    value = int(match.group(1)) * _UNITS.get((match.group(2) or "").lower(), 1)
    if value < 1:
        raise ValueError(f"{text!r}: a limit must be at least 1 byte")
    return value


def parse_count(text: str) -> int:
    """A positive count (``500000``, ``500_000``); ValueError."""
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{text!r}: a limit must be at least 1")
    return value


def size_text(n: int) -> str:
    """``64 MiB``, ``4 KiB``, or ``1234 bytes`` when not a whole unit."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n:,} bytes"
