"""Scalar types of the configuration format.

YAML scalars reach the models as the text written (see :mod:`.yamlread`); these
annotated types convert that text by the field's type, with messages written
for operators rather than for Python programmers.  Python callers may pass
native values (``True``, ``30``) as well.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

# strictyaml's (yacron's) words, so migrated files keep working
TRUE_WORDS = frozenset({"true", "yes", "on", "y", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "n", "0"})


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "nothing"
    return repr(value)


def to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise PydanticCustomError("text", "expected text, got {got}", {"got": _describe(value)})


def to_flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise PydanticCustomError(
        "flag",
        "expected true or false (also yes/no, on/off, y/n, 1/0), got {got}",
        {"got": _describe(value)},
    )


def to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise PydanticCustomError("integer", "expected an integer, got {got}", {"got": repr(value)})
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""), 10)
        except ValueError:
            pass
    raise PydanticCustomError(
        "integer", "expected an integer, got {got}", {"got": _describe(value)}
    )


def to_number(value: Any) -> float:
    if isinstance(value, bool):
        raise PydanticCustomError("number", "expected a number, got {got}", {"got": repr(value)})
    if isinstance(value, int | float):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise PydanticCustomError(
                "number", "expected a number, got {got}", {"got": repr(value)}
            ) from None
    else:
        raise PydanticCustomError(
            "number", "expected a number, got {got}", {"got": _describe(value)}
        )
    if not math.isfinite(result):
        raise PydanticCustomError(
            "number", "expected a finite number, got {got}", {"got": repr(value)}
        )
    return result


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b?)\s*$", re.IGNORECASE)


def to_size(value: Any) -> int:
    """Bytes: an integer, or a number with K, M, G or T (powers of 1024; ``Mi``, ``MB`` alike)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return to_int(value)
    if isinstance(value, str) and (match := _SIZE_RE.match(value.replace("_", ""))):
        number, unit = match.groups()
        if unit or number.isdigit():
            return int(float(number) * _SIZE_UNITS[unit.lower()])
    raise PydanticCustomError(
        "size",
        "expected a size in bytes, or a number followed by K, M, G or T (like 512M), got {got}",
        {"got": _describe(value)},
    )


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|h|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def to_duration(value: Any) -> float:
    """Seconds: a number, or Go's duration text (``90s``, ``1h30m``, ``500ms``), as
    ``@every`` takes it; never negative."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = to_number(value)
    elif isinstance(value, str) and (text := value.strip().replace("_", "")):
        seconds = 0.0
        pos = 0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match[1]) * _DURATION_UNITS[match[2]]
            pos = match.end()
        if pos != len(text):
            try:
                seconds = float(text)
            except ValueError:
                seconds = math.nan
        if not math.isfinite(seconds):
            raise PydanticCustomError(
                "duration",
                "expected a duration: seconds, or numbers with units h, m, s or ms "
                "(like 90s or 1h30m), got {got}",
                {"got": repr(value)},
            )
    else:
        raise PydanticCustomError(
            "duration",
            "expected a duration: seconds, or numbers with units h, m, s or ms "
            "(like 90s or 1h30m), got {got}",
            {"got": _describe(value)},
        )
    return seconds


def to_list(value: Any) -> Any:
    """An empty value (``key:`` with nothing after it) is an empty list."""
    return [] if value is None else value


Text = Annotated[str, BeforeValidator(to_text)]
Flag = Annotated[bool, BeforeValidator(to_flag)]
Int = Annotated[int, BeforeValidator(to_int)]
Number = Annotated[float, BeforeValidator(to_number)]


def _optional(convert: Any) -> Any:
    def validate(value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip() in ("", "~", "null")):
            return None
        return convert(value)

    return validate


OptText = Annotated[str | None, BeforeValidator(_optional(to_text))]
OptInt = Annotated[int | None, BeforeValidator(_optional(to_int))]
OptNumber = Annotated[float | None, BeforeValidator(_optional(to_number))]
OptDuration = Annotated[
    float | None,
    BeforeValidator(_optional(to_duration), json_schema_input_type=float | str | None),
]
Size = Annotated[int, BeforeValidator(to_size, json_schema_input_type=int | str)]
OptSize = Annotated[
    int | None,
    BeforeValidator(_optional(to_size), json_schema_input_type=int | str | None),
]


def to_moment(value: Any) -> datetime:
    """An aware datetime: ISO 8601 with an offset or ``Z`` (``2026-05-01T09:00:00+02:00``);
    a time without one is refused, since the zone it meant cannot be known."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
        except ValueError:
            raise PydanticCustomError(
                "moment",
                "expected a date and time in ISO 8601 with an offset "
                "(like 2026-05-01T09:00:00+02:00 or 2026-05-01T07:00:00Z), got {got}",
                {"got": repr(value)},
            ) from None
    else:
        raise PydanticCustomError(
            "moment", "expected a date and time, got {got}", {"got": _describe(value)}
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise PydanticCustomError(
            "moment",
            "{got} has no offset: write one (2026-05-01T09:00:00+02:00) or Z for UTC",
            {"got": repr(value)},
        )
    return moment


OptMoment = Annotated[
    datetime | None,
    BeforeValidator(_optional(to_moment), json_schema_input_type=str | None),
]
