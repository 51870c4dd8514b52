"""``cronstable import crontab FILE``: a crontab as the YAML file that means the same.

The crontab is loaded by the real loader first (so it is checked exactly as
``validate`` checks it), then each line's job is written with the settings the
crontab gave it: names, schedules (``CRON_TZ`` as a prefix), ``stdin`` for
``%``, the ``include`` of its defaults, and ``failsWhen.producesStderr`` as the
load resolved it (a crontab's default differs from YAML's).  Loading the output
in place of the crontab gives the same job-set id.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import yaml

from cronstable.cli.exits import EXIT_INVALID, EXIT_OK
from cronstable.cli.validate import report_invalid
from cronstable.config import ConfigError, DiskTree, load
from cronstable.config.crontab import parse_crontab
from cronstable.config.tree import TreeError


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line text (stdin) as a literal block."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def crontab_as_yaml(path: str, schema: str = "cronstable.schema.json") -> tuple[str, list[str]]:
    """The YAML for the crontab at ``path`` and the load's warnings.

    Raises :class:`ConfigError` when the crontab does not load.
    """
    directory, name = os.path.split(os.path.abspath(path))
    tree = DiskTree(directory)
    state = load(tree, name, display_root=os.path.dirname(path))
    try:
        data = tree.read(name)
    except TreeError as exc:  # pragma: no cover - load() read it a moment ago
        raise ConfigError([]) from exc
    crontab = parse_crontab(name, data)
    jobs: list[dict[str, Any]] = []
    for raw in crontab.jobs:
        job = state.jobs[raw["name"]]
        entry = dict(raw)
        fails = dict(entry.get("failsWhen") or {})
        fails.setdefault("producesStderr", job.config.fails_when.produces_stderr)
        entry["failsWhen"] = fails
        jobs.append(entry)
    doc: dict[str, Any] = {}
    if crontab.include:
        doc["include"] = crontab.include
    doc["jobs"] = jobs
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)
    text = (
        f"# yaml-language-server: $schema={schema}\n"
        f"# Converted from the crontab {name} by `cronstable import crontab`.\n"
        f"{body}"
    )
    return text, [str(w) for w in state.warnings]


def cmd_import_crontab(path: str, schema: str) -> int:
    try:
        text, warnings = crontab_as_yaml(path, schema)
    except ConfigError as exc:
        report_invalid(path, exc)
        return EXIT_INVALID
    for warning in warnings:
        print(f"  warning: {warning}", file=sys.stderr)
    sys.stdout.write(text)
    return EXIT_OK
