"""Every exception cronstable raises on purpose.

::

    CronstableError                 base class; never raised itself
    └── ConfigError                 a configuration (one revision) is invalid;
                                    carries every Problem found, each with a location

A :class:`Problem` is one thing wrong with a configuration: the file and the
position in it, the key path inside the document and a human message.  Its
``str()`` is the one-line form operators see::

    jobs/backup.yaml:12:5: jobs[2].schedule: '61 * * * *': minute 61 is out of range 0-59

Third-party errors (YAML, pydantic, OS) are translated into problems at the
edge where they happen, chained with ``from``; nothing else escapes the loader.

No problem shows a secret: every message goes through :func:`cronstable.redact.redact`
when the problem is made (a URL's userinfo and query values become ``<hidden>``), and
the loader and the applier mask the revision's inline secrets in it
(:meth:`Problem.hiding`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from cronstable.redact import redact

KeyPath = tuple[str | int, ...]


def format_key_path(path: KeyPath) -> str:
    """``('jobs', 2, 'schedule')`` → ``jobs[2].schedule``."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif out:
            out.append(f".{part}")
        else:
            out.append(part)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Problem:
    """One error in a configuration, located as precisely as we can."""

    file: str
    """Path of the file relative to the configuration root (``""`` if none)."""
    line: int | None
    """1-based line, or None when the problem is about the file as a whole."""
    column: int | None
    """1-based column, or None."""
    key: KeyPath
    """Key path inside the document (empty for file-level problems)."""
    message: str
    """What is wrong, through :func:`~cronstable.redact.redact` (strict: every URL's
    userinfo and query values masked) whatever the code that made it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact(self.message, strict=True))

    def hiding(self, secrets: Collection[str]) -> Problem:
        """This problem with each of ``secrets`` (inline secrets of the revision) masked."""
        if not secrets:
            return self
        return replace(self, message=redact(self.message, secrets, strict=True))

    def __str__(self) -> str:
        where = self.file or "<config>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.key:
            return f"{where}: {format_key_path(self.key)}: {self.message}"
        return f"{where}: {self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.file, self.line or 0, self.column or 0, self.message)


class CronstableError(Exception):
    """Base class of cronstable's own errors."""


class ConfigError(CronstableError):
    """A configuration is invalid.  ``problems`` holds every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        unique = {(p.file, p.line, p.column, p.key, p.message): p for p in problems}
        self.problems: Sequence[Problem] = tuple(sorted(unique.values(), key=Problem.sort_key))
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(str(p) for p in self.problems)
