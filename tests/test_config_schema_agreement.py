"""The JSON Schema and the loader agree on the shape of every value.

The schema is lenient about scalars on purpose (an editor reads ``yes`` and
``1.10`` by YAML 1.2 rules, the loader reads text), so the two cannot agree on
every document.  They must agree on node kinds: null, scalar, sequence and
mapping.  Differential test over the test corpus (the configurations in
``examples/``, yacron's files in ``shared/compat`` when present, and every YAML
configuration written in ``tests/test_config_*.py``), each document as written
and with every value replaced by a value of each other kind:

* when the loader refuses a value for its kind, the schema refuses the same value;
* when the schema refuses a value for its kind, the loader refuses the document.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cronstable.config import ConfigError, MemoryTree, Problem, load
from cronstable.config.loader import TOP_LEVEL_KEYS
from cronstable.config.yamlread import YamlError, parse
from cronstable.errors import KeyPath

REPO = Path(__file__).resolve().parent.parent
COMPAT = REPO.parent / "shared" / "compat" / "yacron-0.19.0"
SCHEMA = json.loads((REPO / "schema" / "cronstable.schema.json").read_text())


# --------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------


def _strings_in(path: Path) -> Iterator[str]:
    """Every string a test file writes: literals, and literals joined by ``+``."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            try:
                value = ast.literal_eval(node)
            except ValueError:
                continue
            if isinstance(value, str):
                yield value


def _is_config(text: str) -> bool:
    """Well-formed YAML (for the loader and an editor) whose keys are configuration sections."""
    try:
        data = parse(text).data
        editor_view(text)
    except (YamlError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and bool(data) and set(data) <= set(TOP_LEVEL_KEYS)


def _corpus() -> dict[str, str]:
    found: dict[str, str] = {}
    files = sorted((REPO / "examples").rglob("*.y*ml"))
    if COMPAT.is_dir():
        files += sorted(COMPAT.glob("*.yaml"))
    for file in files:
        text = file.read_text()
        if _is_config(text):  # yacron's testbrokenconfig.yaml is not even YAML
            found[str(file.relative_to(file.parents[1]))] = text
    for test_file in sorted((REPO / "tests").glob("test_config_*.py")):
        for index, text in enumerate(dict.fromkeys(_strings_in(test_file))):
            if _is_config(text):
                found[f"{test_file.name}#{index}"] = text
    return found


# --------------------------------------------------------------------------
# The two judges
# --------------------------------------------------------------------------


class _Yaml12(yaml.SafeLoader):
    """What an editor sees: YAML 1.2 core schema typing (no yes/no, dates or 1:30)."""


_Yaml12.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in [
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
]:
    _Yaml12.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), list(_first))


def editor_view(text: str) -> Any:
    return yaml.load(text, Loader=_Yaml12)  # a SafeLoader subclass


class _Dumper(yaml.SafeDumper):
    """Writes null as the empty value, the one null the loader reads (``null`` is text)."""


_Dumper.add_representer(
    type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "")
)


def as_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def loader_problems(text: str) -> list[Problem]:
    """The loader's problems with one configuration file (none: it is accepted)."""
    try:
        load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")
    except ConfigError as exc:
        return list(exc.problems)
    return []


_NOT_A = r"(nothing|a list|a mapping)"
LOADER_KIND_MESSAGES = [
    re.compile(rf"^expected .*, got {_NOT_A}( |$)"),  # a typed field given the wrong kind
    re.compile(r"^expected (a mapping|a list)\b"),  # a container given a scalar
    re.compile(r"^empty schedule\b"),
    re.compile(r"^(a configuration file|a job) must be a mapping"),
    re.compile(r"^expected a path$"),
]


def is_kind_problem(problem: Problem) -> bool:
    return any(pattern.search(problem.message) for pattern in LOADER_KIND_MESSAGES)


def _only_type(error: jsonschema.ValidationError) -> bool:
    """A type error, or a union whose every branch fails on the type at this node."""
    if error.validator == "type":
        return True
    if error.validator in ("anyOf", "oneOf") and error.context:
        here = [e for e in error.context if not e.relative_path]
        return bool(here) and len(here) == len(error.context) and all(map(_only_type, here))
    return False


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(SCHEMA)


def schema_errors(data: Any) -> list[jsonschema.ValidationError]:
    return list(_validator().iter_errors(data))


def _refused_at(errors: list[jsonschema.ValidationError]) -> set[KeyPath]:
    """Every path the schema finds fault with, inside the branches of unions too."""
    paths: set[KeyPath] = set()
    for error in errors:
        paths.add(tuple(error.absolute_path))
        paths |= _refused_at(list(error.context or ()))
    return paths


def disagreements(text: str, data: Any, at: KeyPath | None = None) -> list[str]:
    """How loader (reading ``text``) and schema (given ``data``, the editor's view of it)
    disagree on kinds (at ``at`` only, when given)."""
    problems = loader_problems(text)
    errors = schema_errors(data)
    out: list[str] = []
    schema_paths = _refused_at(errors)
    for problem in problems:
        if at is not None and problem.key != at:
            continue
        if is_kind_problem(problem) and problem.key not in schema_paths:
            out.append(f"loader refuses the kind, schema accepts: {problem}")
    for error in errors:
        path = tuple(error.absolute_path)
        if at is not None and path != at:
            continue
        if _only_type(error) and not problems:
            out.append(f"schema refuses the kind, loader accepts: {list(path)}: {error.message}")
    return out


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

CORPUS = _corpus()


def test_the_corpus_is_large_enough_to_mean_something() -> None:
    assert len(CORPUS) >= 100, sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_loader_and_schema_agree_on_kinds_in_the_corpus(name: str) -> None:
    text = CORPUS[name]
    assert disagreements(text, editor_view(text)) == []


def _paths(data: Any, prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str):
                yield (*prefix, key), value
                yield from _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield (*prefix, index), value
            yield from _paths(value, (*prefix, index))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "sequence"
    return "scalar"


OTHER_KIND = {"null": None, "scalar": "x", "sequence": ["x"], "mapping": {"x": "x"}}


def _replaced(data: Any, path: KeyPath, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {k: _replaced(v, rest, value) if k == head else v for k, v in data.items()}
    return [_replaced(v, rest, value) if i == head else v for i, v in enumerate(data)]


def _mutations() -> dict[str, tuple[Any, KeyPath]]:
    """Each value of the corpus replaced by one of each other kind, once per place in the format
    (list positions and names under free-form mappings count as one place)."""
    seen: set[tuple[str | int, ...]] = set()
    out: dict[str, tuple[Any, KeyPath]] = {}
    for name in sorted(CORPUS):
        data = editor_view(CORPUS[name])
        if schema_errors(data) or loader_problems(as_yaml(data)):
            continue  # start from documents both accept, so a refusal is the mutation's
        for path, value in _paths(data):
            place = tuple("*" if isinstance(p, int) else p for p in path)
            if place[:1] == ("logging",):
                place = place[:3]
            for kind, other in OTHER_KIND.items():
                if kind == _kind(value) or (*place, kind) in seen:
                    continue
                seen.add((*place, kind))
                out[f"{name}:{'.'.join(map(str, path))}={kind}"] = (
                    _replaced(data, path, other),
                    path,
                )
    return out


MUTATIONS = _mutations()


def test_the_mutations_reach_every_part_of_the_format() -> None:
    places = {key.split(":", 1)[1].rsplit("=", 1)[0] for key in MUTATIONS}
    assert len(MUTATIONS) > 200
    for needle in (
        "schedule", "onFailure", "environment", "logging", "include", "defaults",
        "pools", "poolTimeout", "poolPriority",
    ):  # fmt: skip
        assert any(needle in place for place in places), needle


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_loader_and_schema_agree_on_kinds_of_every_value(name: str) -> None:
    data, path = MUTATIONS[name]
    assert disagreements(as_yaml(data), data, at=path) == []


def test_the_mutations_reach_the_operator_keys() -> None:
    """The keys of issue 18 (``jitter``, ``suspend``, ``onPaused``) are in the corpus
    (``test_config_ops.py``), each value of them mutated to every other kind."""
    places = {key.split(":", 1)[1].rsplit("=", 1)[0] for key in MUTATIONS}
    for needle in ("jitter", "suspend", "onPaused", "alertAfter"):
        assert any(needle in place for place in places), needle
