"""A plan's effects in time (reconcile/effects.py) and how the diff renders them: the next
fires before and after (job's zone and UTC, across daylight-saving changes), and what the
apply itself runs now under the daemon's rules, with and without a daemon's knowledge."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.reconcile.effects import (
    DaemonFacts,
    JobFacts,
    LastRun,
    PoolFacts,
    latest_fire_within,
    time_effects,
)
from cronstable.reconcile.plan import plan
from cronstable.reconcile.render import to_json, to_markdown, to_text


def state(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


LONDON_OLD = """\
jobs:
  - {name: nightly, command: "true", schedule: "30 1 * * *", timezone: Europe/London}
  - {name: halfhour, command: "true", schedule: "*/30 1 * * *", timezone: Europe/London}
"""
LONDON_NEW = """\
jobs:
  - {name: nightly, command: "true", schedule: "30 2 * * *", timezone: Europe/London}
  - {name: halfhour, command: "false", schedule: "*/30 1 * * *", timezone: Europe/London}
"""


def test_spring_forward_a_fire_in_the_skipped_hour_moves_to_the_end_of_the_gap() -> None:
    """2026-03-29, London: 01:00 GMT becomes 02:00 BST; 01:30 does not exist that night."""
    at = utc("2026-03-28T12:00:00")
    times = time_effects(plan(state(LONDON_NEW), state(LONDON_OLD)), at)
    nightly = times.jobs["nightly"]
    assert nightly.before is not None and nightly.after is not None
    assert nightly.before.zone == "Europe/London"
    assert [(f.at.isoformat(), f.utc.isoformat()) for f in nightly.before.fires] == [
        ("2026-03-29T02:00:00+01:00", "2026-03-29T01:00:00+00:00"),
        ("2026-03-30T01:30:00+01:00", "2026-03-30T00:30:00+00:00"),
        ("2026-03-31T01:30:00+01:00", "2026-03-31T00:30:00+00:00"),
    ]
    assert [f.utc.isoformat() for f in nightly.after.fires] == [
        "2026-03-29T01:30:00+00:00",
        "2026-03-30T01:30:00+00:00",
        "2026-03-31T01:30:00+00:00",
    ]
    # a wildcard-hour slot in the gap does not fire that night at all
    halfhour = times.jobs["halfhour"]
    assert halfhour.same_times
    assert halfhour.after is not None
    assert halfhour.after.fires[0].at.isoformat() == "2026-03-30T01:00:00+01:00"
    text = to_text(plan(state(LONDON_NEW), state(LONDON_OLD)), at)
    assert (
        "    next before: 2026-03-29T02:00:00+01:00 (2026-03-29T01:00:00Z), "
        "2026-03-30T01:30:00+01:00 (2026-03-30T00:30:00Z)"
    ) in text
    assert "    next after:  2026-03-29T02:30:00+01:00 (2026-03-29T01:30:00Z)" in text
    assert "    next: 2026-03-30T01:00:00+01:00 (2026-03-30T00:00:00Z)" in text
    assert "(unchanged)" in text.split("~ job halfhour")[1].split("~ job")[0]


def test_fall_back_a_fixed_time_fires_once_a_wildcard_one_in_both_passes() -> None:
    """2026-10-25, London: 02:00 BST becomes 01:00 GMT; 01:00-02:00 happens twice."""
    at = utc("2026-10-24T12:00:00")
    times = time_effects(plan(state(LONDON_NEW), state(LONDON_OLD)), at)
    nightly = times.jobs["nightly"]
    assert nightly.before is not None
    assert [f.utc.isoformat() for f in nightly.before.fires] == [
        "2026-10-25T00:30:00+00:00",  # 01:30 BST, the first pass only
        "2026-10-26T01:30:00+00:00",
        "2026-10-27T01:30:00+00:00",
    ]
    halfhour = times.jobs["halfhour"].after
    assert halfhour is not None
    assert [(f.at.isoformat(), f.utc.isoformat()) for f in halfhour.fires] == [
        ("2026-10-25T01:00:00+01:00", "2026-10-25T00:00:00+00:00"),
        ("2026-10-25T01:30:00+01:00", "2026-10-25T00:30:00+00:00"),
        ("2026-10-25T01:00:00+00:00", "2026-10-25T01:00:00+00:00"),  # the second 01:00
    ]
    body = json.loads(to_json(plan(state(LONDON_NEW), state(LONDON_OLD)), at))
    job = next(j for j in body["jobs"] if j["name"] == "halfhour")
    assert job["times"]["after"]["zone"] == "Europe/London"
    assert job["times"]["after"]["fires"][2] == {
        "local": "2026-10-25T01:00:00+00:00",
        "utc": "2026-10-25T01:00:00Z",
        "skipped": None,
    }
    # a change that is not of timing still lists both sides (the same fires)
    assert job["nextFires"]["before"] == job["nextFires"]["after"]


REBOOT_OLD = """\
jobs:
  - {name: keep, command: "true", schedule: "@hourly"}
  - {name: migrate, command: "echo v1", schedule: "@reboot", clusterPolicy: Leader}
"""
REBOOT_NEW = """\
jobs:
  - {name: keep, command: "true", schedule: "@hourly"}
  - {name: migrate, command: "echo v2", schedule: "@reboot", clusterPolicy: Leader}
  - {name: warm, command: "true", schedule: "@reboot"}
  - {name: held, command: "true", schedule: "@reboot", suspend: {reason: later}}
  - {name: off, command: "true", schedule: "@reboot", enabled: false}
"""


def test_a_reload_runs_no_new_reboot_job_a_start_does_once() -> None:
    at = utc("2026-05-01T08:00:00")
    times = time_effects(plan(state(REBOOT_NEW), state(REBOOT_OLD)), at)
    warm = [(e.applied, e.kind, e.runs) for e in times.jobs["warm"].apply]
    assert warm == [("reload", "reboot", False), ("start", "reboot", True)]
    assert "once per boot of each machine" in times.jobs["warm"].apply[1].detail
    migrate = times.jobs["migrate"].apply
    assert "changed @reboot job" in migrate[0].detail
    assert migrate[1].runs and "once per definition in the cluster" in migrate[1].detail
    # paused: a start skips it as paused; disabled: nothing at all
    held = times.jobs["held"].apply
    assert [(e.applied, e.runs) for e in held] == [("reload", False), ("start", False)]
    assert "paused (suspend)" in held[1].detail
    assert times.jobs["off"].apply == ()
    text = to_text(plan(state(REBOOT_NEW), state(REBOOT_OLD)), at)
    assert "  ! at apply (start): runs now: @reboot: once per boot of each machine" in text
    assert "    at apply (reload): @reboot: not run: a reload does not run a new @reboot" in text
    assert "runs now: 0 at a reload, 2 at a start" in text
    body = json.loads(to_json(plan(state(REBOOT_NEW), state(REBOOT_OLD)), at))
    assert body["timeEffects"]["runsNow"] == {"reload": 0, "start": 2}
    assert body["timeEffects"]["facts"] is None
    assert "not in the files" in body["timeEffects"]["unknown"][0]
    md = to_markdown(plan(state(REBOOT_NEW), state(REBOOT_OLD)), at)
    assert (
        "- **runs now** · job `warm` · at a daemon start · @reboot: once per boot of each machine"
    ) in md
    assert "- no run · job `warm` · at a reload · @reboot: not run" in md


DEADLINE_OLD = """\
jobs:
  - {name: export, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 600}
  - {name: same, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 600}
"""
DEADLINE_NEW = """\
jobs:
  - {name: export, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 7200}
  - {name: same, command: "echo other", schedule: "0 2 * * *", startingDeadlineSeconds: 600}
  - {name: fresh, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 3600}
"""


def test_a_longer_deadline_makes_a_missed_fire_look_runnable_and_none_runs() -> None:
    at = utc("2026-05-01T03:30:00")  # 90 min after the 02:00 fire
    times = time_effects(plan(state(DEADLINE_NEW), state(DEADLINE_OLD)), at)
    export = times.jobs["export"].apply
    assert [(e.applied, e.kind, e.runs) for e in export] == [
        ("reload", "catchUp", False),
        ("start", "catchUp", False),
    ]
    assert export[0].fire == utc("2026-05-01T02:00:00")
    assert "its startingDeadlineSeconds changed" in export[0].detail
    assert "starts anew" in export[1].detail
    # the deadline did not change: nothing to say; a new job's window has passed (1 h)
    assert times.jobs["same"].apply == ()
    assert times.jobs["fresh"].apply == ()
    text = to_text(plan(state(DEADLINE_NEW), state(DEADLINE_OLD)), at)
    assert (
        "    at apply (reload): catch-up of 2026-05-01T02:00:00+00:00: not run: a reload "
        "catches up no fire"
    ) in text
    assert "runs now: nothing, at a reload or a start" in text
    md = to_markdown(plan(state(DEADLINE_NEW), state(DEADLINE_OLD)), at)
    assert "- no run · job `export` · at a reload · catch-up of 2026-05-01T02:00:00+00:00" in md


def test_the_latest_fire_within_a_window_is_found_in_few_steps() -> None:
    every_second = state('jobs: [{name: s, command: "true", schedule: "* * * * * *"}]')
    job = every_second.jobs["s"]
    at = utc("2026-05-01T03:30:00.500000")
    assert latest_fire_within(job, at, 86400) == utc("2026-05-01T03:30:00")
    daily = state('jobs: [{name: d, command: "true", schedule: "0 2 * * *"}]').jobs["d"]
    assert latest_fire_within(daily, at, 86400) == utc("2026-05-01T02:00:00")
    assert latest_fire_within(daily, at, 3600) is None
    assert latest_fire_within(daily, utc("2026-05-01T02:00:00"), 0) == utc("2026-05-01T02:00:00")
    yearly = state('jobs: [{name: y, command: "true", schedule: "0 0 1 1 *"}]').jobs["y"]
    assert latest_fire_within(yearly, at, 400 * 86400) == utc("2026-01-01T00:00:00")


def test_a_suspend_marks_the_fires_it_skips() -> None:
    old = state('jobs: [{name: j, command: "true", schedule: "0 * * * *"}]')
    new = state(
        'jobs: [{name: j, command: "true", schedule: "0 * * * *", '
        'suspend: {until: "2026-05-01T10:30:00Z", reason: migration}}]'
    )
    at = utc("2026-05-01T08:15:00")
    times = time_effects(plan(new, old), at).jobs["j"]
    assert times.after is not None and times.before is not None
    assert [f.skipped for f in times.after.fires] == ["suspend", "suspend", None]
    assert [f.skipped for f in times.before.fires] == [None, None, None]
    assert not times.same_times
    text = to_text(plan(new, old), at)
    assert "2026-05-01T09:00:00+00:00 [skipped: suspend]" in text
    assert "2026-05-01T11:00:00+00:00\n" in text


def test_what_a_daemon_knows_changes_the_effects() -> None:
    old = state(
        """\
        pools: [{name: db, slots: 1}]
        jobs:
          - {name: flaky, command: "false", schedule: "@hourly", pool: db}
          - {name: long, command: "sleep 9", schedule: "@hourly"}
          - {name: paused, command: "true", schedule: "0 * * * *"}
          - {name: export, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 60}
        """
    )
    new = state(
        """\
        pools: [{name: db, slots: 3}]
        jobs:
          - {name: flaky, command: "true", schedule: "@hourly", pool: db}
          - {name: paused, command: "echo new", schedule: "0 * * * *"}
          - {name: export, command: "true", schedule: "0 2 * * *", startingDeadlineSeconds: 7200}
        """
    )
    at = utc("2026-05-01T03:30:00")
    facts = DaemonFacts(
        "http://node-a:8080",
        jobs={
            "flaky": JobFacts(retry_pending=True, running=1),
            "long": JobFacts(running=2),
            "paused": JobFacts(api_paused=True, api_pause_until=utc("2026-05-01T05:30:00")),
            "export": JobFacts(
                last_run=LastRun(utc("2026-05-01T02:00:00"), utc("2026-05-01T02:00:01"), "success")
            ),
        },
        pools={"db": PoolFacts(slots=1, in_use=1, queued=5)},
    )
    times = time_effects(plan(new, old), at, facts)
    assert [(e.kind, e.runs) for e in times.jobs["flaky"].apply] == [
        ("retry", False),
        ("running", False),
    ]
    assert "dropped (its definition changed)" in times.jobs["flaky"].apply[0].detail
    assert "the run finishes" in times.jobs["long"].apply[0].detail
    # an API pause outlives the apply: the fires before its end are skipped after it too
    paused = times.jobs["paused"]
    assert paused.after is not None
    assert [f.skipped for f in paused.after.fires] == ["api pause", "api pause", None]
    assert "it ran already (success)" in times.jobs["export"].apply[0].detail
    [pool] = times.pools["db"]
    assert (pool.applied, pool.kind, pool.runs, pool.count) == ("reload", "pool", True, 2)
    assert times.facts == "http://node-a:8080" and times.unknown == ()
    text = to_text(plan(new, old), at, facts=facts)
    assert "  ! at apply (reload): runs now: pool: 2 of the 5 launches waiting" in text
    assert "with what http://node-a:8080 knows; runs now: 1 at a reload, 0 at a start" in text
    # a daemon that could not be read: said so, and the rest is as for files
    missing = json.loads(to_json(plan(new, old), at, "GET /status answered 503"))
    assert missing["timeEffects"]["unknown"] == [
        "what the daemon knows could not be read (GET /status answered 503)"
    ]


WORKFLOWS_OLD = """\
workflows:
  - name: etl
    schedule: "0 3 * * *"
    timezone: America/New_York
    tasks:
      - {name: extract, command: echo extract}
"""
WORKFLOWS_NEW = """\
workflows:
  - name: etl
    schedule: "0 2 * * *"
    timezone: America/New_York
    tasks:
      - {name: extract, command: echo extract}
  - name: boot
    schedule: "@reboot"
    tasks:
      - {name: only, command: echo hi}
"""


def test_workflows_show_their_fires_and_reboot_effects() -> None:
    """2026-03-08, New York: 02:00 EST becomes 03:00 EDT; 02:00 does not exist."""
    at = utc("2026-03-07T12:00:00")
    p = plan(state(WORKFLOWS_NEW), state(WORKFLOWS_OLD))
    times = time_effects(p, at)
    etl = times.workflows["etl"]
    assert etl.before is not None and etl.after is not None
    assert [f.at.isoformat() for f in etl.before.fires][:2] == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T03:00:00-04:00",
    ]
    assert [f.at.isoformat() for f in etl.after.fires][:2] == [
        "2026-03-08T03:00:00-04:00",  # 02:00 in the gap: at its end
        "2026-03-09T02:00:00-04:00",
    ]
    assert [(e.applied, e.runs) for e in times.workflows["boot"].apply] == [
        ("reload", False),
        ("start", True),
    ]
    text = to_text(p, at)
    assert "~ workflow etl (0 2 * * *)" in text
    assert "    next after:  2026-03-08T03:00:00-04:00 (2026-03-08T07:00:00Z)" in text
    body = json.loads(to_json(p, at))
    etl_json = next(w for w in body["workflows"] if w["name"] == "etl")
    assert etl_json["nextFires"]["after"][1] == "2026-03-09T02:00:00-04:00"
    assert etl_json["times"]["after"]["fires"][1]["utc"] == "2026-03-09T06:00:00Z"
    md = to_markdown(p, at)
    assert "- **runs now** · workflow `boot` · at a daemon start" in md
    assert "Next fires after: 2026-03-08T03:00:00-04:00 (2026-03-08T07:00:00Z)" in md


def test_removed_jobs_show_the_fires_that_no_longer_happen() -> None:
    old = state('jobs: [{name: gone, command: "true", schedule: "@daily"}]')
    new = state("jobs: []")
    at = utc("2026-05-01T08:00:00")
    text = to_text(plan(new, old), at)
    assert "- job gone (@daily)\n    was next: 2026-05-02T00:00:00+00:00" in text
