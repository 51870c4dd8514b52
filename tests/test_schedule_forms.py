"""The schedule forms other crons accept (issue 11): each against a brute-force
reference written here, or against cronsim where cronsim reads the form.

* ``@every D`` (robfig/cron, dkron): the epoch plus whole multiples of D;
* ``H`` items (Jenkins): a + sha256(name)[:8] mod (b - a + 1), ``/n`` from that value mod n;
* ``CRON_TZ=``/``TZ=`` prefixes (robfig/cron, cronie);
* full day and month names (cronexpr);
* steps larger than the field (Vixie cron: the first value only).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import cronsim
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.schedule import ScheduleError, parse_schedule

NY = ZoneInfo("America/New_York")
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cronsim_fires(expr: str, after: datetime, count: int) -> list[datetime]:
    it = cronsim.CronSim(expr, after)
    return [next(it) for _ in range(count)]


# ---------------------------------------------------------------- @every


@FAST
@example(seconds=7446, after=datetime(2020, 11, 1, tzinfo=UTC))  # a fire in NY's repeated hour
@given(
    seconds=st.integers(1, 3 * 86400),
    after=st.datetimes(datetime(1970, 1, 1), datetime(2090, 1, 1), timezones=st.just(UTC)),
)
def test_every_is_the_epoch_plus_whole_multiples(seconds: int, after: datetime) -> None:
    s = parse_schedule(f"@every {seconds}s")
    fires = s.fires(after, NY, 3)
    # brute force: walk the multiples of D from the epoch up to `after`
    k = int((after - EPOCH).total_seconds()) // seconds
    while EPOCH + timedelta(seconds=k * seconds) <= after:
        k += 1
    expected = [EPOCH + timedelta(seconds=(k + i) * seconds) for i in range(3)]
    # equal instants, whatever the zone shown: compared in UTC, since Python never finds a
    # time of a repeated hour (fold=1) equal to one in another zone (PEP 495)
    assert [f.astimezone(UTC) for f in fires] == expected
    assert all(f.tzinfo is NY for f in fires)
    assert s.is_wildcard and s.interval == seconds


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [
        ("@every 90s", 90, "@every 1m30s"),
        ("@every 1h30m", 5400, "@every 1h30m"),
        ("@EVERY 1.5h", 5400, "@every 1h30m"),
        ("@every 1500ms", None, None),
        ("@every 2000ms", 2, "@every 2s"),
        ("@every 24h", 86400, "@every 24h"),
    ],
)
def test_every_durations(text: str, seconds: int | None, canonical: str | None) -> None:
    if seconds is None:
        with pytest.raises(ScheduleError, match="must be a whole number of seconds"):
            parse_schedule(text)
        return
    s = parse_schedule(text)
    assert (s.interval, s.text) == (seconds, canonical)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("@every", "@every takes one duration"),
        ("@every 5 s", "@every takes one duration"),
        ("@every 5", "invalid @every duration '5'"),
        ("@every 1d", "invalid @every duration '1d'"),
        ("@every -5s", "invalid @every duration"),
        ("@every 0s", "at least 1s"),
    ],
)
def test_every_errors(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse_schedule(text)


def test_every_crosses_dst_in_real_time() -> None:
    # New York springs forward 2026-03-08 07:00 UTC: @every 1h keeps one real hour
    s = parse_schedule("@every 1h")
    got = s.fires(datetime(2026, 3, 8, 5, 30, tzinfo=UTC), NY, 3)
    assert [f.isoformat() for f in got] == [
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T04:00:00-04:00",
    ]


def test_every_stops_after_2099() -> None:
    assert (
        parse_schedule("@every 1h").next_fire(datetime(2099, 12, 31, 23, 30, tzinfo=UTC), UTC)
        is None
    )


# ---------------------------------------------------------------- H


def reference_h(name: str, lo: int, hi: int, step: int | None) -> set[int]:
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    v = lo + h % (hi - lo + 1)
    if step is None:
        return {v}
    return set(range(lo + (v - lo) % step, hi + 1, step))


FIELDS = {1: (0, 59), 2: (0, 23), 3: (1, 28), 4: (1, 12), 5: (0, 6)}


@FAST
@given(
    name=st.text(min_size=1, max_size=30),
    field=st.sampled_from(sorted(FIELDS)),
    form=st.sampled_from(["H", "H/n", "H(a-b)", "H(a-b)/n"]),
    data=st.data(),
)
def test_h_matches_the_formula_and_cronsim(
    name: str, field: int, form: str, data: st.DataObject
) -> None:
    lo, hi = FIELDS[field]
    step = data.draw(st.integers(1, hi - lo + 1)) if "/n" in form else None
    if "(a-b)" in form:
        lo = data.draw(st.integers(lo, hi))
        hi = data.draw(st.integers(lo, hi))
        item = f"H({lo}-{hi})"
    else:
        item = "H"
    if step is not None:
        item += f"/{step}"
    fields = ["*"] * 5  # minute, hour, day-of-month, month, day-of-week
    fields[field - 1] = item
    s = parse_schedule(" ".join(fields), name)
    # the reference values, written as a plain list for cronsim
    plain = ["*"] * 5
    plain[field - 1] = ",".join(str(v) for v in sorted(reference_h(name, lo, hi, step)))
    after = datetime(2026, 1, 1)
    ours = s.fires(after.replace(tzinfo=UTC), UTC, 5)
    assert [f.replace(tzinfo=None) for f in ours] == cronsim_fires(" ".join(plain), after, 5)


def test_h_is_stable_and_differs_by_name() -> None:
    a = parse_schedule("H H * * *", "backup-db")
    assert a == parse_schedule("H H * * *", "backup-db")
    names = [f"job-{i}" for i in range(40)]
    assert len({parse_schedule("H H * * *", n).text for n in names}) > 30  # spread


def test_h_slash_is_a_wildcard_and_h_alone_is_not() -> None:
    assert parse_schedule("H/15 * * * *", "x").is_wildcard
    assert parse_schedule("0 H/2 * * *", "x").is_wildcard
    assert not parse_schedule("H 3 * * *", "x").is_wildcard
    assert not parse_schedule("H(0-29)/10 3 * * *", "x").is_wildcard


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("H * * * *", "needs the job's name"),
        ("HH * * * *", "write H, H(a-b), H/n or H(a-b)/n"),
        ("H(5-70) * * * *", "H(a-b) needs 0 <= a <= b <= 59"),
        ("H(9-3) * * * *", "H(a-b) needs 0 <= a <= b <= 59"),
        ("0 0 * * * H", "'H' is not allowed in year"),
        ("H/0 * * * *", "step must be at least 1"),
    ],
)
def test_h_errors(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        parse_schedule(text, None if "name" in message else "j")
    assert message in str(exc.value)


# ---------------------------------------------------------------- zone prefix


def test_zone_prefix() -> None:
    s = parse_schedule("CRON_TZ=Europe/Paris 30 2 * * *")
    t = parse_schedule("TZ=Europe/Paris 30 2 * * *")
    assert s == t and s.zone == "Europe/Paris"
    assert s.text == "CRON_TZ=Europe/Paris 0 30 2 * * * *"
    assert s != parse_schedule("30 2 * * *")
    assert parse_schedule("30 2 * * *").zone is None
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Base'"):
        parse_schedule("CRON_TZ=Mars/Base 0 0 * * *")
    with pytest.raises(ScheduleError, match="followed by no schedule"):
        parse_schedule("TZ=UTC")


# ---------------------------------------------------------------- names and big steps


MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
DAYS = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]


@FAST
@given(month=st.integers(1, 12), day=st.integers(0, 6), upper=st.booleans())
def test_full_names_match_cronsim(month: int, day: int, upper: bool) -> None:
    m, d = MONTHS[month - 1], DAYS[day]
    if upper:
        m, d = m.capitalize(), d.upper()
    s = parse_schedule(f"0 12 * {m} {d}")
    after = datetime(2026, 1, 1)
    assert [f.replace(tzinfo=None) for f in s.fires(after.replace(tzinfo=UTC), UTC, 4)] == (
        cronsim_fires(f"0 12 * {month} {day}", after, 4)
    )
    assert parse_schedule(f"0 12 * {MONTHS[0]}-{MONTHS[2]} {DAYS[1]}-{DAYS[5]}") == parse_schedule(
        "0 12 * jan-mar mon-fri"
    )


@pytest.mark.parametrize(
    ("big", "values"),
    [
        ("*/100 * * * *", "0 * * * *"),
        ("5/90 * * * *", "5 * * * *"),
        ("10-20/60 * * * *", "10 * * * *"),
        ("0 */25 * * *", "0 0 * * *"),
        ("0 0 */40 * *", "0 0 1 * *"),
        ("0 0 * */13 *", "0 0 * 1 *"),
        ("0 0 * * */8", "0 0 * * 0"),
        ("0 22-2/30 * * *", "0 22 * * *"),
    ],
)
def test_steps_larger_than_the_field_keep_the_first_value(big: str, values: str) -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    ours = parse_schedule(big).fires(after, UTC, 6)
    assert ours == parse_schedule(values).fires(after, UTC, 6)
    assert ours == [
        f.replace(tzinfo=UTC) for f in cronsim_fires(values, after.replace(tzinfo=None), 6)
    ]


# ---------------------------------------------------------------- in a configuration


def load_yaml(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": text.encode()}))


def test_yaml_jobs_hash_h_from_their_own_names() -> None:
    state = load_yaml(
        "jobs:\n"
        "  - {name: a, command: 'true', schedule: 'H H * * *'}\n"
        "  - {name: b, command: 'true', schedule: 'H H * * *'}\n"
    )
    assert state.jobs["a"].schedule == parse_schedule("H H * * *", "a")
    assert state.jobs["b"].schedule == parse_schedule("H H * * *", "b")
    assert state.jobs["a"].schedule != state.jobs["b"].schedule


def test_zone_prefix_overrides_defaults_and_clashes_with_the_jobs_own_zone() -> None:
    state = load_yaml(
        "defaults: {timezone: Asia/Tokyo}\n"
        "jobs:\n"
        "  - {name: a, command: 'true', schedule: 'CRON_TZ=Europe/Paris 0 9 * * *'}\n"
        "  - {name: b, command: 'true', schedule: '0 9 * * *'}\n"
    )
    assert state.jobs["a"].timezone == ZoneInfo("Europe/Paris")
    assert state.jobs["b"].timezone == ZoneInfo("Asia/Tokyo")
    with pytest.raises(ConfigError) as exc:
        load_yaml(
            "jobs:\n"
            "  - name: a\n"
            "    command: 'true'\n"
            "    timezone: UTC\n"
            "    schedule: 'TZ=Europe/Paris 0 9 * * *'\n"
        )
    (problem,) = exc.value.problems
    assert (problem.line, problem.key) == (5, ("jobs", 0, "schedule"))
    assert "both set the zone" in problem.message
