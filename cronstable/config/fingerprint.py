"""Fingerprints of a configuration: per-job digests and the job-set id.

* :func:`canonical_job` — the job's resolved settings (after defaults, with the
  env file folded into ``environment`` and the schedule in canonical text) as
  plain JSON data.  Key order, comments, whitespace and the way a value was
  spelled (``yes``/``true``, a mapping schedule or its string) do not show;
  settings equal to the built-in default are left out, so a setting written
  out with its default value and one left unset fingerprint alike.
* :func:`job_digest` — SHA-256 over the canonical JSON of one job, so editing
  one job changes that job's digest only.
* :func:`workflow_digest` — SHA-256 over a workflow's own settings and the
  digests of its tasks (each a :func:`job_digest` without a schedule), so a
  change to one task changes that task's digest and its workflow's.
* :func:`pool_digest` — the same over one pool's settings (``pool:`` in it, so
  it is never mistaken for a job's).
* :func:`job_set_id` — SHA-256 over the sorted digests (of jobs, workflows and
  pools): independent of the order of jobs, workflows, pools and files.

Digests are prefixed with :data:`SCHEME_VERSION` so a change of scheme is
recognised instead of being mistaken for a change of configuration.

Part of ``config/``: the loader computes them, and they read only the models and
the schedule, so nothing outside the package is needed to fingerprint a job.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast, overload

from cronstable.config.models import PoolConfig, RunSettings, WorkflowSettings
from cronstable.config.plain_dump import dump_without_defaults
from cronstable.schedule import Schedule

SCHEME_VERSION = "v1"


def canonical_job(
    config: RunSettings, schedule: Schedule | None, environment: Mapping[str, str]
) -> dict[str, Any]:
    """``schedule`` None for a workflow's task (its workflow's schedule is its workflow's)."""
    data = dump_without_defaults(
        config,
        placeholders=_REPLACED if schedule is not None else _REPLACED_TASK,
        dropped=_DROPPED,
    )
    if schedule is not None:
        data["schedule"] = schedule.text
    data["environment"] = dict(sorted(environment.items()))
    return data


_REPLACED = frozenset({"schedule", "environment"})
_REPLACED_TASK = frozenset({"environment"})
_DROPPED = frozenset({"env_file"})
"""Settings :func:`canonical_job` writes itself (the schedule's canonical text, the
resolved environment) or leaves out (the env file, whose content is in the environment)."""


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder() -> Callable[[Any, int], Sequence[str]] | None:
    """The C encoder of :data:`_ENCODER`'s options, made once (``encode()`` makes one for
    every call: a third of the cost of encoding a job).  None without the C accelerator,
    or where it takes other arguments than CPython 3.11 to 3.13 give it."""
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or quote is None:
        return None
    try:
        # markers None: no cycle check (a dump of settings holds none)
        encoder = make(None, _not_json, quote, None, ":", ",", True, False, False)
        probe = {"b": [1, 2.5, None, True], "a": "é\n"}
        if "".join(encoder(probe, 0)) != _ENCODER.encode(probe):
            return None
    except (TypeError, ValueError):  # pragma: no cover - another CPython's signature
        return None
    return cast(Callable[[Any, int], Sequence[str]], encoder)


_C_ENCODER = _c_encoder()


def canonical_json(data: Any) -> bytes:
    """``json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)`` as UTF-8."""
    if _C_ENCODER is None:
        return _ENCODER.encode(data).encode("utf-8")
    return "".join(_C_ENCODER(data, 0)).encode("utf-8")


def job_digest(
    config: RunSettings, schedule: Schedule | None, environment: Mapping[str, str]
) -> str:
    body = canonical_json(canonical_job(config, schedule, environment))
    return f"{SCHEME_VERSION}:{hashlib.sha256(body).hexdigest()}"


def canonical_workflow(config: WorkflowSettings, schedule: Schedule) -> dict[str, Any]:
    """A workflow's own settings (its tasks aside), like :func:`canonical_job`."""
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["schedule"] = schedule.text
    return data


def workflow_digest(
    config: WorkflowSettings, schedule: Schedule, task_digests: Mapping[str, str]
) -> str:
    """``task_digests``: each task's :func:`job_digest` by its name in the workflow."""
    body = canonical_json(
        {"workflow": canonical_workflow(config, schedule), "tasks": dict(task_digests)}
    )
    return f"{SCHEME_VERSION}:workflow:{hashlib.sha256(body).hexdigest()}"


def pool_digest(config: PoolConfig) -> str:
    body = canonical_json({"pool": config.model_dump(mode="json", by_alias=True)})
    return f"{SCHEME_VERSION}:pool:{hashlib.sha256(body).hexdigest()}"


def job_set_id(digests: Iterable[str]) -> str:
    return job_set_id_of_joined(joined_digests(digests))


def joined_digests(digests: Iterable[str]) -> bytes:
    """What a job-set id hashes after the scheme: ``"\n" + digest`` for each digest, in
    sorted order."""
    ordered = sorted(digests)
    return ("\n" + "\n".join(ordered)).encode() if ordered else b""


def job_set_id_of_joined(joined: bytes) -> str:
    """The job-set id of :func:`joined_digests` (``job_set_id(d) == job_set_id_of_joined(
    joined_digests(d))``)."""
    return f"{SCHEME_VERSION}:{hashlib.sha256(SCHEME_VERSION.encode() + joined).hexdigest()}"


_ENTRY = 1 + len(SCHEME_VERSION) + 1 + 64
"""Bytes of one digest in :func:`joined_digests`: the newline, ``v1:`` and 64 hex digits."""


class _Digests(Sequence[bytes]):
    """The digests of joined bytes, by index (for :mod:`bisect`)."""

    def __init__(self, joined: bytes) -> None:
        self.joined = joined

    def __len__(self) -> int:
        return len(self.joined) // _ENTRY

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            raise TypeError("no slices")
        return self.joined[index * _ENTRY + 1 : (index + 1) * _ENTRY]


def splice_digests(joined: bytes, gone: Iterable[str], new: Iterable[str]) -> bytes | None:
    """:func:`joined_digests` of the digests of ``joined`` without ``gone`` and with
    ``new``, made by copying the runs between the changes (digests are unique and of one
    length); None when they are not (then make it whole)."""
    if len(joined) % _ENTRY:
        return None
    view = _Digests(joined)
    cuts: list[tuple[int, int, bytes]] = []  # (index in old, 0 insert / 1 remove, digest)
    for digest in gone:
        encoded = digest.encode()
        at = bisect.bisect_left(view, encoded)
        if len(encoded) != _ENTRY - 1 or at >= len(view) or view[at] != encoded:
            return None
        cuts.append((at, 1, b""))
    for digest in new:
        encoded = digest.encode()
        if len(encoded) != _ENTRY - 1:
            return None
        cuts.append((bisect.bisect_left(view, encoded), 0, b"\n" + encoded))
    cuts.sort()
    pieces: list[bytes] = []
    done = 0
    for at, remove, piece in cuts:
        pieces.append(joined[done * _ENTRY : at * _ENTRY])
        done = at
        if remove:
            done = at + 1
        else:
            pieces.append(piece)
    pieces.append(joined[done * _ENTRY :])
    return b"".join(pieces)
