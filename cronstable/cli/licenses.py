"""``cronstable --third-party-licenses``: every installed dependency and its license.

Read from the installed distributions' metadata (``importlib.metadata``), never from
a list kept by hand: the dependencies of the installed ``cronstable`` distribution,
followed transitively, each one that is installed; the ``speedups`` extra's too (it
changes what the daemon runs on).  A license is the metadata's
``License-Expression`` (PEP 639), else its ``License`` field (its first line: some
packages put the whole text there), else its ``License ::`` classifiers.  No
asyncio is imported on the way (a test checks it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import metadata

EXTRAS = frozenset({"speedups"})
"""cronstable's own extras whose dependencies are listed when they are installed."""
LICENSE_MAX = 80
"""Characters of a ``License`` field shown at most (the first line of a whole text)."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


@dataclass(frozen=True, slots=True)
class Installed:
    name: str
    version: str
    license: str


def normalize(name: str) -> str:
    """PEP 503's form of a project name (``Foo_Bar`` and ``foo-bar`` are one project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(dist: metadata.Distribution, extras: frozenset[str]) -> list[str]:
    """The projects ``dist`` requires: unconditionally, or for one of ``extras``.

    Any other marker (a Python version, a platform) is not evaluated: a requirement
    that does not apply here is normally not installed, and what is not installed is
    not listed."""
    names: list[str] = []
    for requirement in dist.requires or []:
        matched = _NAME.match(requirement)
        if matched is None:
            continue
        _, _, marker = requirement.partition(";")
        extra = _EXTRA.search(marker)
        if extra is not None and normalize(extra.group(1)) not in extras:
            continue
        names.append(matched.group(1))
    return names


def _field(meta: metadata.PackageMetadata, name: str) -> str:
    values = meta.get_all(name) or []
    return str(values[0]).strip() if values else ""


def license_of(dist: metadata.Distribution) -> str:
    """The license the metadata states (see the module docstring); ``UNKNOWN`` if none."""
    meta = dist.metadata
    expression = _field(meta, "License-Expression")
    if expression:
        return expression
    text = _field(meta, "License")
    if text and text.upper() != "UNKNOWN":
        first = text.splitlines()[0].strip()
        return first if len(first) <= LICENSE_MAX else first[: LICENSE_MAX - 1] + "…"
    classifiers = [
        c.split("::")[-1].strip()
        for c in meta.get_all("Classifier") or []
        if c.startswith("License ::") and c.count("::") >= 2
    ]
    return "; ".join(classifiers) if classifiers else "UNKNOWN"


def installed_dependencies(root: str = "cronstable") -> list[Installed]:
    """``root``'s installed dependencies, transitively, sorted by name (``root`` not
    among them); empty when ``root`` itself is not installed."""
    try:
        top = metadata.distribution(root)
    except metadata.PackageNotFoundError:
        return []
    seen = {normalize(root)}
    found: list[Installed] = []
    pending = requirement_names(top, EXTRAS)
    while pending:
        name = pending.pop()
        key = normalize(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not installed here (an extra not chosen, a marker that is false)
        found.append(Installed(dist.metadata["Name"] or name, dist.version, license_of(dist)))
        pending.extend(requirement_names(dist, frozenset()))
    return sorted(found, key=lambda d: normalize(d.name))


def cmd_third_party_licenses() -> int:
    rows = installed_dependencies()
    if not rows:
        print("cronstable is not installed as a distribution: no metadata to read", file=sys.stderr)
        return 1
    width = max(len(row.name) for row in rows)
    vwidth = max(len(row.version) for row in rows)
    for row in rows:
        print(f"{row.name:<{width}}  {row.version:<{vwidth}}  {row.license}")
    return 0
