"""Large revisions: what the load and the first apply cost grows with the jobs, no faster.

Complexity, never timing: each case times a size and twice that size (the best of a few
runs, the cyclic collector out of the way) and asserts that twice the jobs cost less than
three times as much.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from cronstable.config import DesiredState, Limits, LoadCache, MemoryTree, load, load_snapshot
from cronstable.reconcile.apply import Applier
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

LIMITS = Limits(max_yaml_nodes=10_000_000, max_revision_bytes=1 << 30)


def files(jobs: int, per_file: int = 100) -> dict[str, bytes]:
    out = {}
    for f in range(jobs // per_file):
        lines = ["jobs:\n"]
        for j in range(per_file):
            i = f * per_file + j
            lines.append(
                f'  - {{name: job-{i}, command: "echo {i}", schedule: "{i % 60} {i % 24} * * *"}}\n'
            )
        out[f"team{f:04d}.yaml"] = "".join(lines).encode()
    return out


def grows_linearly(small: Callable[[], object], large: Callable[[], object]) -> None:
    """``large`` (twice the jobs of ``small``) costs less than three times ``small``: CPU
    time, the best of runs taken in turn (other work on the machine moves both alike)."""
    was = gc.isenabled()
    gc.disable()
    try:
        took: dict[Callable[[], object], list[float]] = {small: [], large: []}
        for _ in range(4):
            for run in (small, large):
                started = time.process_time()
                run()
                took[run].append(time.process_time() - started)
        one, two = min(took[small]), min(took[large])
        assert two < 3 * one, (one, two)
    finally:
        if was:
            gc.enable()


def test_loading_twice_the_jobs_costs_less_than_three_times_as_much() -> None:
    small, large = files(2000), files(4000)
    grows_linearly(
        lambda: load(MemoryTree(small), "", limits=LIMITS),
        lambda: load(MemoryTree(large), "", limits=LIMITS),
    )


def test_a_warning_scan_costs_what_is_written_not_jobs_times_settings() -> None:
    """Jobs that write under onFailure (a retry) but set no reporter: the reporter scan
    looks under the keys written, so it grows with the jobs and not faster."""

    def written(jobs: int) -> dict[str, bytes]:
        text = "jobs:\n" + "".join(
            f'  - {{name: j{i}, command: "true", schedule: "@daily", '
            f"onFailure: {{retry: {{maximumRetries: 2}}}}}}\n"
            for i in range(jobs)
        )
        return {"c.yaml": text.encode()}

    small, large = written(1500), written(3000)
    grows_linearly(
        lambda: load(MemoryTree(small), "", limits=LIMITS),
        lambda: load(MemoryTree(large), "", limits=LIMITS),
    )


@pytest.mark.asyncio
async def test_the_first_revision_of_a_daemon_process_is_frozen_out_of_the_collector() -> None:
    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), ProcessSpawner(None))
    applier = Applier(
        [JobsSection(scheduler, ProcessSpawner(None))], limits=LIMITS, freeze_start_up=True
    )
    revision = files(300)
    gc.unfreeze()
    try:
        record = await applier.reconcile(Snapshot(content_revision(revision), "t", revision))
        assert record.outcome == "applied"
        assert gc.isenabled()
        frozen = gc.get_freeze_count()
        assert frozen > 300 * 5  # the revision's jobs and models among what is frozen
        revision = dict(revision)
        revision["team0000.yaml"] = revision["team0000.yaml"].replace(b"echo 0", b"echo x")
        record = await applier.reconcile(Snapshot(content_revision(revision), "t", revision))
        # frozen once only; and what the new revision replaced was freed, frozen as it was
        assert record.outcome == "applied" and gc.get_freeze_count() < frozen
    finally:
        gc.unfreeze()


def test_a_cached_reload_of_one_edited_file_reuses_every_other_file() -> None:
    revision = files(2000)
    cache = LoadCache()
    first = load_snapshot(Snapshot(content_revision(revision), "t", revision), cache=cache)
    revision = dict(revision)
    revision["team0007.yaml"] = revision["team0007.yaml"].replace(b"echo 700", b"echo seven")
    second = load_snapshot(Snapshot(content_revision(revision), "t", revision), cache=cache)
    same = [name for name, job in second.jobs.items() if job is first.jobs[name]]
    assert len(same) == 1900 and "job-700" not in same  # the edited file's jobs are rebuilt
    changed = [n for n, job in second.jobs.items() if job.digest != first.jobs[n].digest]
    assert changed == ["job-700"]


def _outcome(files: dict[str, bytes], cache: LoadCache | None) -> tuple[object, ...]:
    from cronstable.config import ConfigError

    try:
        state = load(MemoryTree(files), "", cache=cache, limits=LIMITS)
    except ConfigError as exc:
        return ("rejected", tuple(str(p) for p in exc.problems))
    return (
        state.job_set_id,
        tuple((name, job.digest, job.file, job.line) for name, job in state.jobs.items()),
        tuple(str(w) for w in state.warnings),
        state.files,
    )


def _plan(desired: DesiredState, applied: DesiredState) -> tuple[object, ...]:
    from cronstable.reconcile.plan import plan

    made = plan(desired, applied)
    return made.summary(), [(c.name, c.kind, c.fields) for c in made.jobs]


def test_a_cached_load_says_exactly_what_a_fresh_load_says_edit_after_edit() -> None:
    """Random edits of a small repository (a shared defaults file, env files, warnings,
    a duplicate made and undone, a broken file and its fix, a cluster-scoped job): every
    revision loaded through one cache agrees with a load without it, job-set id, jobs,
    lines, warnings and problems alike."""
    import random

    rng = random.Random(19)

    def one(name: str, extra: str = "") -> str:
        return f'  - {{name: {name}, command: "true", schedule: "@daily"{extra}}}\n'

    files: dict[str, bytes] = {
        "_defaults.yaml": b"defaults:\n  shell: /bin/bash\n",
        "env/a.env": b"A=1\n",
    }
    for f in range(6):
        body = "include: [_defaults.yaml]\njobs:\n" + "".join(one(f"f{f}-j{j}") for j in range(5))
        files[f"team{f}.yaml"] = body.encode()
    files["team0.yaml"] += one("with-env", ", env_file: env/a.env").encode()
    files["team1.yaml"] += (
        b"  - name: half-reporter\n    command: 'true'\n    schedule: '@daily'\n"
        b"    onFailure: {report: {sentry: {dsn: {value: 'https://k@s/1', fromEnvVar: D}}}}\n"
    )
    shells = [b"defaults:\n  shell: /bin/bash\n", b"defaults:\n  shell: /bin/zsh\n"]

    def put(name: str, text: str | bytes) -> None:
        files[name] = text.encode() if isinstance(text, str) else text

    edits = [
        lambda: put("env/a.env", f"A={rng.randint(0, 9)}\n"),
        lambda: put("_defaults.yaml", rng.choice(shells)),
        lambda: put(f"team{rng.randint(0, 5)}.yaml", files["team2.yaml"]),  # duplicates
        lambda: put("team3.yaml", "jobs: [ {name: broken\n"),
        lambda: put("team3.yaml", "jobs:\n" + one("t3")),
        lambda: put("team4.yaml", "jobs:\n" + one("scoped", ", concurrencyScope: cluster")),
        lambda: put("team4.yaml", "jobs:\n" + one("t4")),
        lambda: put(f"team{rng.randint(0, 5)}.yaml", "jobs:\n" + one(f"n{rng.randint(0, 99)}")),
        lambda: put(
            f"team{rng.randint(0, 5)}.yaml",
            "include: [_defaults.yaml]\njobs:\n"
            + "".join(one(f"r{rng.randint(0, 9)}-{j}") for j in range(3)),
        ),
        lambda: files.pop("team5.yaml", None),
    ]
    cache = LoadCache()
    assert _outcome(files, cache) == _outcome(files, None)
    rejected = set()
    applied = load(MemoryTree(dict(files)), "", cache=cache, limits=LIMITS)
    for _ in range(120):
        rng.choice(edits)()
        outcome = _outcome(dict(files), cache)
        assert outcome == _outcome(dict(files), None)
        rejected.add(outcome[0] == "rejected")
        if outcome[0] != "rejected":
            desired = load(MemoryTree(dict(files)), "", cache=cache, limits=LIMITS)
            assert _plan(desired, applied) == _plan(
                replace(desired, groups=()), replace(applied, groups=())
            )
            applied = desired
    assert rejected == {True, False}  # both kinds of revision were met
    files["team3.yaml"] = ("jobs:\n" + one("t3")).encode()
    for name in [n for n in files if n.startswith("team") and n != "team3.yaml"]:
        del files[name]
    first = load(MemoryTree(files), "", cache=cache, limits=LIMITS)
    again = load(MemoryTree(dict(files)), "", cache=cache, limits=LIMITS)
    assert again.groups and all(a is b for a, b in zip(again.groups, first.groups, strict=True))


def _full_outcome(files: dict[str, bytes], cache: LoadCache | None) -> tuple[object, ...]:
    """:func:`_outcome` with the workflows (their tasks) and pools too."""
    from cronstable.config import ConfigError

    try:
        state = load(MemoryTree(files), "", cache=cache, limits=LIMITS)
    except ConfigError as exc:
        return ("rejected", tuple(str(p) for p in exc.problems))
    return (
        state.job_set_id,
        tuple((n, j.digest, j.file, j.line, j.config.pool) for n, j in state.jobs.items()),
        tuple(
            (
                name,
                flow.digest,
                flow.job.digest,
                tuple((t, j.digest) for t, j in flow.tasks.items()),
            )
            for name, flow in state.workflows.items()
        ),
        tuple((name, pool.digest, pool.file, pool.line) for name, pool in state.pools.items()),
        tuple(str(w) for w in state.warnings),
        state.files,
    )


def test_a_cached_load_with_workflows_and_pools_says_what_a_fresh_load_says() -> None:
    """As above, for revisions with workflows and pools: pools defined in one file and
    named by jobs and tasks of others, a pool removed (its users, cached or not, named
    unknown at their line), a workflow whose name clashes with a cached file's job, a
    defaults file that reaches jobs and tasks alike, a broken workflow and its fix.  Every
    revision loaded through one cache agrees with a load without it, and the plans of
    what is applied agree with the plans a load without the cache's groups makes."""
    import random

    rng = random.Random(23)

    def one(name: str, extra: str = "") -> str:
        return f'  - {{name: {name}, command: "true", schedule: "@daily"{extra}}}\n'

    def flow(name: str, pool: str | None = None, broken: bool = False) -> str:
        uses = f", pool: {pool}" if pool else ""
        after = "[nowhere]" if broken else "[a]"
        return (
            f"  - name: {name}\n    schedule: '@hourly'\n    tasks:\n"
            f"      - {{name: a, command: 'true'{uses}}}\n"
            f"      - {{name: b, command: 'true', dependsOn: {after}}}\n"
        )

    pools = [b"pools:\n  - {name: db, slots: 1}\n", b"pools:\n  - {name: db, slots: 2}\n"]
    files: dict[str, bytes] = {
        "_defaults.yaml": b"defaults:\n  shell: /bin/bash\n",
        "pools.yaml": pools[0],
        "flows.yaml": ("include: [_defaults.yaml]\nworkflows:\n" + flow("etl", "db")).encode(),
    }
    for f in range(5):
        body = "include: [_defaults.yaml]\njobs:\n" + "".join(one(f"f{f}-j{j}") for j in range(4))
        if f % 2:
            body += one(f"f{f}-pooled", ", pool: db")
        files[f"team{f}.yaml"] = body.encode()
    shells = [b"defaults:\n  shell: /bin/bash\n", b"defaults:\n  shell: /bin/zsh\n"]

    def put(name: str, text: str | bytes) -> None:
        files[name] = text.encode() if isinstance(text, str) else text

    edits = [
        lambda: put("pools.yaml", rng.choice(pools)),
        lambda: put("pools.yaml", "pools: []\n"),  # db removed: its users are unknown
        lambda: put("pools.yaml", "pools:\n  - {name: other, slots: 1}\n"),
        lambda: put("_defaults.yaml", rng.choice(shells)),
        lambda: put("flows.yaml", "workflows:\n" + flow("etl", rng.choice(["db", None]))),
        lambda: put("flows.yaml", "workflows:\n" + flow("f1-j0")),  # clashes with a job
        lambda: put("flows.yaml", "workflows:\n" + flow("etl", broken=True)),
        lambda: put("flows.yaml", "include: [_defaults.yaml]\nworkflows:\n" + flow("etl2")),
        lambda: files.pop("flows.yaml", None),
        lambda: put(f"team{rng.randint(0, 4)}.yaml", "jobs:\n" + one(f"n{rng.randint(0, 9)}")),
        lambda: put(
            f"team{rng.randint(0, 4)}.yaml",
            "include: [_defaults.yaml]\njobs:\n" + one(f"p{rng.randint(0, 9)}", ", pool: db"),
        ),
        lambda: put(f"team{rng.randint(0, 4)}.yaml", files["team1.yaml"]),  # duplicates
    ]
    cache = LoadCache()
    assert _full_outcome(dict(files), cache) == _full_outcome(dict(files), None)
    seen = set()
    applied = load(MemoryTree(dict(files)), "", cache=cache, limits=LIMITS)
    for _ in range(150):
        rng.choice(edits)()
        outcome = _full_outcome(dict(files), cache)
        assert outcome == _full_outcome(dict(files), None)
        seen.add(outcome[0] == "rejected")
        if outcome[0] != "rejected":
            desired = load(MemoryTree(dict(files)), "", cache=cache, limits=LIMITS)
            assert _plan(desired, applied) == _plan(
                replace(desired, groups=()), replace(applied, groups=())
            )
            seen.add(("flows", bool(desired.workflows), bool(desired.pools)))
            applied = desired
    assert {True, False, ("flows", True, True)} <= seen  # both kinds, with workflows and pools


def test_spliced_digests_are_the_joined_digests_of_the_new_set() -> None:
    import hashlib
    import random

    from cronstable.config.fingerprint import (
        job_set_id,
        job_set_id_of_joined,
        joined_digests,
        splice_digests,
    )

    rng = random.Random(5)

    def digest() -> str:
        return "v1:" + hashlib.sha256(str(rng.random()).encode()).hexdigest()

    for _ in range(200):
        old = {digest() for _ in range(rng.randint(0, 40))}
        gone = set(rng.sample(sorted(old), rng.randint(0, len(old))))
        new = {digest() for _ in range(rng.randint(0, 10))}
        spliced = splice_digests(joined_digests(old), gone, new)
        assert spliced == joined_digests((old - gone) | new)
        assert job_set_id_of_joined(spliced) == job_set_id((old - gone) | new)
    # the scheme as it was, byte for byte: sha256 of "v1", then "\n" and a digest each
    h = hashlib.sha256(b"v1")
    for d in sorted(old):
        h.update(b"\n" + d.encode())
    assert job_set_id(old) == f"v1:{h.hexdigest()}"
    assert splice_digests(joined_digests(["v1:short"]), [], []) is None
    assert splice_digests(joined_digests(old), [digest()], []) is None  # not there


def test_a_swap_of_the_changed_names_leaves_the_table_a_whole_swap_would() -> None:
    """Scheduler.replace_jobs(only=...) against the whole swap: same jobs, same next
    fires, in configuration order, over a sequence of edits (added, changed, retimed,
    removed jobs)."""
    from cronstable.reconcile.plan import changed_groups

    clock = ManualClock(datetime(2026, 6, 1, tzinfo=UTC))
    partial = Scheduler(clock, ProcessSpawner(None))
    whole = Scheduler(clock, ProcessSpawner(None))
    revision = files(500, per_file=50)
    cache = LoadCache()
    before = load(MemoryTree(revision), "", cache=cache, limits=LIMITS)
    partial.replace_jobs(before.jobs)
    whole.replace_jobs(before.jobs)
    edits = [
        ("team0001.yaml", b"echo 50", b"echo fifty"),  # changed
        ("team0002.yaml", b'"40 4 ', b'"41 4 '),  # retimed (job-100's minute)
        ("team0003.yaml", b"job-150,", b"job-new,"),  # one removed, one added
    ]
    for name, old, new in edits:
        revision = dict(revision)
        assert old in revision[name]
        revision[name] = revision[name].replace(old, new, 1)
        after = load(MemoryTree(revision), "", cache=cache, limits=LIMITS)
        delta = changed_groups(after, before)
        assert delta is not None and len(delta[1]) <= 50
        partial.replace_jobs(after.jobs, only={*delta[0], *delta[1]})
        whole.replace_jobs(after.jobs)
        assert list(partial.jobs) == list(whole.jobs) == list(after.jobs)
        assert all(partial.jobs[n] is whole.jobs[n] for n in after.jobs)
        assert [partial.next_fire(n) for n in after.jobs] == [
            whole.next_fire(n) for n in after.jobs
        ]
        assert [j.name for _, j in partial.page(0, 1000)] == list(after.jobs)
        assert partial.position("job-499") == whole.position("job-499") == 499
        before = after
