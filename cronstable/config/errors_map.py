"""Turning pydantic's validation errors into located, operator-readable problems."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from cronstable.errors import KeyPath

UNION_TAGS = frozenset({"<expression>", "<fields>"})
"""The tags of our discriminated unions (models.ScheduleSpec); pydantic puts them in locations."""


def clean_loc(loc: tuple[str | int, ...]) -> KeyPath:
    """Drop pydantic's union tags from an error location."""
    return tuple(p for p in loc if p not in UNION_TAGS)


def candidates(tp: Any) -> list[Any]:
    """The concrete types an annotation may hold, Annotated/Optional/unions unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return candidates(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(tp) for c in candidates(arg)]
    return [tp]


def item_type(tp: Any, part: str | int) -> Any | None:
    """The type of ``tp``'s item at ``part``: a list's or tuple's element (an index), a
    dict's value (a key); None when ``tp`` is no such container."""
    for cand in candidates(tp):
        origin = typing.get_origin(cand)
        if isinstance(part, int) and origin in (list, tuple):
            return typing.get_args(cand)[0]
        if isinstance(part, str) and origin is dict:
            return typing.get_args(cand)[1]
    return None


def _step(tp: Any, part: str | int) -> Any | None:
    item = item_type(tp, part)
    if item is not None:
        return item
    for cand in candidates(tp):
        if isinstance(part, str) and isinstance(cand, type) and issubclass(cand, BaseModel):
            for name, info in cand.model_fields.items():
                if part in (info.alias, name):
                    return info.annotation
    return None


def model_at(root: type[BaseModel], path: KeyPath) -> type[BaseModel] | None:
    """The model class validating the mapping at ``path`` under ``root``."""
    tp: Any = root
    for part in path:
        tp = _step(tp, part)
        if tp is None:
            return None
    for cand in candidates(tp):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def known_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def suggest(word: str, choices: list[str]) -> str:
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return f" (did you mean {lowered[word.lower()]!r}?)"
    # above 0.6: three letters in common in ten ('name' and 'onLate') are no typo
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.61)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _got(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    return repr(value)


def _number(value: Any) -> str:
    """30.0 → 30, 0.5 → 0.5: numbers as an operator wrote them."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if isinstance(value, int) else _got(value)


def describe(error: ErrorDetails, root: type[BaseModel], loc: KeyPath) -> tuple[KeyPath, str]:
    """(key path to report, message) for one pydantic error at cleaned ``loc``."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "missing":
        return loc[:-1], f"missing required key {loc[-1]!r}"
    if kind == "extra_forbidden":
        parent = loc[:-1]
        model = model_at(root, parent)
        key = str(loc[-1])
        hint = suggest(key, known_keys(model)) if model else ""
        return parent, f"unknown key {key!r}{hint}"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        choices = [c.strip().strip("'") for c in str(expected).replace(" or ", ", ").split(",")]
        hint = suggest(str(value), choices) if isinstance(value, str) else ""
        return loc, f"expected one of {', '.join(choices)}, got {_got(value)}{hint}"
    if kind == "string_too_short":
        return loc, "must not be empty"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": ("at least", "ge"),
            "greater_than": ("more than", "gt"),
            "less_than_equal": ("at most", "le"),
            "less_than": ("less than", "lt"),
        }[kind]
        return loc, f"must be {words[0]} {_number(ctx.get(words[1]))}, got {_number(value)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return loc, f"expected a mapping, got {_got(value)}"
    if kind in ("list_type", "tuple_type"):
        return loc, f"expected a list, got {_got(value)}"
    if kind in ("string_type",):
        return loc, f"expected text, got {_got(value)}"
    return loc, error["msg"]
