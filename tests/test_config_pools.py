"""Pools in the configuration: ``pools:`` beside ``jobs:``, and a job's ``pool``,
``poolPriority`` and ``poolTimeout`` (config/loader.py, models.py, fingerprint.py),
with how plans, diffs and the published configuration show them.

Expected problems are the one-line ``str(problem)`` operators see (file, line,
column, key and message at once).  The YAML written here is also part of the
corpus of the schema-vs-loader differential test (test_config_schema_agreement.py).
"""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime

import pytest

from cronstable.cli.remote import republish
from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.reconcile.plan import plan
from cronstable.reconcile.render import to_json, to_markdown, to_text

AT = datetime(2026, 6, 1, tzinfo=UTC)


def tree(files: dict[str, str]) -> MemoryTree:
    return MemoryTree({k: textwrap.dedent(v).encode() for k, v in files.items()})


def ok(files: dict[str, str], entry: str = "") -> DesiredState:
    return load(tree(files), entry)


def lines(files: dict[str, str], entry: str = "") -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tree(files), entry)
    return [str(p) for p in info.value.problems]


BASIC = """\
pools:
  - name: warehouse
    slots: 2
  - {name: api, slots: 1, scope: node}
jobs:
  - name: export
    command: "true"
    schedule: "0 * * * *"
    pool: warehouse
    poolPriority: 10
    poolTimeout: 1h30m
  - name: plain
    command: "true"
    schedule: "0 * * * *"
"""


def test_pools_and_the_pool_keys_of_a_job_load() -> None:
    state = ok({"c.yaml": BASIC})
    assert list(state.pools) == ["warehouse", "api"]
    warehouse = state.pools["warehouse"]
    assert (warehouse.slots, warehouse.scope, warehouse.file, warehouse.line) == (
        2,
        "node",
        "c.yaml",
        2,
    )
    export = state.jobs["export"].config
    assert (export.pool, export.pool_priority, export.pool_timeout) == ("warehouse", 10, 5400.0)
    plain = state.jobs["plain"].config
    assert (plain.pool, plain.pool_priority, plain.pool_timeout) == (None, 0, None)


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("90s", 90.0), ("1h30m", 5400.0), ("500ms", 0.5), ("2m", 120.0), ("600", 600.0),
     ("2.5", 2.5), ("0", 0.0), ("''", None)],
)  # fmt: skip
def test_pool_timeout_takes_seconds_or_a_duration(written: str, seconds: float | None) -> None:
    text = f"""\
    pools: [{{name: p, slots: 1}}]
    jobs:
      - {{name: j, command: "true", schedule: "* * * * *", pool: p, poolTimeout: {written}}}
    """
    assert ok({"c.yaml": text}).jobs["j"].config.pool_timeout == seconds


def test_a_bad_pool_timeout_is_refused_at_its_key() -> None:
    assert lines(
        {
            "c.yaml": """\
            pools: [{name: p, slots: 1}]
            jobs:
              - {name: a, command: "true", schedule: "* * * * *", pool: p, poolTimeout: 5 minutes}
              - {name: b, command: "true", schedule: "* * * * *", pool: p, poolTimeout: -3}
            """
        }
    ) == [
        "c.yaml:3:64: jobs[0].poolTimeout: expected a duration: seconds, or numbers with units "
        "h, m, s or ms (like 90s or 1h30m), got '5 minutes'",
        "c.yaml:4:64: jobs[1].poolTimeout: must be at least 0, got -3",
    ]


def test_defaults_and_included_files_give_pools_and_pool_keys() -> None:
    state = ok(
        {
            "_pools.yaml": """\
            pools:
              - {name: db, slots: 3}
            defaults:
              pool: db
              poolTimeout: 10m
            """,
            "jobs.yaml": """\
            include: [_pools.yaml]
            jobs:
              - {name: a, command: "true", schedule: "* * * * *"}
              - {name: b, command: "true", schedule: "* * * * *", poolPriority: -5}
            """,
        }
    )
    assert list(state.pools) == ["db"] and state.pools["db"].file == "_pools.yaml"
    assert [(j.config.pool, j.config.pool_priority, j.config.pool_timeout) for j in
            state.jobs.values()] == [("db", 0, 600.0), ("db", -5, 600.0)]  # fmt: skip


def test_an_unknown_pool_is_refused_where_it_is_written() -> None:
    assert lines(
        {
            "_defaults.yaml": """\
            defaults:
              pool: warehous
            """,
            "jobs.yaml": """\
            include: [_defaults.yaml]
            pools:
              - {name: warehouse, slots: 1}
            jobs:
              - {name: a, command: "true", schedule: "* * * * *"}
              - name: b
                command: "true"
                schedule: "* * * * *"
                pool: nowhere
            """,
        }
    ) == [
        "_defaults.yaml:2:3: defaults.pool: job 'a': unknown pool 'warehous' "
        "(did you mean 'warehouse'?)",
        "jobs.yaml:9:5: jobs[1].pool: job 'b': unknown pool 'nowhere'",
    ]


def test_a_pool_named_with_no_pools_defined_says_so() -> None:
    assert lines(
        {"c.yaml": 'jobs: [{name: a, command: "true", schedule: "* * * * *", pool: db}]\n'}
    ) == ["c.yaml:1:58: jobs[0].pool: job 'a': unknown pool 'db' (no pools are defined)"]


def test_a_pool_defined_twice_names_both_places() -> None:
    assert lines(
        {
            "a.yaml": """\
            pools:
              - {name: db, slots: 1}
            """,
            "b.yaml": """\
            jobs: []
            pools:
              - {name: other, slots: 1}
              - {name: db, slots: 2}
            """,
        }
    ) == ["b.yaml:4:6: pools[1].name: pool 'db' is defined twice; the first is at a.yaml:2"]


def test_bad_pools_are_refused_at_their_keys() -> None:
    assert lines(
        {
            "c.yaml": """\
            pools:
              - {name: zero, slots: 0}
              - {name: some, slots: many}
              - {name: far, slots: 1, scope: planet}
              - {slots: 1}
              - just-a-name
              - {name: extra, slots: 1, size: 3}
            jobs: []
            """
        }
    ) == [
        "c.yaml:2:18: pools[0].slots: must be at least 1, got 0",
        "c.yaml:3:18: pools[1].slots: expected an integer, got 'many'",
        "c.yaml:4:27: pools[2].scope: expected one of node, cluster, got 'planet'",
        "c.yaml:5:5: pools[3]: missing required key 'name'",
        "c.yaml:6:5: pools[4]: a pool must be a mapping",
        "c.yaml:7:29: pools[5]: unknown key 'size'",
    ]


def test_pools_must_be_a_list() -> None:
    assert lines({"c.yaml": "pools: {name: db, slots: 1}\njobs: []\n"}) == [
        "c.yaml:1:1: pools: expected a list of pools"
    ]


def test_a_cluster_scoped_pool_needs_a_cluster_section() -> None:
    problems = lines({"c.yaml": "pools: [{name: db, slots: 2, scope: cluster}]\njobs: []\n"})
    assert (
        "c.yaml:1:30: pools[0].scope: pool 'db': scope cluster keeps its slots in a shared "
        "store: add a cluster section (etcd or filesystem)"
    ) in problems


def test_the_job_set_id_covers_pools_and_ignores_their_order() -> None:
    base = ok({"c.yaml": BASIC})
    reordered = ok(
        {
            "c.yaml": BASIC.replace(
                "  - name: warehouse\n    slots: 2\n  - {name: api, slots: 1, scope: node}\n",
                "  - {name: api, slots: 1}\n  - {name: warehouse, slots: 2, scope: node}\n",
            )
        }
    )
    assert reordered.job_set_id == base.job_set_id
    assert [p.digest for p in reordered.pools.values()] == [
        base.pools["api"].digest,
        base.pools["warehouse"].digest,
    ]
    wider = ok({"c.yaml": BASIC.replace("slots: 2", "slots: 3")})
    assert wider.job_set_id != base.job_set_id
    assert wider.jobs["export"].digest == base.jobs["export"].digest  # the job is the same
    # a pool no job names still counts: it is part of what the nodes must agree on
    extra = ok({"c.yaml": BASIC.replace("pools:\n", "pools:\n  - {name: spare, slots: 9}\n")})
    assert extra.job_set_id != base.job_set_id
    # and a job's pool keys are in the job's digest
    later = ok({"c.yaml": BASIC.replace("poolPriority: 10", "poolPriority: 11")})
    assert later.jobs["export"].digest != base.jobs["export"].digest


def test_plans_and_diffs_show_pool_changes() -> None:
    before = ok({"c.yaml": BASIC})
    after = ok(
        {
            "c.yaml": BASIC.replace("slots: 2", "slots: 4").replace(
                "  - {name: api, slots: 1, scope: node}\n", "  - {name: batch, slots: 1}\n"
            )
        }
    )
    changes = plan(after, before)
    assert [(c.name, c.kind) for c in changes.pools] == [
        ("api", "removed"),
        ("batch", "added"),
        ("warehouse", "changed"),
    ]
    assert [(f.path, f.old, f.new) for f in changes.pools[2].fields] == [("slots", 2, 4)]
    assert not changes.jobs and not changes.empty
    assert changes.summary()["sections"] == ["pools"]
    text = to_text(changes, AT)
    assert "- pool api (1 slot, scope node)" in text
    assert "+ pool batch (1 slot, scope node)" in text
    assert "~ pool warehouse (4 slots, scope node)\n    slots: 2 -> 4" in text
    # more slots admit what waits at once: the one run a reload starts by itself
    assert "  ! at apply (reload): runs now: pool: any launches waiting in its queue" in text
    body = json.loads(to_json(changes, AT))
    grown = body["pools"][2].pop("atApply")
    assert body["pools"][2] == {
        "name": "warehouse",
        "change": "changed",
        "slots": 4,
        "scope": "node",
        "fields": [{"path": "slots", "old": 2, "new": 4}],
    }
    assert [(e["applied"], e["kind"], e["runs"]) for e in grown] == [("reload", "pool", True)]
    assert [p["atApply"] for p in body["pools"][:2]] == [[], []]
    assert "| ~ | `warehouse` | 4 slots, scope node | slots: `2` → `4` |" in to_markdown(
        changes, AT
    )
    assert plan(before, before).empty


def test_a_daemons_published_configuration_keeps_the_pools() -> None:
    state = ok({"c.yaml": BASIC})
    again = republish(state)
    assert {n: (p.slots, p.scope, p.digest) for n, p in again.pools.items()} == {
        n: (p.slots, p.scope, p.digest) for n, p in state.pools.items()
    }
    assert plan(again, republish(state)).empty
