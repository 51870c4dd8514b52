"""Classic crontab files read as configuration: a crontab → the jobs a YAML file would hold.

Pure: bytes in, a :class:`Crontab` out (YAML-shaped ``include`` and ``jobs`` plus
where each value was written), so the loader merges, validates and fingerprints
crontab jobs exactly as YAML ones.

What a line may be (Vixie cron's rules, with cronstable's additions):

* blank, or a comment (``#`` first); there is no line continuation;
* ``NAME=value`` (spaces around ``=`` allowed, the value may be quoted): an
  environment variable for the lines below; ``SHELL`` sets ``shell``,
  ``CRON_TZ`` the zone of the schedules below, ``MAILTO`` the ``mail.to`` of
  ``onFailure.report`` (empty clears it), ``TZ`` is only a variable;
* a job: five fields (seven, seconds to year, below ``# cronstable: fields=7``)
  or an ``@alias`` (``@every D`` takes its duration), a ``CRON_TZ=``/``TZ=``
  prefix allowed, then a user (below ``# cronstable: user-column``), then the
  command.  In the command the first unescaped ``%`` ends it and later ones are
  newlines of its standard input; ``\\%`` is a literal ``%`` (Vixie's rule);
* ``# cronstable: key=value ...``: job options for the next job line (dotted YAML
  key paths, YAML flow values, separated by unquoted spaces), or the switches
  ``fields=7``/``fields=5`` and ``user-column``; ``include=PATH[,PATH]`` only
  before the first job or variable line.

An unnamed line's job is named ``<path with '/' as '-'>-<8 hex of
sha256(schedule + command)>``, ``-2``, ``-3`` for identical lines.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from cronstable.config import yamlread
from cronstable.errors import KeyPath

CRONTAB_NAME = "crontab"
CRONTAB_SUFFIX = ".crontab"

_ENV_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.*)")
_DIRECTIVE = "cronstable:"
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*")
_WORD_RE = re.compile(r"\S+")
_BASE_DEFAULTS: dict[str, Any] = {"failsWhen": {"producesStderr": False}}
"""What a crontab job has below every default: cron does not fail a job for its stderr."""


def is_crontab_name(path: str) -> bool:
    """True for a file named ``crontab`` or ``*.crontab`` (the last path part)."""
    name = path.rsplit("/", 1)[-1]
    return name == CRONTAB_NAME or (name.endswith(CRONTAB_SUFFIX) and name != CRONTAB_SUFFIX)


def base_defaults() -> dict[str, Any]:
    """The settings every crontab job starts from, under any included defaults."""
    return {"failsWhen": dict(_BASE_DEFAULTS["failsWhen"])}


@dataclass(slots=True)
class CrontabProblem:
    line: int
    column: int
    key: KeyPath
    message: str


@dataclass(slots=True)
class Crontab:
    """A crontab as the loader takes it."""

    include: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    positions: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)
    """Where each key path of the YAML-shaped document was written (line, column)."""
    problems: list[CrontabProblem] = field(default_factory=list)
    zoned: list[bool] = field(default_factory=list)
    """Per job: whether a CRON_TZ line or a prefix set its zone."""
    mail: list[bool] = field(default_factory=list)
    """Per job: whether MAILTO set a recipient."""

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"jobs": self.jobs}
        if self.include:
            doc["include"] = self.include
        return doc

    def locate(self, path: KeyPath) -> tuple[int, int] | None:
        """The position of the deepest written prefix of ``path``."""
        for end in range(len(path), 0, -1):
            hit = self.positions.get(path[:end])
            if hit is not None:
                return hit
        return None


def split_stdin(command: str) -> tuple[str, str | None]:
    """Vixie cron's ``%``: (command, standard input or None when there is no ``%``).

    In the command ``\\%`` becomes ``%`` (other backslashes stay); the first
    unescaped ``%`` ends it.  In the input each unescaped ``%`` is a newline and
    ``\\%`` a ``%``, other backslashes stay.
    """
    out: list[str] = []
    escaped = False
    rest: str | None = None
    for i, ch in enumerate(command):
        if escaped:
            if ch == "%":
                out[-1] = "%"
            else:
                out.append(ch)
            escaped = False
            continue
        if ch == "%":
            rest = command[i + 1 :]
            break
        out.append(ch)
        escaped = ch == "\\"
    if rest is None:
        return "".join(out), None
    data: list[str] = []
    escaped = False
    for ch in rest:
        if escaped:
            if ch != "%":
                data.append("\\")
        elif ch == "%":
            ch = "\n"
        escaped = ch == "\\"
        if not escaped:
            data.append(ch)
    if escaped:
        data.append("\\")
    return "".join(out), "".join(data)


def _unquote(value: str) -> str:
    value = value.rstrip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _directive_words(text: str, start: int) -> list[tuple[int, str]]:
    """Split a directive at unquoted spaces outside brackets: (column, word) pairs."""
    words: list[tuple[int, str]] = []
    depth = 0
    quote = ""
    begin = -1
    for i, ch in enumerate(text + " "):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch in " \t" and depth <= 0:
            if begin >= 0:
                words.append((start + begin + 1, text[begin:i]))
                begin = -1
            continue
        if begin < 0:
            begin = i
    if begin >= 0 and begin < len(text):  # an unclosed bracket or quote runs to the end
        words.append((start + begin + 1, text[begin:]))
    return words


def _set_dotted(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        inner = target.get(key)
        if not isinstance(inner, dict):
            inner = target[key] = {}
        target = inner
    target[keys[-1]] = value


class _Reader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.out = Crontab()
        self.fields = 5
        self.user_column = False
        self.env: list[tuple[str, str]] = []
        self.shell: str | None = None
        self.cron_tz: str | None = None
        self.mailto: str | None = None
        self.pending: dict[str, Any] = {}
        self.pending_pos: dict[KeyPath, tuple[int, int]] = {}
        self.pending_line = 0
        self.seen_line = False  # a job or variable line was read: include= is too late
        self.names: dict[str, int] = {}

    def problem(self, line: int, column: int, message: str, key: KeyPath = ()) -> None:
        self.out.problems.append(CrontabProblem(line, column, key, message))

    def read(self) -> Crontab:
        for number, raw in enumerate(self.text.splitlines(), start=1):
            line = raw.rstrip("\r")
            stripped = line.lstrip(" \t")
            if not stripped:
                continue
            if stripped.startswith("#"):
                body = stripped[1:].lstrip(" \t")
                if body.startswith(_DIRECTIVE):
                    col = len(line) - len(body) + len(_DIRECTIVE)
                    self.directive(number, body[len(_DIRECTIVE) :], col)
                continue
            env = _ENV_RE.fullmatch(stripped)
            if env is not None and not self.prefixed_job(env[1], env[2]):
                self.seen_line = True
                self.variable(env[1], _unquote(env[2]))
                continue
            self.seen_line = True
            self.job(number, line)
        if self.pending:
            self.problem(
                self.pending_line, 1, "this '# cronstable:' directive is followed by no job line"
            )
        return self.out

    @staticmethod
    def prefixed_job(name: str, value: str) -> bool:
        """``CRON_TZ=Zone 0 9 * * * cmd`` is a job with a zone prefix, not a variable."""
        return name in ("CRON_TZ", "TZ") and len(value.split()) > 1

    # ------------------------------------------------------------ lines

    def variable(self, name: str, value: str) -> None:
        if name == "CRON_TZ":
            self.cron_tz = value or None
            return
        if name == "MAILTO":
            self.mailto = value or None
            return
        if name == "SHELL":
            self.shell = value
        self.env = [(k, v) for k, v in self.env if k != name]
        self.env.append((name, value))

    def directive(self, line: int, text: str, column: int) -> None:
        self.pending_line = self.pending_line or line
        for col, word in _directive_words(text, column):
            if word == "user-column":
                self.user_column = True
                continue
            key, eq, value = word.partition("=")
            if not eq or not _KEY_RE.fullmatch(key):
                self.problem(
                    line,
                    col,
                    f"invalid directive {word!r}: write key=value (a dotted YAML key and a "
                    "YAML flow value), fields=7, user-column or include=PATH",
                )
                continue
            if key == "fields":
                if value not in ("5", "7"):
                    self.problem(line, col, f"fields={value}: a crontab reads 5 or 7 fields")
                else:
                    self.fields = int(value)
                continue
            if key == "include":
                if self.seen_line or self.out.jobs:
                    self.problem(
                        line, col, "include= must come before the first job or variable line"
                    )
                    continue
                for part in value.split(","):
                    if part:
                        self.out.positions[("include", len(self.out.include))] = (line, col)
                        self.out.include.append(part)
                continue
            try:
                parsed = yamlread.parse(value).data if value else None
            except yamlread.YamlError as exc:
                self.problem(line, col + len(key) + 1, f"{key}: {exc.message}")
                continue
            keys = key.split(".")
            _set_dotted(self.pending, keys, parsed)
            for end in range(1, len(keys) + 1):
                self.pending_pos.setdefault(tuple(keys[:end]), (line, col))

    def job(self, line: int, text: str) -> None:
        words = [(m.start(), m.group()) for m in _WORD_RE.finditer(text)]
        at = 0
        prefix = ""
        if words[0][1].startswith(("CRON_TZ=", "TZ=")):
            prefix = words[0][1]
            at = 1
        first = words[at][1] if at < len(words) else ""
        count = (2 if first.lower() == "@every" else 1) if first.startswith("@") else self.fields
        need = at + count + (1 if self.user_column else 0)
        if len(words) <= need:
            what = "an @alias" if first.startswith("@") else f"{self.fields} fields"
            user = ", a user" if self.user_column else ""
            self.problem(
                line,
                words[0][0] + 1,
                f"a crontab line is {what}{user} and a command; this line has "
                f"{len(words)} word{'s' if len(words) != 1 else ''}",
            )
            self.pending, self.pending_pos, self.pending_line = {}, {}, 0
            return
        schedule_words = [w for _, w in words[at : at + count]]
        schedule = " ".join(schedule_words)
        user_name = words[at + count][1] if self.user_column else None
        command_start = words[need][0]
        written = text[command_start:].rstrip()
        command, stdin = split_stdin(written)
        zoned = bool(prefix) or self.cron_tz is not None
        if prefix:
            schedule_text = f"{prefix} {schedule}"
        elif self.cron_tz is not None:
            schedule_text = f"CRON_TZ={self.cron_tz} {schedule}"
        else:
            schedule_text = schedule
        index = len(self.out.jobs)
        raw: dict[str, Any] = {}
        where = ("jobs", index)
        self.out.positions[where] = (line, words[0][0] + 1)
        if "name" in self.pending:
            raw["name"] = self.pending.pop("name")
            self.out.positions[(*where, "name")] = self.pending_pos[("name",)]
        else:
            raw["name"] = self.default_name(schedule_text, written)
        raw["schedule"] = schedule_text
        self.out.positions[(*where, "schedule")] = (line, words[0][0] + 1)
        raw["command"] = command
        self.out.positions[(*where, "command")] = (line, command_start + 1)
        if stdin is not None:
            raw["stdin"] = stdin
            self.out.positions[(*where, "stdin")] = (line, command_start + 1)
        if user_name is not None:
            raw["user"] = user_name
            self.out.positions[(*where, "user")] = (line, words[at + count][0] + 1)
        if self.shell is not None:
            raw["shell"] = self.shell
        if self.env:
            raw["environment"] = [{"key": k, "value": v} for k, v in self.env]
        if self.mailto is not None:
            raw["onFailure"] = {"report": {"mail": {"to": self.mailto}}}
        for key, value in self.pending.items():
            raw[key] = _merge_directive(raw.get(key), value)
        for path, position in self.pending_pos.items():
            if path != ("name",):
                self.out.positions[(*where, *path)] = position
        self.out.jobs.append(raw)
        self.out.zoned.append(zoned)
        self.out.mail.append(self.mailto is not None)
        self.pending, self.pending_pos, self.pending_line = {}, {}, 0

    def default_name(self, schedule: str, command: str) -> str:
        digest = hashlib.sha256((schedule + command).encode()).hexdigest()[:8]
        base = f"{self.path.replace('/', '-')}-{digest}"
        seen = self.names.get(base, 0) + 1
        self.names[base] = seen
        return base if seen == 1 else f"{base}-{seen}"


def _merge_directive(base: Any, over: Any) -> Any:
    """A directive's value over the line's own, as YAML layers merge: maps deeply,
    lists appended (``environment=[...]`` adds to the variable lines), the rest replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = _merge_directive(out.get(key), value)
        return out
    if isinstance(base, list) and isinstance(over, list):
        return base + over
    return over


def parse_crontab(path: str, data: bytes) -> Crontab:
    """Read the crontab at tree path ``path``; problems are collected, not raised."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        bad = Crontab()
        line = data.count(b"\n", 0, exc.start) + 1
        bad.problems.append(CrontabProblem(line, 1, (), f"not valid UTF-8 ({exc.reason})"))
        return bad
    return _Reader(path, text).read()
