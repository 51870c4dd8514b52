"""The stored run history keeps its own form: records written before the API and the
store parted are read back, and what is written now is byte for byte the same."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from cronstable.ports import FinishedRun, RunStart, run_id
from cronstable.state.base import decode, encode
from cronstable.state.records import (
    _json_bound,
    history_record,
    history_runs,
    read_run,
    run_record,
)

# written by cronstable at f87ed44 (before state/records.py): state.base.encode of
# {"job": "backup", "runs": [FinishedRun.as_json() of FAILED and MANUAL below]}
BEFORE = (
    b'{"job": "backup", "runs": [{"attempt": 2, "cpuSeconds": 0.123457, "duration": 2.5, '
    b'"exitCode": 3, "failReason": "nonzeroReturn (exit code 3)", '
    b'"finishedAt": "2026-05-01T03:00:02.750001Z", "id": "backup@2026-05-01T03:00:00Z#2", '
    b'"job": "backup", "manual": false, "maxRss": 1478656, "outcome": "failed", "pid": 4242, '
    b'"scheduledTime": "2026-05-01T03:00:00Z", "startedAt": "2026-05-01T03:00:00.250000Z", '
    b'"stderr": null, "stderrDropped": 0, "stdout": "done \\u2713\\n", "stdoutDropped": 12}, '
    b'{"attempt": 1, "cpuSeconds": null, "duration": 0.0, "exitCode": 127, '
    b'"failReason": "cannot run", "finishedAt": "2026-05-01T04:00:00Z", '
    b'"id": "backup@2026-05-01T04:00:00Z#1", "job": "backup", "manual": true, "maxRss": null, '
    b'"outcome": "spawn_failed", "pid": null, "scheduledTime": "2026-05-01T04:00:00Z", '
    b'"startedAt": "2026-05-01T04:00:00Z", "stderr": "sh: nope\\n", "stderrDropped": 0, '
    b'"stdout": null, "stdoutDropped": 0}], "version": 1}'
)

T1 = datetime(2026, 5, 1, 3, 0, 0, tzinfo=UTC)
T2 = datetime(2026, 5, 1, 4, 0, 0, tzinfo=UTC)
FAILED = FinishedRun(
    start=RunStart(
        id=run_id("backup", T1, 2),
        job="backup",
        scheduled_time=T1,
        attempt=2,
        started_at=datetime(2026, 5, 1, 3, 0, 0, 250000, tzinfo=UTC),
        pid=4242,
        manual=False,
    ),
    outcome="failed",
    exit_code=3,
    finished_at=datetime(2026, 5, 1, 3, 0, 2, 750001, tzinfo=UTC),
    duration=2.5,
    fail_reason="nonzeroReturn (exit code 3)",
    stdout="done ✓\n",
    stderr=None,
    stdout_dropped=12,
    stderr_dropped=0,
    cpu_seconds=0.123457,
    max_rss=1478656,
)
MANUAL = FinishedRun(
    start=RunStart(
        id=run_id("backup", T2, 1),
        job="backup",
        scheduled_time=T2,
        attempt=1,
        started_at=T2,
        pid=None,
        manual=True,
    ),
    outcome="spawn_failed",
    exit_code=127,
    finished_at=T2,
    duration=0.0,
    fail_reason="cannot run",
    stdout=None,
    stderr="sh: nope\n",
    stdout_dropped=0,
    stderr_dropped=0,
)


def test_a_history_record_written_before_is_read_back_whole() -> None:
    record = decode(BEFORE)
    assert record is not None
    assert history_runs(record) == ("backup", [FAILED, MANUAL])


def test_a_history_record_written_now_is_the_same_bytes() -> None:
    assert encode(history_record("backup", [FAILED, MANUAL], limit=1 << 20)) == BEFORE


def test_durations_and_cpu_are_kept_to_the_microsecond() -> None:
    finer = replace(FAILED, duration=2.5000004, cpu_seconds=0.1234567)
    assert (run_record(finer)["duration"], run_record(finer)["cpuSeconds"]) == (2.5, 0.123457)


def test_a_run_written_by_an_older_daemon_without_the_later_keys_is_read() -> None:
    # before pid, manual, the dropped counts, cpuSeconds and maxRss were recorded
    oldest = {
        "id": "backup@2026-05-01T03:00:00Z#1",
        "job": "backup",
        "scheduledTime": "2026-05-01T03:00:00Z",
        "attempt": 1,
        "startedAt": "2026-05-01T03:00:00Z",
        "outcome": "succeeded",
        "finishedAt": "2026-05-01T03:00:01Z",
        "duration": 1.0,
        "someKeyFromTheFuture": [1, 2],
    }
    run = read_run(oldest)
    assert run is not None
    assert (run.start.pid, run.start.manual, run.stdout_dropped, run.cpu_seconds) == (
        None,
        False,
        0,
        None,
    )
    assert run.finished_at == datetime(2026, 5, 1, 3, 0, 1, tzinfo=UTC)


def test_an_unreadable_run_is_skipped_and_the_others_kept() -> None:
    record = decode(BEFORE)
    assert record is not None
    record["runs"].insert(0, {"id": "x", "outcome": "exploded"})
    record["runs"].insert(1, {**record["runs"][1], "scheduledTime": "2026-05-01 03:00"})  # naive
    record["runs"].append("not a run")
    assert history_runs(record) == ("backup", [FAILED, MANUAL])
    assert history_runs({"job": "backup", "runs": "none"}) is None


def test_a_record_of_another_format_version_is_not_read() -> None:
    assert decode(BEFORE.replace(b'"version": 1', b'"version": 2')) is None


def test_the_record_keeps_the_newest_whole_runs_within_its_limit() -> None:
    runs = [FAILED, MANUAL, FAILED]
    one = len(json.dumps([run_record(FAILED)]))
    kept = history_record("backup", runs, limit=one + 1)["runs"]
    assert kept == [run_record(FAILED)]  # the newest, whole
    assert history_record("backup", runs, limit=1)["runs"] == [run_record(FAILED)]  # one at least


def test_utc_text_of_any_zone_and_of_either_fold() -> None:
    """The cached UTC path and the zoned one agree; the two 01:30s of New York's autumn
    change (same fields, fold 0 and 1) are two instants, an hour apart."""
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    from cronstable.ports import utc_text

    new_york = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=new_york)
    second = first.replace(fold=1)
    assert first == second  # equal as Python compares one zone's times: fields only
    assert (utc_text(first), utc_text(second)) == ("2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z")
    moment = datetime(2026, 6, 1, 12, 0, 0, 250, tzinfo=UTC)
    assert utc_text(moment) == "2026-06-01T12:00:00.000250Z"
    assert utc_text(moment.astimezone(new_york)) == utc_text(moment)
    assert utc_text(moment.replace(tzinfo=None)) == utc_text(moment)
    assert utc_text(moment + timedelta(microseconds=-250)) == "2026-06-01T12:00:00Z"


@given(
    st.text(max_size=300),
    st.one_of(st.none(), st.text(max_size=300)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**63), max_value=2**63),
)
def test_a_history_is_measured_only_when_it_may_be_too_large(
    stdout: str, reason: str | None, duration: float, rss: int
) -> None:
    """The bound that spares the measuring is never below a record's JSON length, so
    the history kept is the one measuring every time keeps."""
    run = replace(FAILED, stdout=stdout, fail_reason=reason, duration=duration, max_rss=rss)
    record = run_record(run)
    assert _json_bound(record) >= len(json.dumps(record))
    runs = [run, FAILED, MANUAL] * 3
    size = len(json.dumps([run_record(r) for r in runs]))
    for limit in (size - 1, size, size // 2, 1):
        kept = history_record("backup", runs, limit)["runs"]
        assert kept == [run_record(r) for r in runs][-len(kept) :]
        assert len(kept) == 1 or len(json.dumps(kept)) <= limit
        assert (
            len(kept) == len(runs)
            or len(json.dumps([run_record(runs[-len(kept) - 1]), *kept])) > limit
        )
