"""Where a configuration holds secrets, found from the models themselves.

A field holds a secret when its type is a :class:`~cronstable.config.models.SecretSource`
(``value``, ``fromFile``, ``fromEnvVar``: a plain text written there is the secret
itself), or when it is marked with :data:`~cronstable.config.models.SECRET_TEXT` (the
text is a secret) or :data:`~cronstable.config.models.CREDENTIAL_URL` (a URL whose
userinfo and query values are secrets).  Lists and mappings of those hold secrets too.

* :func:`secret_fields` lists every such field reachable from a configuration file
  (the table test of ``tests/test_secret_outputs.py`` has a row for each);
* :func:`inline_secrets` collects the inline secret texts of a document as read
  (before validation: a plain text where a mapping was due is collected too), for
  :func:`cronstable.redact.redact` to mask in the revision's errors;
* :func:`secret_at` tells whether the value at an error's location is such a text
  (the error must not quote it) or a marked URL;
* :func:`hide_urls` rewrites a model dump with every marked URL's credentials masked
  (``GET /config`` and ``cronstable diff`` show them as digests).

Pure, and cheap on documents without secrets: only keys that can lead to one are
looked at.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from cronstable.config.errors_map import candidates, item_type
from cronstable.config.models import ConfigFile, Hides, SecretSource
from cronstable.errors import KeyPath

Kind = Literal["source", "secret", "url"]
"""A SecretSource, a text that is a secret, or a URL holding credentials."""

SEARCHABLE = 4
"""Inline secrets shorter than this are masked only where their own key is quoted:
searched for in whole messages, they would mask ordinary words and numbers."""


@dataclass(frozen=True, slots=True)
class SecretField:
    """One field of one model that holds a secret."""

    owner: type[BaseModel]
    key: str
    """The field's YAML key."""
    kind: Kind

    @property
    def name(self) -> str:
        return f"{self.owner.__name__}.{self.key}"


def _models(tp: Any) -> list[type[BaseModel]]:
    """Every model an annotation may hold, inside lists and mappings too."""
    out: list[type[BaseModel]] = []
    for cand in candidates(tp):
        origin = typing.get_origin(cand)
        if origin in (list, tuple):
            out.extend(_models(typing.get_args(cand)[0]))
        elif origin is dict:
            out.extend(_models(typing.get_args(cand)[1]))
        elif isinstance(cand, type) and issubclass(cand, BaseModel):
            out.append(cand)
    return out


def _field_kind(info: FieldInfo) -> Kind | None:
    for item in info.metadata:
        if isinstance(item, Hides):
            return item.kind
    if any(issubclass(m, SecretSource) for m in _models(info.annotation)):
        return "source"
    return None


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a value of one annotation may be, for the walk over documents."""

    items: _Shape | None = None
    """The shape of the items, when the value may be a list."""
    values: _Shape | None = None
    """The shape of the values, when the value may be a mapping of names to values."""
    model: type[BaseModel] | None = None
    """The model (with secrets below it) a mapping value is validated as."""


def _shape(tp: Any) -> _Shape:
    items = values = None
    model = None
    for cand in candidates(tp):
        origin = typing.get_origin(cand)
        if origin in (list, tuple) and items is None:
            items = _shape(typing.get_args(cand)[0])
        elif origin is dict and values is None:
            values = _shape(typing.get_args(cand)[1])
        elif isinstance(cand, type) and issubclass(cand, BaseModel) and model is None:
            model = cand if _slots(cand) else None
    return _Shape(items, values, model)


@dataclass(frozen=True, slots=True)
class _Slot:
    key: str
    """The YAML key (a model dump by alias has it too)."""
    name: str
    """The attribute name (a dump without aliases has that)."""
    annotation: Any
    kind: Kind | None
    """None: the field holds no secret itself, but a model below it does."""
    shape: _Shape


@functools.cache
def _slots(model: type[BaseModel]) -> tuple[_Slot, ...]:
    """The fields of ``model`` that hold or lead to a secret."""
    slots: list[_Slot] = []
    for name, info in model.model_fields.items():
        kind = _field_kind(info)
        if kind is None and not any(_slots(m) for m in _models(info.annotation) if m is not model):
            continue
        shape = _shape(info.annotation) if kind is None else _shape_of_kind(info.annotation)
        slots.append(_Slot(info.alias or name, name, info.annotation, kind, shape))
    return tuple(slots)


def _shape_of_kind(tp: Any) -> _Shape:
    """A secret field's shape: its lists and mappings, not the SecretSource inside."""
    shape = _shape(tp)
    return _Shape(shape.items, shape.values, None)


@functools.cache
def _slot_by_key(model: type[BaseModel]) -> dict[str, _Slot]:
    return {k: slot for slot in _slots(model) for k in (slot.key, slot.name)}


def secret_fields(root: type[BaseModel] = ConfigFile) -> tuple[SecretField, ...]:
    """Every field holding a secret in the models reachable from ``root``, in model order."""
    found: dict[tuple[type[BaseModel], str], SecretField] = {}
    seen: set[type[BaseModel]] = set()

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            kind = _field_kind(info)
            key = info.alias or name
            if kind is not None:
                found.setdefault((model, key), SecretField(model, key, kind))
                if kind == "source":
                    continue  # inside a SecretSource: its own keys, not more secrets
            for inner in _models(info.annotation):
                visit(inner)

    visit(root)
    return tuple(found.values())


# ------------------------------------------------------------ values


_Found = tuple[KeyPath, Kind, Any]


def _walk(model: type[BaseModel], data: Any, path: KeyPath, out: list[_Found]) -> list[_Found]:
    """(path, kind, value) of every secret position in ``data``, a mapping of ``model``."""
    if isinstance(data, dict):
        slots = _slot_by_key(model)
        # by the keys written, not by the model's slots: the walk costs what is set
        for key, value in data.items():
            slot = slots.get(key)
            if slot is not None and value is not None:
                _visit(slot, slot.shape, value, (*path, key), out)
    return out


def _visit(slot: _Slot, shape: _Shape, value: Any, path: KeyPath, out: list[_Found]) -> None:
    if isinstance(value, list) and shape.items is not None:
        inner = shape.items
        if slot.kind is None and inner.items is None and inner.values is None and inner.model:
            # a list of models (``jobs``): items whose keys lead to no secret are skipped
            # without a call each (a C scan of their keys)
            slots = _slot_by_key(inner.model).keys()
            for index, item in enumerate(value):
                if isinstance(item, dict) and not slots.isdisjoint(item):
                    _walk(inner.model, item, (*path, index), out)
            return
        for index, item in enumerate(value):
            _visit(slot, inner, item, (*path, index), out)
    elif isinstance(value, dict) and shape.values is not None:
        for key, item in value.items():
            _visit(slot, shape.values, item, (*path, key), out)
    elif slot.kind is not None:
        out.append((path, slot.kind, value))
    elif isinstance(value, dict) and shape.model is not None:
        _walk(shape.model, value, path, out)


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def inline_secrets(data: Any, root: type[BaseModel] = ConfigFile) -> set[str]:
    """The inline secret texts in ``data`` (a document of ``root``, as read): the ``value``
    of every SecretSource, a plain text written where one was due, every marked secret
    text; each at least :data:`SEARCHABLE` characters long."""
    found: set[str] = set()
    for _, kind, value in _walk(root, data, (), []):
        if kind == "url":
            continue  # its secrets are its parts: redact finds them in any text
        text = _text(value.get("value")) if kind == "source" and isinstance(value, dict) else None
        if text is None:
            text = _text(value)
        if text is not None and len(text) >= SEARCHABLE:
            found.add(text)
    return found


def secret_at(root: type[BaseModel], loc: KeyPath) -> Literal["text", "url"] | None:
    """What the value at ``loc`` (an error's location under ``root``) is: ``"text"``, a
    secret's text (a SecretSource's ``value``, a plain text where a SecretSource is due,
    a marked text); ``"url"``, a marked URL; None, no secret."""
    model: type[BaseModel] | None = root
    index = 0
    while model is not None and index < len(loc):
        slot = _slot_by_key(model).get(str(loc[index]))
        if slot is None:
            return None
        index += 1
        tp: Any = slot.annotation
        # through the lists and mappings of the field's type
        while index < len(loc):
            step = item_type(tp, loc[index])
            if step is None:
                break
            tp, index = step, index + 1
        if slot.kind is not None:
            rest = loc[index:]
            if slot.kind == "source":
                return "text" if rest in ((), ("value",)) else None
            if rest:
                return None
            return "text" if slot.kind == "secret" else "url"
        inner = [m for m in _models(tp) if _slots(m)]
        model = inner[0] if inner else None
    return None


def hide_urls(data: Any, model: type[BaseModel], hide: Callable[[str], str]) -> Any:
    """``data`` (a dump of ``model``) with ``hide`` applied to every marked URL."""
    positions = [where for where, kind, _ in _walk(model, data, (), []) if kind == "url"]
    if not positions:
        return data
    out = _copy(data)
    for where in positions:
        holder: Any = out
        for part in where[:-1]:
            holder = holder[part]
        value = holder[where[-1]]
        if isinstance(value, str):
            holder[where[-1]] = hide(value)
    return out


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_copy(value) for value in data]
    return data
