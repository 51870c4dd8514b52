"""load(): a configuration tree → a validated, fingerprinted DesiredState.

Pure: everything is read through a :class:`~cronstable.config.tree.ConfigTree`,
nothing is started.  Every problem found is collected and raised together as
one :class:`~cronstable.errors.ConfigError`, each with file, line, column and
key path.

How a configuration is read (yacron's rules, with the differences noted):

* the entry is a file, or a directory whose ``*.yaml``/``*.yml`` files and
  crontabs (``crontab``, ``*.crontab``: :mod:`cronstable.config.crontab`) are all
  loaded, recursively, in path order, skipping names starting with ``_`` or ``.``;
* ``include`` names files or directories relative to the including file; they
  are processed first, their jobs are added with their own defaults, and their
  defaults are merged (in order) under the including file's ``defaults``;
* a job is its file's effective defaults merged with the job's own keys: maps
  merge deeply, lists are appended, scalars replaced; built-in defaults are the
  models' defaults (a list you set replaces a built-in list);
* a job name defined twice, or a second ``web``/``logging`` section in another
  file, is an error naming both places (yacron keeps the last job silently);
* ``env_file`` is read relative to the file that names it (yacron: relative to
  its working directory), and ``environment`` entries win over it.

Speed: the YAML is parsed without positions; a file is composed a second time,
with positions, only when one of its problems needs a line number.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import posixpath
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, tzinfo
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.nodes import Node

from cronstable import xcom
from cronstable.config import yamlread
from cronstable.config.crontab import Crontab, base_defaults, is_crontab_name, parse_crontab
from cronstable.config.desired import DesiredState, Job, Pool, Workflow, workflow_job
from cronstable.config.envfile import EnvFileError, parse_env_file
from cronstable.config.errors_map import clean_loc, describe, known_keys, suggest
from cronstable.config.fingerprint import (
    job_digest,
    job_set_id_of_joined,
    joined_digests,
    pool_digest,
    splice_digests,
    workflow_digest,
)
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.config.models import (
    WORKFLOW_DEFAULT_KEYS,
    WORKFLOW_ONLY_KEYS,
    ClusterConfig,
    ConfigFile,
    JobConfig,
    JobDefaults,
    JobSettings,
    LoggingConfig,
    MetricsConfig,
    PoolConfig,
    RunSettings,
    SecretSource,
    StateConfig,
    TaskConfig,
    WebConfig,
    WorkflowSettings,
    report_moments,
    schedule_source,
    secret_paths,
)
from cronstable.config.secrets import inline_secrets, secret_at
from cronstable.config.tree import ConfigTree, TreeError, normalize
from cronstable.errors import ConfigError, KeyPath, Problem
from cronstable.platform import local_timezone
from cronstable.redact import redact
from cronstable.schedule import parse_schedule
from cronstable.workflows.dag import Dag, find_cycles

TOP_LEVEL_KEYS = known_keys(ConfigFile)
_SECTIONS = frozenset({"web", "logging", "cluster", "state", "metrics"})
"""The daemon-wide sections (:meth:`_Loader._sections_of`)."""


@dataclass(slots=True)
class _Layer:
    """One source of job settings: a ``defaults`` section or a job's own mapping."""

    file: str
    prefix: KeyPath
    data: dict[str, Any]


@dataclass(slots=True)
class _JobEntry:
    file: str
    index: int
    raw: dict[str, Any]
    layers: list[_Layer]


@dataclass(slots=True)
class _FlowEntry:
    """A workflow as written: its mapping and the defaults layers that reach it."""

    file: str
    index: int
    raw: dict[str, Any]
    defaults: list[_Layer]


@dataclass(slots=True)
class _FileResult:
    defaults_layers: list[_Layer] = field(default_factory=list)
    jobs: list[_JobEntry | _Reused] = field(default_factory=list)
    workflows: list[_FlowEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Batch:
    """One file's built jobs and what building them found, kept from load to load."""

    jobs: dict[int, Job]
    """By index in the file."""
    deps: tuple[tuple[str, bytes], ...]
    """The (env file, digest) they read."""
    by_name: dict[str, Job] = field(default_factory=dict)
    """The same jobs by name, in the file's order (a revision's ``groups``)."""
    warnings: tuple[Problem, ...] = ()
    problems: tuple[Problem, ...] = ()
    """What the scans after building said of these jobs (secrets given twice, reporters
    set in part), located: a load that reuses the batch says it again."""
    scoped: tuple[Job, ...] = ()
    """The jobs with ``concurrencyScope: cluster`` (they need a cluster section)."""
    pooled: tuple[Job, ...] = ()
    """The jobs that name a ``pool`` (each must be a pool of the revision)."""
    digests: tuple[str, ...] = ()
    """The jobs' digests, sorted."""


@dataclass(slots=True)
class _Reused:
    """Every job of one file, its batch reused whole: no entry per job is made (a one-file
    edit in 100,000 jobs costs that file).  :meth:`_Loader.expand` makes the entries after
    all when a name clashes with another file's."""

    file: str
    key: Hashable
    batch: _Batch
    raws: list[Any]
    base: list[_Layer]


class LoadCache:
    """Work reused from one load to the next (a daemon loads revision after revision).

    Parsed files are kept by the digest of their bytes, and each file's built
    jobs by the digests of every input they came from (the file, the files whose
    defaults apply, the env files read), so a one-file edit in a large
    repository re-parses and re-validates that file's jobs only.

    Bounded: it holds what the last successful load used and what the last
    rejected load used (so fixing one file of a rejected revision re-reads only
    that file), nothing else; entries unused by either are dropped at the end of
    each load.  Each load is within :class:`~cronstable.config.limits.Limits`, so
    the cache never holds more than two revisions' worth, however many revisions
    are rejected in a row.
    """

    def __init__(self) -> None:
        self._good: tuple[dict[bytes, yamlread.Document], dict[Hashable, _Batch]] = ({}, {})
        self._tried: tuple[dict[bytes, yamlread.Document], dict[Hashable, _Batch]] = ({}, {})
        self._used_documents: dict[bytes, yamlread.Document] = {}
        self._used_batches: dict[Hashable, _Batch] = {}
        self._bytes: dict[int, tuple[bytes, bytes]] = {}
        """The last load's file bytes and their digests, by the id of the bytes object
        (held, so that no other object takes that id)."""
        self._used_bytes: dict[int, tuple[bytes, bytes]] = {}
        self._jobs: tuple[dict[str, Job], list[Mapping[str, Job]]] | None = None
        """The good load's jobs and its groups (a load whose groups hold the same names in
        the same order copies the jobs and puts in the groups that changed)."""
        self._new_jobs: tuple[dict[str, Job], list[Mapping[str, Job]]] | None = None
        self._secrets: dict[bytes, frozenset[str]] = {}
        """Each held document's inline secrets, by the digest of its bytes."""
        self._good_digests: bytes | None = None
        """The good load's job digests, sorted and joined (its job-set id hashes them)."""
        self._digests: bytes | None = None

    def document(self, digest: bytes) -> yamlread.Document | None:
        doc = self._good[0].get(digest) or self._tried[0].get(digest)
        if doc is not None:
            self._used_documents[digest] = doc
        return doc

    def keep_document(self, digest: bytes, doc: yamlread.Document) -> None:
        self._used_documents[digest] = doc

    def digest(self, data: bytes) -> bytes:
        """The SHA-256 of ``data``; of the very bytes object the last load read, the one
        found then (a source hands the bytes of a file that did not change again)."""
        known = self._bytes.get(id(data))
        digest = known[1] if known is not None and known[0] is data else _sha256(data)
        self._used_bytes[id(data)] = (data, digest)
        return digest

    def secrets(self, digest: bytes) -> frozenset[str] | None:
        """The inline secrets of the document of ``digest``, if found before."""
        return self._secrets.get(digest)

    def keep_secrets(self, digest: bytes, found: frozenset[str]) -> None:
        self._secrets[digest] = found

    def batch(self, key: Hashable) -> _Batch | None:
        return self._good[1].get(key) or self._tried[1].get(key)

    def keep_batch(self, key: Hashable, batch: _Batch) -> None:
        self._used_batches[key] = batch

    def joined_digests(self) -> bytes | None:
        """What the job-set id hashes (:func:`~cronstable.config.fingerprint.joined_digests`)
        for the batches this load used, made from the good load's by splicing out the
        digests of the batches it used that this one does not and in the others': a
        one-file edit costs that file and one copy (None: not made so; make it whole).
        Only for a load without problems, where every job is in exactly one batch."""
        old = self._good_digests
        if old is None:
            return None
        good = self._good[1]
        used = self._used_batches
        gone = [d for k, b in good.items() if used.get(k) is not b for d in b.digests]
        new = [d for k, b in used.items() if good.get(k) is not b for d in b.digests]
        joined = splice_digests(old, gone, new)
        self._digests = joined
        return joined

    def jobs_like(self, groups: list[Mapping[str, Job]]) -> dict[str, Job] | None:
        """The jobs of ``groups``, in their order, as a copy of the good load's table with
        the groups that changed put in: when every group holds the names the good load's
        group in its place held, in their order (an edit that adds, removes or renames no
        job).  None otherwise: make the table group by group."""
        if self._jobs is None:
            return None
        jobs, good = self._jobs
        if len(good) != len(groups):
            return None
        changed = [(old, new) for old, new in zip(good, groups, strict=True) if old is not new]
        if any(len(old) != len(new) or list(old) != list(new) for old, new in changed):
            return None
        table = dict(jobs)
        for _, new in changed:
            table.update(new)
        return table

    def keep_jobs(self, jobs: dict[str, Job], groups: list[Mapping[str, Job]]) -> None:
        """This load's table and groups: the good ones if it succeeds."""
        self._new_jobs = (jobs, groups)

    def keep_digests(self, joined: bytes | None) -> None:
        """This load's joined digests: the good ones if it succeeds (None: a load with
        workflows or pools, whose digests a splice does not start from)."""
        self._digests = joined

    def finish(self, ok: bool = True) -> None:
        """End a load: ``ok`` if it produced a state (else it was rejected)."""
        used = (self._used_documents, self._used_batches)
        if ok:
            self._good, self._tried = used, ({}, {})
            self._good_digests = self._digests
            self._jobs = self._new_jobs
        else:  # what the good load holds already is not held twice
            documents, batches = self._good
            self._tried = (
                {k: v for k, v in used[0].items() if k not in documents},
                {k: v for k, v in used[1].items() if k not in batches},
            )
        self._used_documents, self._used_batches = {}, {}
        self._digests = None
        self._new_jobs = None
        self._bytes, self._used_bytes = self._used_bytes, {}
        held = self._good[0].keys() | self._tried[0].keys()
        self._secrets = {k: v for k, v in self._secrets.items() if k in held}

    def entries(self) -> int:
        """How many parsed files and built batches are held (for tests and metrics)."""
        return sum(len(part) for held in (self._good, self._tried) for part in held)


def merge(base: Any, over: Any) -> Any:
    """yacron's merge: maps deeply, lists appended, scalars replaced; ``key:`` alone keeps a map."""
    if isinstance(base, dict):
        if isinstance(over, dict):
            out = dict(base)
            for key, value in over.items():
                out[key] = merge(out[key], value) if key in out else value
            return out
        if over is None:
            return base
    if isinstance(base, list) and isinstance(over, list):
        return base + over
    return over


def _get(data: Any, path: KeyPath) -> Any:
    for part in path:
        if isinstance(part, str) and isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(part, int) and isinstance(data, list) and 0 <= part < len(data):
            data = data[part]
        else:
            raise KeyError(part)
    return data


def _written_keys(entry: _JobEntry) -> set[str]:
    """The top-level keys any of a job's layers writes: only settings under them can differ
    from the models' defaults, so the warning scans look there and nowhere else (their cost
    grows with what is written, not with every field of every job)."""
    written: set[str] = set()
    for layer in entry.layers:
        written.update(layer.data)
    return written


@functools.cache
def _job_secret_paths() -> tuple[tuple[tuple[str, ...], KeyPath], ...]:
    """Where a job's or a task's settings hold secrets (JobSettings: what both share;
    walked once per process, not once per job)."""
    return secret_paths(JobSettings)


@functools.cache
def _scanned_keys() -> frozenset[str]:
    """The top-level job keys the warning scans look under (secrets, report moments): a
    job that writes none of them is not scanned at all."""
    moments = {key for key, _ in report_moments(JobDefaults())}
    secrets = {key[0] for _, key in _job_secret_paths() if key and isinstance(key[0], str)}
    return frozenset(moments | secrets)


def _attribute(layers: list[_Layer], loc: KeyPath) -> tuple[_Layer, KeyPath] | None:
    """Which layer supplied the merged value at ``loc``, and its path in that layer."""
    candidates: list[tuple[_Layer, KeyPath]] = [(layer, ()) for layer in layers]
    for part in loc:
        present: list[tuple[_Layer, KeyPath]] = []
        if isinstance(part, str):
            for layer, path in candidates:
                try:
                    _get(layer.data, (*path, part))
                except KeyError:
                    continue
                present.append((layer, (*path, part)))
            # an empty value (``key:``) keeps an earlier mapping, as merge() does
            present = [
                (layer, path)
                for i, (layer, path) in enumerate(present)
                if not (
                    _get(layer.data, path) is None
                    and any(isinstance(_get(e.data, q), dict) for e, q in present[:i])
                )
            ]
            # only the layers from the last one that replaced (not merged) the value count
            for i in range(len(present) - 1, 0, -1):
                if not isinstance(_get(present[i][0].data, present[i][1]), dict | list):
                    present = present[i:]
                    break
        else:
            offset = part
            for layer, path in candidates:
                value = _get(layer.data, path)
                if not isinstance(value, list):
                    continue
                if offset < len(value):
                    present = [(layer, (*path, offset))]
                    break
                offset -= len(value)
        if not present:
            return None
        candidates = present
    return candidates[-1]


_How = str | tuple[str, int]
"""How a file was reached: loaded directly (the words), or by the include entry ``index``
of a file."""


class _Clash(Exception):
    """A reused file's job has the name of another job: build without reuse."""


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class _Abort(Exception):
    """A revision-wide limit was passed: reading more would only cost memory."""


class _Loader:
    def __init__(
        self,
        tree: ConfigTree,
        cache: LoadCache | None = None,
        display_root: str = "",
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.tree = tree
        self.cache = cache
        self.display_root = display_root
        self.limits = limits
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._nodes_left = limits.max_yaml_nodes
        self._digests: dict[str, bytes] = {}
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.positions: dict[KeyPath, tuple[str, int | None, int | None]] = {}
        self.read_order: list[str] = []
        self.listed: list[str] = []
        self._docs: dict[str, dict[str, Any] | None] = {}
        self._nodes: dict[str, Node | None] = {}
        self._job_lines: dict[str, list[int]] = {}
        self._dropped: set[str] = set()
        """YAML files whose node tree is not kept (:meth:`position` parses them again)."""
        self._scoped: list[Job] = []
        self._pooled: list[Job] = []
        """The jobs built or reused that name a pool (:meth:`pool_refs` checks these)."""
        """The jobs with concurrencyScope cluster (store_needs)."""
        self.groups: list[Mapping[str, Job]] = []
        """Each batch's jobs by name, in order (with a cache: a reused batch is the same
        mapping from revision to revision, which plan() compares by identity)."""
        self._results: dict[str, _FileResult] = {}
        self._crontabs: dict[str, Crontab] = {}
        self._stack: list[str] = []
        self._reached: dict[str, list[_How]] = {}
        self._entry_files: list[str] = []
        self._included: dict[str, list[str]] = {}
        """The files each file includes, in order (for its workflows)."""
        self._sections: dict[str, tuple[str, Any]] = {}
        self.web: WebConfig | None = None
        self.logging: LoggingConfig | None = None
        self.cluster: ClusterConfig | None = None
        self.state: StateConfig | None = None
        self.metrics: MetricsConfig | None = None
        self.pools: dict[str, Pool] = {}
        self._pool_seen: dict[str, tuple[str, int]] = {}
        """Where each pool name was first written: (file, index in its ``pools``)."""
        self._task_entries: list[tuple[_JobEntry, Job]] = []
        """Each built task with its entry (its ``pool`` is checked with the jobs')."""

    # ------------------------------------------------------------ problems

    def shown(self, path: str) -> str:
        """A tree path as the operator knows it (under the directory they named)."""
        if not self.display_root:
            return path
        return (
            posixpath.normpath(posixpath.join(self.display_root, path))
            if path
            else self.display_root
        )

    def problem(self, file: str, path: KeyPath, message: str, *, at: KeyPath | None = None) -> None:
        """Record a problem; ``at`` is the document path to locate (default ``path``)."""
        line: int | None = None
        column: int | None = None
        if file in self._nodes:
            position = self.position(file, path if at is None else at)
            if position:
                line, column = position
        self.problems.append(Problem(self.shown(file), line, column, path, message))

    def position(self, file: str, path: KeyPath) -> tuple[int, int] | None:
        crontab = self._crontabs.get(file)
        if crontab is not None:
            return crontab.locate(path)
        if file in self._dropped:
            self._dropped.discard(file)
            self._nodes[file] = self._reparse(file)
        return yamlread.locate(self._nodes.get(file), path)

    def _reparse(self, file: str) -> Node | None:
        """A file's node tree again (the load keeps none: they are most of its memory);
        only for a problem or a warning to place, or a section's keys."""
        try:
            return yamlread.parse(self.tree.read(file), self.limits.max_yaml_nodes).root
        except (TreeError, yamlread.YamlError):  # it parsed before: not expected
            return None

    def validation_problems(
        self, exc: ValidationError, model: type[BaseModel], layers: list[_Layer]
    ) -> None:
        own = layers[-1]
        for error in exc.errors():
            loc = clean_loc(error["loc"])
            key, message = describe(error, model, loc)
            secret = secret_at(model, loc)
            if secret is not None:
                message = _secret_quoted(error, message, secret)
            # locate the value itself when some layer has it, else the mapping that lacks it
            source = _attribute(layers, loc)
            if source is not None:
                layer, path = source
                shown = path[: len(path) - (len(loc) - len(key))]
            else:
                source = _attribute(layers, key)
                layer, path = source if source is not None else (own, key)
                shown = path
            self.problem(layer.file, (*layer.prefix, *shown), message, at=(*layer.prefix, *path))

    def inline_secrets(self) -> set[str]:
        """The inline secrets written in every document read (see :mod:`.secrets`); a
        cached document's are found once."""
        found: set[str] = set()
        for path, doc in self._docs.items():
            if doc is None:
                continue
            digest = self._digests.get(path)
            known = self.cache.secrets(digest) if self.cache is not None and digest else None
            if known is None:
                known = frozenset(inline_secrets(doc))
                if self.cache is not None and digest is not None:
                    self.cache.keep_secrets(digest, known)
            found |= known
        return found

    # ------------------------------------------------------------ reading

    def read(self, path: str) -> bytes:
        """A file's bytes, within the limits: TreeError past the per-file cap; past the
        revision's byte cap, the load stops (:class:`_Abort`)."""
        data = self.tree.read(path)
        if len(data) > self.limits.max_file_bytes:
            raise TreeError(f"the file is {self.limits.file_too_big()}")
        if path not in self._sizes:
            self._sizes[path] = len(data)
            self._bytes += len(data)
            if self._bytes > self.limits.max_revision_bytes:
                self.problems.append(
                    Problem(self.shown(path), None, None, (), self.limits.revision_too_big())
                )
                raise _Abort
        return data

    def _too_many_nodes(self, path: str, line: int | None, column: int | None) -> _Abort:
        self.problems.append(
            Problem(self.shown(path), line, column, (), self.limits.too_many_nodes())
        )
        return _Abort()

    def document(self, path: str) -> dict[str, Any] | None:
        if path in self._docs:
            return self._docs[path]
        self._docs[path] = None
        try:
            data = self.read(path)
        except TreeError as exc:
            self.problems.append(Problem(self.shown(path), None, None, (), str(exc)))
            return None
        self.read_order.append(path)
        digest = self.cache.digest(data) if self.cache is not None else _sha256(data)
        self._digests[path] = digest
        if is_crontab_name(path):
            return self._crontab(path, data)
        parsed = self.cache.document(digest) if self.cache is not None else None
        if parsed is not None and parsed.size > self._nodes_left:
            raise self._too_many_nodes(path, None, None)
        if parsed is None:
            try:
                parsed = yamlread.parse(data, self._nodes_left)
            except yamlread.NodeLimitError as exc:
                raise self._too_many_nodes(path, exc.line, exc.column) from None
            except yamlread.YamlError as exc:
                self.problems.append(
                    Problem(self.shown(path), exc.line, exc.column, exc.key, exc.message)
                )
                return None
            if not _SECTIONS.intersection(parsed.data if isinstance(parsed.data, dict) else ()):
                # the node tree goes (most of the memory): found again (_reparse) to place
                # a problem; a file with a daemon-wide section keeps it, as each load
                # places every key of its sections
                parsed = parsed.without_nodes()
            if self.cache is not None:
                self.cache.keep_document(digest, parsed)
        self._nodes_left -= parsed.size
        self._nodes[path] = parsed.root
        if parsed.root is None:
            self._dropped.add(path)
        self._job_lines[path] = list(parsed.lines.get("jobs", ()))
        doc = parsed.data
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            self.problem(path, (), "a configuration file must be a mapping of sections")
            return None
        self._docs[path] = doc
        for key in doc:
            if key not in TOP_LEVEL_KEYS:
                hint = suggest(str(key), TOP_LEVEL_KEYS)
                self.problem(path, (), f"unknown key {key!r}{hint}", at=(key,))
        return doc

    def _crontab(self, path: str, data: bytes) -> dict[str, Any]:
        """A crontab read as the YAML document it stands for."""
        crontab = parse_crontab(path, data)
        self._crontabs[path] = crontab
        self._nodes[path] = None  # problems are located through the crontab's positions
        for p in crontab.problems:
            self.problems.append(Problem(self.shown(path), p.line, p.column, p.key, p.message))
        doc = crontab.document()
        self._docs[path] = doc
        return doc

    def crontab_warnings(self, entries: list[_JobEntry | _Reused], jobs: dict[str, Job]) -> None:
        """Once per crontab: lines read in UTC for want of a zone; MAILTO that cannot send."""
        unzoned: dict[str, int] = {}
        unsent: dict[str, int] = {}
        if not self._crontabs:
            return
        for entry in entries:
            if isinstance(entry, _Reused):
                continue  # a YAML file's jobs
            crontab = self._crontabs.get(entry.file)
            name = entry.raw.get("name")
            job = jobs.get(name) if isinstance(name, str) else None
            if crontab is None or job is None or job.file != entry.file:
                continue
            zone_keys = any("timezone" in x.data or "utc" in x.data for x in entry.layers[1:])
            if not crontab.zoned[entry.index] and not zone_keys:
                unzoned.setdefault(entry.file, entry.index)
            mail = job.config.on_failure.report.mail
            if crontab.mail[entry.index] and (mail.from_ is None or mail.smtp_host is None):
                unsent.setdefault(entry.file, entry.index)
        for file, index in unzoned.items():
            self._warn_at_job(
                file,
                index,
                "no time zone is set, so its lines are read in UTC; add a CRON_TZ=Zone line "
                "or include defaults that set timezone",
            )
        for file, index in unsent.items():
            self._warn_at_job(
                file,
                index,
                "MAILTO sets mail.to, but no mail.from and mail.smtpHost reach these jobs "
                "(set them in included defaults): no mail is sent",
            )

    def _warn_at_job(self, file: str, index: int, message: str) -> None:
        position = self.position(file, ("jobs", index))
        line, column = position if position else (None, None)
        self.warnings.append(Problem(self.shown(file), line, column, (), message))

    def load_entry(self, entry: str) -> list[_JobEntry | _Reused]:
        if entry == "" or self.tree.is_dir(entry):
            self.listed.append(entry)
            files = self.tree.config_files_below(entry)
            if not files:
                # a wiped or half-made checkout, far likelier than an intent to run nothing
                self.problems.append(
                    Problem(
                        self.shown(entry),
                        None,
                        None,
                        (),
                        "no configuration files (*.yaml, *.yml, crontab, *.crontab) found; "
                        "to run no jobs, commit a file with `jobs: []`",
                    )
                )
        else:
            files = [entry]
        jobs: list[_JobEntry | _Reused] = []
        self._entry_files = list(files)
        for path in files:
            jobs.extend(self.process(path, "loaded directly"))
        return jobs

    def process(
        self, path: str, how: _How, origin: tuple[str, KeyPath] | None = None
    ) -> list[_JobEntry | _Reused]:
        """Load one file (once) and what it includes; ``origin`` is the include entry naming it."""
        self._reached.setdefault(path, []).append(how)
        if path in self._stack:
            chain = [*self._stack[self._stack.index(path) :], path]
            cycle = " -> ".join(self.shown(p) for p in chain)
            where, key = origin if origin is not None else (path, ())
            self.problem(where, key, f"include cycle: {cycle}")
            return []
        if path in self._results:
            return self._results[path].jobs
        result = _FileResult()
        self._results[path] = result
        doc = self.document(path)
        if doc is None:
            return []
        self._stack.append(path)
        try:
            self._includes(path, doc, result)
        finally:
            self._stack.pop()
        self._sections_of(path, doc)
        self._pools_of(path, doc)
        defaults = doc.get("defaults")
        if defaults is not None:
            if isinstance(defaults, dict):
                layer = _Layer(path, ("defaults",), defaults)
                try:
                    JobDefaults.model_validate(defaults)
                except ValidationError as exc:
                    self.validation_problems(exc, JobDefaults, [layer])
                result.defaults_layers.append(layer)
            else:
                self.problem(path, ("defaults",), "expected a mapping of job settings")
        jobs = doc.get("jobs")
        if isinstance(jobs, list):
            base = [_Layer(path, ("<crontab>",), base_defaults())] if path in self._crontabs else []
            reused = None if base else self._reusable(path, jobs, result.defaults_layers)
            if reused is not None:
                result.jobs.append(reused)
            else:
                result.jobs.extend(self._entries(path, jobs, [*base, *result.defaults_layers]))
        elif jobs is not None:
            self.problem(path, ("jobs",), "expected a list of jobs")
        flows = doc.get("workflows")
        if isinstance(flows, list):
            for index, raw in enumerate(flows):
                if not isinstance(raw, dict):
                    self.problem(path, ("workflows", index), "a workflow must be a mapping")
                    continue
                result.workflows.append(_FlowEntry(path, index, raw, list(result.defaults_layers)))
        elif flows is not None:
            self.problem(path, ("workflows",), "expected a list of workflows")
        return result.jobs

    def _entries(self, path: str, raws: list[Any], layers: list[_Layer]) -> list[_JobEntry]:
        """An entry per job of a file's ``jobs``, below ``layers`` (its defaults)."""
        entries: list[_JobEntry] = []
        for index, raw in enumerate(raws):
            if not isinstance(raw, dict):
                self.problem(path, ("jobs", index), "a job must be a mapping")
                continue
            own = _Layer(path, ("jobs", index), raw)
            entries.append(_JobEntry(path, index, raw, [*layers, own]))
        return entries

    def _reusable(self, path: str, raws: list[Any], defaults: list[_Layer]) -> _Reused | None:
        """The previous load's batch of every job of the file, when none of its inputs
        changed (the file, the defaults that reach it, the env files its jobs read)."""
        if self.cache is None:
            return None
        if set(map(type, raws)) != {dict}:  # a C scan: one file's jobs are all mappings
            return None  # the entries report what is not a mapping (or there are none)
        key = self._batch_key(path, len(raws), defaults)
        hit = self.cache.batch(key)
        if hit is None or not self._deps_hold(hit):
            return None
        return _Reused(path, key, hit, raws, list(defaults))

    def expand(self, group: _Reused) -> list[_JobEntry]:
        return self._entries(group.file, group.raws, group.base)

    def plain_entries(self, entries: list[_JobEntry | _Reused]) -> list[_JobEntry | _Reused]:
        """``entries`` as they are, reused files' included, whatever the revision holds:
        the checks that read jobs' entries (pool names, where an unknown one is written)
        expand a reused file that needs it themselves, and a workflow's tasks and checks
        are built from the revision's own bytes every time.  A cached load equals a fresh
        one for revisions with workflows and pools too
        (``test_a_cached_load_with_workflows_and_pools_says_what_a_fresh_load_says``)."""
        return entries

    def _batch_key(
        self, file: str, indices: tuple[int, ...] | int, defaults: list[_Layer]
    ) -> Hashable:
        """What a batch is cached under; ``indices``: of the jobs in it (an int ``n``: the
        first ``n``, a whole file of mappings, as a tuple ``0 … n-1`` is written)."""
        if isinstance(indices, tuple) and indices and indices[-1] == len(indices) - 1:
            indices = len(indices)  # increasing from 0: every index from 0 to the last
        return (
            file,
            self._digests[file],
            indices,
            tuple((layer.file, self._digests[layer.file], layer.prefix) for layer in defaults),
        )

    def _deps_hold(self, batch: _Batch) -> bool:
        return all(self._env_digest(p) == d for p, d in batch.deps)

    def workflow_entries(self) -> list[_FlowEntry]:
        """The workflows of every file :meth:`load_entry` loaded (includes first), in the
        order jobs are: a file included twice gives its workflows twice."""
        found: list[_FlowEntry] = []
        for path in self._entry_files:
            found.extend(self._flows_of(path, set()))
        return found

    def _flows_of(self, path: str, stack: set[str]) -> list[_FlowEntry]:
        result = self._results.get(path)
        if result is None or path in stack:
            return []
        found: list[_FlowEntry] = []
        for included in self._included.get(path, []):
            found.extend(self._flows_of(included, stack | {path}))
        return found + result.workflows

    def _includes(self, path: str, doc: dict[str, Any], result: _FileResult) -> None:
        includes = doc.get("include")
        if includes is None:
            return
        if isinstance(includes, str):
            includes = [includes]
        if not isinstance(includes, list):
            self.problem(path, ("include",), "expected a list of paths")
            return
        base = posixpath.dirname(path)
        for index, name in enumerate(includes):
            if not isinstance(name, str):
                self.problem(path, ("include", index), "expected a path")
                continue
            try:
                target = normalize(base, name)
            except TreeError as exc:
                self.problem(path, ("include", index), str(exc))
                continue
            how: _How = (path, index)  # its words and line only for a message (_how)
            if self.tree.is_dir(target):
                self.listed.append(target)
                targets = self.tree.config_files_below(target)
            else:
                targets = [target]
                try:
                    self.read(target)
                except TreeError as exc:
                    self.problem(path, ("include", index), f"cannot include {name!r}: {exc}")
                    continue
            for included in targets:
                self._included.setdefault(path, []).append(included)
                result.jobs.extend(self.process(included, how, (path, ("include", index))))
                included_result = self._results.get(included)
                if included_result is not None:
                    result.defaults_layers.extend(included_result.defaults_layers)

    def _sections_of(self, path: str, doc: dict[str, Any]) -> None:
        sections: tuple[tuple[str, type[BaseModel]], ...] = (
            ("web", WebConfig),
            ("logging", LoggingConfig),
            ("cluster", ClusterConfig),
            ("state", StateConfig),
            ("metrics", MetricsConfig),
        )
        for key, model in sections:
            if key not in doc or doc[key] is None:
                continue
            first = self._sections.get(key)
            if first is not None:
                if first[0] != path:
                    where = self.position(first[0], (key,))
                    shown = self.shown(first[0]) + (f":{where[0]}" if where else "")
                    self.problem(path, (key,), f"a second {key!r} section; the first is in {shown}")
                continue
            try:
                section = model.model_validate(doc[key])
            except ValidationError as exc:
                self.validation_problems(exc, model, [_Layer(path, (key,), doc[key])])
                section = None
            self._sections[key] = (path, section)
            self._section_positions(path, (key,), doc[key])
            if isinstance(section, WebConfig):
                self.web = section
                self._token_warnings(path, section)
            elif isinstance(section, LoggingConfig):
                self.logging = section
            elif isinstance(section, ClusterConfig):
                self.cluster = section
            elif isinstance(section, StateConfig):
                self.state = section
            elif isinstance(section, MetricsConfig):
                self.metrics = section

    def _pools_of(self, path: str, doc: dict[str, Any]) -> None:
        """The file's ``pools``: each validated; a name defined twice is an error naming
        both places (the first one stays)."""
        pools = doc.get("pools")
        if pools is None:
            return
        if not isinstance(pools, list):
            self.problem(path, ("pools",), "expected a list of pools")
            return
        for index, raw in enumerate(pools):
            key: KeyPath = ("pools", index)
            if not isinstance(raw, dict):
                self.problem(path, key, "a pool must be a mapping")
                continue
            name = raw.get("name")
            if isinstance(name, str) and name in self._pool_seen:
                file, first = self._pool_seen[name]
                where = self.position(file, ("pools", first))
                shown = self.shown(file) + (f":{where[0]}" if where else "")
                self.problem(
                    path,
                    (*key, "name"),
                    f"pool {name!r} is defined twice; the first is at {shown}",
                )
                continue
            if isinstance(name, str):
                self._pool_seen[name] = (path, index)
            try:
                config = PoolConfig.model_validate(raw)
            except ValidationError as exc:
                self.validation_problems(exc, PoolConfig, [_Layer(path, key, raw)])
                continue
            position = self.position(path, key)
            self.pools[config.name] = Pool(
                config=config,
                file=path,
                line=position[0] if position else 0,
                digest=pool_digest(config),
            )
            self._section_positions(path, ("pools", config.name), raw)

    def pool_refs(self, entries: list[_JobEntry | _Reused], jobs: Mapping[str, Job]) -> None:
        """Every ``pool`` a job or a task names is a pool of the revision; a pool with
        ``scope: cluster`` has the cluster section's store to keep its slots in."""
        known = set(self.pools) | set(self._pool_seen)  # a broken pool is reported as such
        # the jobs that name a pool, as built or reused: not a walk of every job
        unknown = any(
            job.config.pool not in known for job in self._pooled if jobs.get(job.name) is job
        )
        named_by: list[tuple[_JobEntry, Job]] = []
        plain: list[_JobEntry] = []
        for group in entries if unknown else ():  # only to place a pool that is not there
            if not isinstance(group, _Reused):
                plain.append(group)
            elif any(job.config.pool is not None for job in group.batch.by_name.values()):
                plain.extend(self.expand(group))  # located as a fresh load locates them
        for entry in plain:
            name = entry.raw.get("name")
            job = jobs.get(name) if isinstance(name, str) else None
            if job is not None and job.file == entry.file:
                named_by.append((entry, job))
        for entry, job in [*named_by, *self._task_entries]:
            named = job.config.pool
            if named is None or named in known:
                continue
            what = "job" if job.workflow is None else "task"
            hint = suggest(named, sorted(known)) if known else " (no pools are defined)"
            self._locate(
                entry,
                ("pool",),
                f"{what} {job.name!r}: unknown pool {named!r}{hint}",
                self.problems,
            )
        if self.cluster is None:
            for pool in self.pools.values():
                if pool.scope == "cluster":
                    file, index = self._pool_seen[pool.name]
                    self.problem(
                        file,
                        ("pools", index, "scope"),
                        f"pool {pool.name!r}: scope cluster keeps its slots in a shared store: "
                        "add a cluster section (etcd or filesystem)",
                    )

    def store_needs(self, jobs: Mapping[str, Job], tasks: Iterable[Job] = ()) -> None:
        """What needs a shared store has one: ``state.backend: etcd`` the etcd of the
        ``cluster`` section, ``concurrencyScope: cluster`` a ``cluster`` section."""
        state = self._sections.get("state")
        if (
            self.state is not None
            and state is not None
            and self.state.backend == "etcd"
            and "shared" in self.state.model_fields_set
        ):
            self.problem(
                state[0],
                ("state", "shared"),
                "shared is for backend filesystem (a --state-dir every node mounts); "
                "the etcd store is always shared",
            )
        state = self._sections.get("state")
        if self.state is not None and state is not None and self.state.backend == "etcd":
            if self.cluster is None or self.cluster.etcd is None:
                leases = self.cluster is not None and self.cluster.backend == "kubernetes"
                self.problem(
                    state[0],
                    ("state", "backend"),
                    "backend etcd keeps the records in the etcd of the cluster section "
                    "(cluster: {backend: etcd, etcd: {endpoints: [...]}}), and there is none"
                    + (
                        " (the cluster's Kubernetes Leases keep no records: use backend "
                        "filesystem, each node's --state-dir)"
                        if leases
                        else ""
                    ),
                )
        if self.cluster is None:
            scoped = [job for job in self._scoped if jobs.get(job.name) is job]
            for job in [*scoped, *(t for t in tasks if t.config.concurrency_scope == "cluster")]:
                self.problems.append(
                    Problem(
                        self.shown(job.file),
                        job.line,
                        None,
                        ("concurrencyScope",),
                        f"job {job.name!r}: concurrencyScope cluster needs a shared store: "
                        "add a cluster section (etcd, filesystem or kubernetes)",
                    )
                )

    def _section_positions(self, file: str, key: KeyPath, value: Any) -> None:
        """Record where a section and every key and list item in it are written."""
        position = self.position(file, key)
        line, column = position if position else (None, None)
        self.positions[key] = (self.shown(file), line, column)
        if isinstance(value, dict):
            for name, inner in value.items():
                self._section_positions(file, (*key, name), inner)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                self._section_positions(file, (*key, index), inner)

    # ------------------------------------------------------------ jobs

    def build_jobs(self, entries: list[_JobEntry | _Reused]) -> dict[str, Job]:
        marks = (
            len(self.warnings),
            len(self.problems),
            len(self._scoped),
            len(self._pooled),
            len(self.groups),
            len(self.read_order),
        )
        try:
            return self._build_jobs(entries)
        except _Clash:
            # a name in two places: every reused file's entries are made after all, and
            # the duplicates are reported as without a cache (what was built is cached)
            del self.warnings[marks[0] :], self.problems[marks[1] :], self._scoped[marks[2] :]
            del self._pooled[marks[3] :], self.groups[marks[4] :], self.read_order[marks[5] :]
            expanded: list[_JobEntry | _Reused] = []
            for entry in entries:
                expanded.extend(self.expand(entry) if isinstance(entry, _Reused) else [entry])
            return self._build_jobs(expanded)

    def _build_jobs(self, entries: list[_JobEntry | _Reused]) -> dict[str, Job]:
        # Duplicates are found on the names as written, before validation, so a
        # duplicate is reported even when one of the two jobs has other problems.
        # A reused file's names are not checked one by one: a clash shows as a table
        # that grows by less than the file's jobs (_Clash).
        unique: list[_JobEntry | _Reused] = []
        first_seen: dict[str, _JobEntry] = {}
        unnamed: set[tuple[str, int]] = set()  # seen without a name (reached twice: once)
        for entry in entries:
            if isinstance(entry, _Reused):
                unique.append(entry)
                continue
            name = entry.raw.get("name")
            if isinstance(name, str):
                first = first_seen.get(name)
                if first is not None:  # reached twice too: the same entry, said so
                    self._duplicate(name, first, entry)
                    continue
                first_seen[name] = entry
            elif (entry.file, entry.index) in unnamed:
                continue
            else:
                unnamed.add((entry.file, entry.index))
            unique.append(entry)
        reused = any(isinstance(e, _Reused) for e in unique)
        parts: list[Mapping[str, Job]] = []
        grouped = self.cache is not None
        for batch in self._batches(unique):
            if isinstance(batch, _Reused):
                self._replay(batch.batch)
                assert self.cache is not None  # only a cache has batches to reuse
                self.cache.keep_batch(batch.key, batch.batch)
                self.groups.append(batch.batch.by_name)
                parts.append(batch.batch.by_name)
                continue
            groups = len(self.groups)
            results = self.build_batch(batch)
            if len(self.groups) > groups:
                parts.append(self.groups[-1])
            else:  # not kept (no cache, or problems): its jobs by name all the same
                grouped = False
                parts.append({job.name: job for job in results.values()})
        jobs = self.cache.jobs_like(parts) if grouped and self.cache is not None else None
        if jobs is None:
            jobs = {}
            for part in parts:
                size = len(jobs)
                jobs.update(part)
                if reused and len(jobs) != size + len(part):
                    raise _Clash
        if grouped and self.cache is not None:
            self.cache.keep_jobs(jobs, parts)
        return jobs

    def _replay(self, batch: _Batch) -> None:
        """What a reused batch found when it was built, found again."""
        self.warnings.extend(batch.warnings)
        self.problems.extend(batch.problems)
        self._scoped.extend(batch.scoped)
        self._pooled.extend(batch.pooled)
        for path, _ in batch.deps:
            if path not in self.read_order:
                self.read_order.append(path)

    def _scan(self, batch: list[_JobEntry], results: dict[int, Job]) -> None:
        """The checks of built jobs: secrets given twice, reporters set in part."""
        for entry in batch:
            job = results.get(entry.index)
            if job is not None:
                written = _written_keys(entry)
                if not written.isdisjoint(_scanned_keys()):  # else nothing to warn about
                    self._secret_warnings(job.config, entry, written)
                    self._report_warnings(job.config, entry, written)
                if job.config.concurrency_scope == "cluster":
                    self._scoped.append(job)
                if job.config.pool is not None:
                    self._pooled.append(job)

    def _report_warnings(self, config: RunSettings, entry: _JobEntry, written: set[str]) -> None:
        """Warn about a reporter given some but not all of its required keys (it stays off);
        an error for mail with from and to but no smtpHost.  ``written``: the job's
        top-level keys (:func:`_written_keys`)."""
        for key, moment in report_moments(config):
            if key not in written:
                continue  # nothing written under it: the defaults, which never warn
            for reporter, settings in moment.report.reporters().items():
                where: KeyPath = (key, "report", reporter)
                error = settings.incomplete()
                if error is not None:
                    self._locate(entry, where, f"job {config.name!r}: {error}", self.problems)
                    continue
                given = settings.set_required()
                if not given or settings.enabled:
                    continue
                missing = [k for k in settings.REQUIRED if k not in given]
                self._warn(
                    entry,
                    where,
                    f"job {config.name!r}: {reporter} sets {' and '.join(given)} "
                    f"but not {' and '.join(missing)}: "
                    "this reporter stays off until all are set",
                )

    def _warn(self, entry: _JobEntry, key: KeyPath, message: str) -> None:
        self._locate(entry, key, message, self.warnings)

    def _locate(self, entry: _JobEntry, key: KeyPath, message: str, into: list[Problem]) -> None:
        """A problem or warning about the merged job's ``key``, located where it is written."""
        source = _attribute(entry.layers, key)
        layer, path = source if source is not None else (entry.layers[-1], key)
        where = (*layer.prefix, *path)
        position = self.position(layer.file, where)
        line, column = position if position else (None, None)
        into.append(Problem(self.shown(layer.file), line, column, where, message))

    def _secret_warnings(self, config: RunSettings, entry: _JobEntry, written: set[str]) -> None:
        """Warn about a secret given more than one source: only the first set one is used."""
        for attributes, key in _job_secret_paths():
            if key[0] not in written:
                continue  # nothing written under it: no source set
            secret: Any = config
            for name in attributes:
                secret = getattr(secret, name)
            given = secret.set_keys()
            if len(given) < 2:
                continue
            source = _attribute(entry.layers, key)
            layer, path = source if source is not None else (entry.layers[-1], key)
            self._several_sources(layer.file, (*layer.prefix, *path), given)

    def _token_warnings(self, file: str, web: WebConfig) -> None:
        """The web section's tokens are secrets too: the same warning as for a job's."""
        tokens: list[tuple[KeyPath, SecretSource]] = [
            (("web", "authTokens", index), token) for index, token in enumerate(web.auth_tokens)
        ]
        if web.auth_token is not None:
            tokens.insert(0, (("web", "authToken"), web.auth_token))
        for where, token in tokens:
            given = token.set_keys()
            if len(given) > 1:
                self._several_sources(file, where, given)

    def _several_sources(self, file: str, where: KeyPath, given: list[str]) -> None:
        position = self.position(file, where)
        line, column = position if position else (None, None)
        both = (
            " and ".join(given) + " are both"
            if len(given) == 2
            else "value, fromFile and fromEnvVar are all"
        )
        message = (
            f"{both} set; only {given[0]} is used "
            "(the first set of value, fromFile, fromEnvVar wins)"
        )
        self.warnings.append(Problem(self.shown(file), line, column, where, message))

    @staticmethod
    def _batches(entries: list[_JobEntry | _Reused]) -> Iterator[list[_JobEntry] | _Reused]:
        """Runs of jobs of one file sharing the same defaults (one file's own jobs); a
        reused file's jobs are one run."""
        batch: list[_JobEntry] = []
        for entry in entries:
            if isinstance(entry, _Reused):
                if batch:
                    yield batch
                    batch = []
                yield entry
                continue
            if batch and (entry.file, entry.layers[:-1]) != (batch[0].file, batch[0].layers[:-1]):
                yield batch
                batch = []
            batch.append(entry)
        if batch:
            yield batch

    def _how(self, how: _How) -> str:
        """How a file was reached, in words: "loaded directly", "included by a.yaml:3"."""
        if isinstance(how, str):
            return how
        path, index = how
        position = self.position(path, ("include", index))
        return f"included by {self.shown(path)}" + (f":{position[0]}" if position else "")

    def _duplicate(self, name: str, first: _JobEntry, entry: _JobEntry) -> None:
        file = first.file
        position = self.position(file, ("jobs", first.index))
        line = position[0] if position else "?"
        if (file, first.index) == (entry.file, entry.index):
            reached = " and ".join(self._how(how) for how in self._reached.get(entry.file, []))
            message = f"job {name!r} is defined twice: {self.shown(entry.file)} is {reached}"
        else:
            message = f"job {name!r} is defined twice; the first is at {self.shown(file)}:{line}"
        self.problem(entry.file, ("jobs", entry.index, "name"), message)

    def build_batch(self, batch: list[_JobEntry]) -> dict[int, Job]:
        """Build one file's jobs and scan them, reusing the previous load's when no input
        changed."""
        if not batch:
            return {}
        first = batch[0]
        key = (
            self._batch_key(first.file, tuple(e.index for e in batch), first.layers[:-1])
            if self.cache is not None
            else None
        )
        hit = self.cache.batch(key) if self.cache is not None else None
        if hit is not None and self._deps_hold(hit):
            self._replay(hit)
            assert self.cache is not None
            self.cache.keep_batch(key, hit)
            self.groups.append(hit.by_name)
            return hit.jobs
        problems, warnings, scoped = len(self.problems), len(self.warnings), len(self._scoped)
        pooled = len(self._pooled)
        jobs, env_files = self._build_all(batch)
        built = len(self.problems) == problems
        self._scan(batch, jobs)
        if self.cache is None or not built:
            return jobs
        kept = _Batch(
            jobs,
            tuple((p, self._digests[p]) for p in env_files),
            by_name={job.name: job for job in jobs.values()},
            warnings=tuple(self.warnings[warnings:]),
            problems=tuple(self.problems[problems:]),
            scoped=tuple(self._scoped[scoped:]),
            pooled=tuple(self._pooled[pooled:]),
            digests=tuple(sorted(job.digest for job in jobs.values())),
        )
        self.cache.keep_batch(key, kept)
        self.groups.append(kept.by_name)
        return jobs

    def _build_all(self, batch: list[_JobEntry]) -> tuple[dict[int, Job], set[str]]:
        jobs: dict[int, Job] = {}
        env_files: set[str] = set()
        for entry in batch:
            built = self._build_job(entry)
            if built is not None:
                jobs[entry.index] = built[0]
                env_files.update(built[1])
        return jobs, env_files

    def _env_digest(self, path: str) -> bytes | None:
        if path not in self._digests:
            try:
                self._digests[path] = hashlib.sha256(self.read(path)).digest()
            except TreeError:
                return None
        return self._digests[path]

    def _build_job(self, entry: _JobEntry) -> tuple[Job, tuple[str, ...]] | None:
        """The job and the env files it read."""
        # merge() copies what it merges into, so the first layer needs no copy of its own
        merged: dict[str, Any] = entry.layers[0].data
        for layer in entry.layers[1:]:
            merged = merge(merged, layer.data)
        try:
            config = JobConfig.model_validate(merged)
        except ValidationError as exc:
            self.validation_problems(exc, JobConfig, entry.layers)
            return None
        resolved = self._environment(config, entry)
        if resolved is None:
            return None
        environment, env_files = resolved
        schedule = parse_schedule(schedule_source(config.schedule), config.name)
        # a CRON_TZ= prefix overrides the zone defaults give, not the job's own
        if schedule.zone is not None and "timezone" in entry.raw:
            self.problem(
                entry.file,
                ("jobs", entry.index, "schedule"),
                f"the schedule's CRON_TZ={schedule.zone} prefix and the job's own "
                "timezone both set the zone; keep one",
            )
            return None
        zone = job_zone(config, schedule.zone)
        job = Job(
            config=config,
            schedule=schedule,
            timezone=zone,
            environment=environment,
            file=entry.file,
            line=self._job_line(entry.file, entry.index),
            digest=job_digest(config, schedule, environment),
        )
        return job, env_files

    def _job_line(self, file: str, index: int) -> int:
        """The line of the file's ``jobs`` item ``index`` (0 if unknown); a file's lines
        are found once, not by a walk from the document's root for every job."""
        if file in self._crontabs:
            position = self.position(file, ("jobs", index))
            return position[0] if position else 0
        lines = self._job_lines.get(file, [])
        return lines[index] if index < len(lines) else 0

    def _environment(
        self, config: RunSettings, entry: _JobEntry
    ) -> tuple[dict[str, str], tuple[str, ...]] | None:
        """The job's environment (env_file, then environment entries) and the env file read."""
        environment: dict[str, str] = {}
        env_files: tuple[str, ...] = ()
        if config.env_file:
            source = _attribute(entry.layers, ("env_file",))
            layer, path = source if source else (entry.layers[-1], ("env_file",))
            key = (*layer.prefix, *path)
            try:
                target = normalize(posixpath.dirname(layer.file), config.env_file)
                data = self.read(target)
            except TreeError as exc:
                self.problem(layer.file, key, f"cannot read env_file: {exc}")
                return None
            if target not in self.read_order:
                self.read_order.append(target)
            self._digests[target] = hashlib.sha256(data).digest()
            env_files = (target,)
            try:
                environment.update(parse_env_file(data))
            except EnvFileError as exc:
                self.problems.append(Problem(self.shown(target), exc.line, None, (), exc.message))
                return None
        for var in config.environment:
            environment[var.key] = var.value
        return environment, env_files

    # ------------------------------------------------------------ workflows

    def build_workflows(
        self, entries: list[_FlowEntry], jobs: Mapping[str, Job]
    ) -> dict[str, Workflow]:
        """Each workflow with its tasks; a workflow with any problem is left out (its
        problems are recorded)."""
        unique: list[_FlowEntry] = []
        first_seen: dict[str, _FlowEntry] = {}
        seen: set[tuple[str, int]] = set()
        for entry in entries:
            name = entry.raw.get("name")
            if (entry.file, entry.index) in seen:
                if isinstance(name, str) and first_seen.get(name) is entry:
                    reached = " and ".join(map(self._how, self._reached.get(entry.file, [])))
                    self.problem(
                        entry.file,
                        ("workflows", entry.index, "name"),
                        f"workflow {name!r} is defined twice: {self.shown(entry.file)} is "
                        f"{reached}",
                    )
                continue
            seen.add((entry.file, entry.index))
            if isinstance(name, str):
                first = first_seen.get(name)
                if first is not None:
                    self.problem(
                        entry.file,
                        ("workflows", entry.index, "name"),
                        f"workflow {name!r} is defined twice; the first is at "
                        f"{self._where(first.file, ('workflows', first.index))}",
                    )
                    continue
                first_seen[name] = entry
                job = jobs.get(name)
                if job is not None:
                    self.problem(
                        entry.file,
                        ("workflows", entry.index, "name"),
                        f"workflow {name!r} has the name of a job, at {self.shown(job.file)}:"
                        f"{job.line}: a name is a job's or a workflow's",
                    )
                    continue
            unique.append(entry)
        workflows: dict[str, Workflow] = {}
        for entry in unique:
            flow = self._build_workflow(entry, jobs)
            if flow is not None:
                workflows[flow.name] = flow
        return workflows

    def _where(self, file: str, key: KeyPath) -> str:
        position = self.position(file, key)
        return self.shown(file) + (f":{position[0]}" if position else "")

    def _build_workflow(self, entry: _FlowEntry, jobs: Mapping[str, Job]) -> Workflow | None:
        before = len(self.problems)
        prefix: KeyPath = ("workflows", entry.index)
        own = _Layer(entry.file, prefix, {k: v for k, v in entry.raw.items() if k != "tasks"})
        layers = [*(_workflow_defaults(layer) for layer in entry.defaults), own]
        merged: dict[str, Any] = {}
        for layer in layers:
            merged = merge(merged, layer.data)
        settings: WorkflowSettings | None = None
        try:
            settings = WorkflowSettings.model_validate(merged)
        except ValidationError as exc:
            self.validation_problems(exc, WorkflowSettings, layers)
        raw_tasks = entry.raw.get("tasks")
        if raw_tasks is None or raw_tasks == []:
            self.problem(entry.file, prefix, "a workflow needs tasks: at least one", at=prefix)
            return None
        if not isinstance(raw_tasks, list):
            self.problem(entry.file, (*prefix, "tasks"), "expected a list of tasks")
            return None
        name = settings.name if settings is not None else str(entry.raw.get("name", "?"))
        tasks = self._build_tasks(entry, name, raw_tasks, jobs)
        if settings is None or tasks is None or len(self.problems) != before:
            return None
        schedule = parse_schedule(schedule_source(settings.schedule), settings.name)
        if schedule.zone is not None and "timezone" in entry.raw:
            self.problem(
                entry.file,
                (*prefix, "schedule"),
                f"the schedule's CRON_TZ={schedule.zone} prefix and the workflow's own "
                "timezone both set the zone; keep one",
            )
            return None
        zone = job_zone(settings, schedule.zone)
        built = {
            task: replace(job, schedule=schedule, timezone=zone) for task, job in tasks.items()
        }
        dag = Dag.of(
            {task: job_task_deps(job) for task, job in built.items()},
            {task: job_run_when(job) for task, job in built.items()},
        )
        position = self.position(entry.file, prefix)
        line = position[0] if position else 0
        digest = workflow_digest(
            settings, schedule, {task: job.digest for task, job in built.items()}
        )
        return Workflow(
            config=settings,
            schedule=schedule,
            timezone=zone,
            tasks=built,
            dag=dag,
            file=entry.file,
            line=line,
            digest=digest,
            job=workflow_job(
                settings, schedule, zone, dag, digest=digest, file=entry.file, line=line
            ),
        )

    def _build_tasks(
        self, entry: _FlowEntry, workflow: str, raw_tasks: list[Any], jobs: Mapping[str, Job]
    ) -> dict[str, Job] | None:
        """The workflow's tasks by name (each named ``WORKFLOW.TASK``); None after a problem."""
        before = len(self.problems)
        prefix: KeyPath = ("workflows", entry.index, "tasks")
        built: dict[str, Job] = {}
        raws: dict[str, tuple[int, dict[str, Any]]] = {}
        for index, raw in enumerate(raw_tasks):
            where: KeyPath = (*prefix, index)
            if not isinstance(raw, dict):
                self.problem(entry.file, where, "a task must be a mapping")
                continue
            task_name = raw.get("name")
            if isinstance(task_name, str) and task_name in raws:
                first = raws[task_name][0]
                self.problem(
                    entry.file,
                    (*where, "name"),
                    f"task {task_name!r} is defined twice in workflow {workflow!r}; the first "
                    f"is at {self._where(entry.file, (*prefix, first))}",
                )
                continue
            if "schedule" in raw:
                self.problem(
                    entry.file,
                    (*where, "schedule"),
                    "a task has no schedule of its own: its workflow's runs start it "
                    "(move the schedule to the workflow, or make this a job)",
                )
                continue
            if isinstance(task_name, str):
                raws[task_name] = (index, raw)
            own = [k for k in WORKFLOW_ONLY_KEYS if k in raw]
            if own:
                self.problem(
                    entry.file,
                    (*where, own[0]),
                    f"a task has no {own[0]} of its own: it belongs to what is scheduled "
                    f"(set it on workflow {workflow!r}, or make this a job)",
                )
                continue
            layers = [
                *(_task_defaults(layer) for layer in entry.defaults),
                _Layer(entry.file, where, raw),
            ]
            job_entry = _JobEntry(entry.file, index, raw, layers)
            task = self._build_task(job_entry, workflow, where)
            if task is None:
                continue
            clash = jobs.get(task.name)
            if clash is not None:
                self.problem(
                    entry.file,
                    (*where, "name"),
                    f"task {task.name!r} has the name of a job, at {self.shown(clash.file)}:"
                    f"{clash.line}: rename one of them",
                )
                continue
            built[str(task.task)] = task
            self._task_entries.append((job_entry, task))
            keys = _written_keys(job_entry)
            self._secret_warnings(task.config, job_entry, keys)
            self._report_warnings(task.config, job_entry, keys)
        known = list(raws)
        for task_name, (index, raw) in raws.items():
            where = (*prefix, index)
            job = built.get(task_name)
            if job is None:
                continue
            deps = job_task_deps(job)
            written = raw.get("dependsOn")
            for position, dep in enumerate(deps):
                if dep not in raws:
                    at: KeyPath = (
                        (*where, "dependsOn", position)
                        if isinstance(written, list)
                        else (*where, "dependsOn")
                    )
                    hint = suggest(dep, known) or f" (its tasks: {', '.join(known)})"
                    self.problem(
                        entry.file,
                        at,
                        f"dependsOn names {dep!r}, which is no task of workflow {workflow!r}{hint}",
                    )
            if "runWhen" in raw and not deps:
                self.problem(
                    entry.file,
                    (*where, "runWhen"),
                    "runWhen decides on the tasks named in dependsOn, and this task has none",
                )
        if len(self.problems) != before:
            return None
        for cycle in find_cycles({task: job_task_deps(job) for task, job in built.items()}):
            index = raws[cycle[0]][0]
            self.problem(
                entry.file,
                (*prefix, index, "dependsOn"),
                f"a dependency cycle: {' → '.join(cycle)}",
            )
        if len(self.problems) == before:
            self._check_xcom_env(entry.file, prefix, workflow, built, raws)
        return None if len(self.problems) != before else built

    def _check_xcom_env(
        self,
        file: str,
        prefix: KeyPath,
        workflow: str,
        built: dict[str, Job],
        raws: dict[str, tuple[int, Any]],
    ) -> None:
        """Each task's ``xcomEnv``: ``TASK.KEY`` of a task it depends on (directly or
        through others), a key of the right form, one variable per entry."""
        deps = {task: job_task_deps(job) for task, job in built.items()}
        for name, job in built.items():
            config = job.config
            entries = list(config.xcom_env) if isinstance(config, TaskConfig) else []
            if not entries:
                continue
            index, raw = raws[name]
            written = raw.get("xcomEnv")
            upstream = _upstream(name, deps)
            seen: dict[str, str] = {}
            for position, text in enumerate(entries):
                at: KeyPath = (
                    (*prefix, index, "xcomEnv", position)
                    if isinstance(written, list)
                    else (*prefix, index, "xcomEnv")
                )
                task, dot, key = text.partition(".")
                if not dot or not task or not key:
                    self.problem(file, at, f"{text!r} is not TASK.KEY (extract.rows)")
                    continue
                if task not in upstream:
                    why = (
                        f"task {name!r} does not depend on it"
                        if task in built
                        else f"it is no task of workflow {workflow!r}"
                    )
                    self.problem(
                        file,
                        at,
                        f"xcomEnv names {task!r}, but {why}: a value reaches the tasks that "
                        "wait for the one that leaves it (dependsOn, directly or through others)",
                    )
                    continue
                problem = xcom.key_problem(key)
                if problem is not None:
                    self.problem(file, at, problem)
                    continue
                variable = xcom.env_name(task, key)
                if variable in seen:
                    self.problem(
                        file,
                        at,
                        f"{text!r} and {seen[variable]!r} would both be {variable}",
                    )
                    continue
                seen[variable] = text

    def _build_task(self, entry: _JobEntry, workflow: str, where: KeyPath) -> Job | None:
        merged: dict[str, Any] = {}
        for layer in entry.layers:
            merged = merge(merged, layer.data)
        try:
            config = TaskConfig.model_validate(merged)
        except ValidationError as exc:
            self.validation_problems(exc, TaskConfig, entry.layers)
            return None
        full = config.model_copy(update={"name": f"{workflow}.{config.name}"})
        resolved = self._environment(full, entry)
        if resolved is None:
            return None
        environment, _ = resolved
        position = self.position(entry.file, where)
        return Job(
            config=full,
            schedule=_NO_SCHEDULE,
            timezone=UTC,
            environment=environment,
            file=entry.file,
            line=position[0] if position else 0,
            digest=job_digest(full, None, environment),
            workflow=workflow,
        )


def _upstream(task: str, deps: dict[str, list[str]]) -> set[str]:
    """The tasks ``task`` waits for, directly or through others."""
    found: set[str] = set()
    todo = list(deps.get(task, ()))
    while todo:
        dep = todo.pop()
        if dep not in found:
            found.add(dep)
            todo.extend(deps.get(dep, ()))
    return found


def job_task_deps(job: Job) -> list[str]:
    """A task's dependsOn (empty for a job)."""
    config = job.config
    return list(config.depends_on) if isinstance(config, TaskConfig) else []


def job_run_when(job: Job) -> Any:
    config = job.config
    return config.run_when if isinstance(config, TaskConfig) else "allSucceeded"


_NO_SCHEDULE = parse_schedule("@reboot")
"""A task's schedule until its workflow's is known (replaced before anyone sees it)."""


def _task_defaults(layer: _Layer) -> _Layer:
    """The part of a ``defaults`` layer that reaches a workflow's tasks: all of it but
    WORKFLOW_ONLY_KEYS (they reach the workflow)."""
    if not any(k in layer.data for k in WORKFLOW_ONLY_KEYS):
        return layer
    data = {k: v for k, v in layer.data.items() if k not in WORKFLOW_ONLY_KEYS}
    return _Layer(layer.file, layer.prefix, data)


def _workflow_defaults(layer: _Layer) -> _Layer:
    """The part of a ``defaults`` layer that reaches workflows (WORKFLOW_DEFAULT_KEYS;
    onFailure without retry)."""
    data = {k: v for k, v in layer.data.items() if k in WORKFLOW_DEFAULT_KEYS}
    failure = data.get("onFailure")
    if isinstance(failure, dict) and "retry" in failure:
        data["onFailure"] = {k: v for k, v in failure.items() if k != "retry"}
    return _Layer(layer.file, layer.prefix, data)


_PLAIN_SECRET_HINT = (
    "; give a secret as fromFile: PATH or fromEnvVar: NAME "
    "(value: TEXT would keep it in the repository)"
)


def _secret_quoted(error: ErrorDetails, message: str, secret: Literal["text", "url"]) -> str:
    """``message`` about a secret's own text, without that text (however short); a plain
    text where a secret's mapping was due gets the way to write one.  A URL keeps what
    is not its credentials (redact finds those), unless it has no scheme: then nothing
    tells its parts apart, and the whole text goes."""
    value = error.get("input")
    text = value if isinstance(value, str) else None
    if text is None and isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
    if text is None or (secret == "url" and "://" in text):
        return message
    message = redact(message, [text], strict=True)
    if secret == "text" and error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message += _PLAIN_SECRET_HINT
    return message


def _hidden(problems: list[Problem], secrets: set[str]) -> list[Problem]:
    """``problems`` with every inline secret of the revision masked in their messages."""
    return [p.hiding(secrets) for p in problems] if secrets else problems


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Loading allocates hundreds of thousands of small objects and frees none of
    them: the cyclic collector's passes over them are pure cost (measured: half of
    the load time of a 2,000-job file)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load(
    tree: ConfigTree,
    entry: str = "",
    *,
    cache: LoadCache | None = None,
    display_root: str = "",
    limits: Limits = DEFAULT_LIMITS,
) -> DesiredState:
    """Load the configuration at ``entry`` (a file, a directory, or ``""`` for the root).

    Raises :class:`~cronstable.errors.ConfigError` with every problem found.
    ``cache`` carries parses and built jobs over from the previous load;
    ``display_root`` prefixes the file names problems show; ``limits`` caps the
    bytes read and the YAML values built (past a revision-wide cap the load stops
    at once, with the problems found so far).
    """
    loader = _Loader(tree, cache, display_root, limits)
    jobs: dict[str, Job] = {}
    digests = b""
    workflows: dict[str, Workflow] = {}
    finished = False
    try:
        with _gc_paused():
            entries = loader.plain_entries(loader.load_entry(entry))
            jobs = loader.build_jobs(entries)
            workflows = loader.build_workflows(loader.workflow_entries(), jobs)
            loader.crontab_warnings(entries, jobs)
            loader.pool_refs(entries, jobs)
            loader.store_needs(
                jobs, (t for flow in workflows.values() for t in flow.tasks.values())
            )
            if not loader.problems:
                plain = not workflows and not loader.pools
                spliced = cache.joined_digests() if cache is not None and plain else None
                digests = (
                    spliced
                    if spliced is not None
                    else joined_digests(
                        [
                            *(job.digest for job in jobs.values()),
                            *(f.digest for f in workflows.values()),
                            *(p.digest for p in loader.pools.values()),
                        ]
                    )
                )
                if cache is not None:
                    # a splice starts from a load of jobs only (every digest one length)
                    cache.keep_digests(digests if plain else None)
        finished = True
    except _Abort:
        pass
    finally:
        if cache is not None:
            cache.finish(ok=finished and not loader.problems)
    secrets = loader.inline_secrets()
    if loader.problems:
        raise ConfigError(_hidden(loader.problems, secrets))
    return DesiredState(
        jobs=jobs,
        web=loader.web,
        logging=loader.logging,
        cluster=loader.cluster,
        state=loader.state,
        metrics=loader.metrics,
        pools=loader.pools,
        job_set_id=job_set_id_of_joined(digests),
        workflows=workflows,
        files=tuple(loader.read_order),
        directories=tuple(dict.fromkeys(loader.listed)),
        warnings=tuple(dict.fromkeys(_hidden(loader.warnings, secrets))),
        positions=loader.positions,
        secrets=frozenset(secrets),
        groups=tuple(loader.groups) if cache is not None else (),
    )


def job_zone(config: JobSettings | WorkflowSettings, prefix: str | None = None) -> tzinfo:
    """The zone a job's schedule is read in: the schedule's ``CRON_TZ=`` prefix, else
    its timezone, UTC with utc, else local."""
    if prefix is not None:
        return ZoneInfo(prefix)
    if config.timezone is not None:
        return ZoneInfo(config.timezone)
    if config.utc:
        return UTC
    return local_timezone()
