"""Crontab files as configuration (issue 11 item 1): what each line becomes, the
names, Vixie's ``%``, directives, includes, zones, MAILTO, and errors with
file:line:column.  Jobs are loaded through the real loader; one runs for real."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cronstable.config import ConfigError, DesiredState, DiskTree, MemoryTree, load
from cronstable.config.crontab import is_crontab_name, split_stdin
from cronstable.runtime.process import JobProcess
from cronstable.schedule import parse_schedule

REPO = Path(__file__).resolve().parent.parent


def load_files(files: dict[str, str], entry: str = "") -> DesiredState:
    return load(MemoryTree({k: v.encode() for k, v in files.items()}), entry)


def problems(files: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_files(files)
    return [str(p) for p in exc.value.problems]


def short(schedule: str, command: str) -> str:
    return hashlib.sha256((schedule + command).encode()).hexdigest()[:8]


# ---------------------------------------------------------------- which files


def test_crontab_names_load_from_a_directory_and_underscore_opts_out() -> None:
    assert is_crontab_name("crontab") and is_crontab_name("ops/nightly.crontab")
    assert not is_crontab_name("crontab.txt") and not is_crontab_name(".crontab")
    state = load_files(
        {
            "crontab": "0 1 * * * a\n",
            "team/db.crontab": "0 2 * * * b\n",
            "_off.crontab": "0 3 * * * c\n",
            "_off/crontab": "0 4 * * * d\n",
            "jobs.yaml": "jobs: [{name: y, command: 'true', schedule: '0 5 * * *'}]\n",
        }
    )
    assert sorted(state.jobs) == sorted(
        [
            f"crontab-{short('0 1 * * *', 'a')}",
            f"team-db.crontab-{short('0 2 * * *', 'b')}",
            "y",
        ]
    )
    assert set(state.files) == {"crontab", "team/db.crontab", "jobs.yaml"}


def test_disk_tree_lists_crontabs(tmp_path: Path) -> None:
    (tmp_path / "crontab").write_text("CRON_TZ=UTC\n*/5 * * * * echo hi\n")
    state = load(DiskTree(tmp_path))
    (job,) = state.jobs.values()
    assert job.config.command == "echo hi" and job.file == "crontab" and job.line == 2


# ---------------------------------------------------------------- names


def test_names_hash_schedule_and_command_so_inserting_a_line_renames_nothing() -> None:
    before = load_files({"crontab": "0 1 * * * a\n0 2 * * * b\n"})
    after = load_files({"crontab": "0 0 * * * new\n0 1 * * * a\n0 2 * * * b\n"})
    assert set(before.jobs) < set(after.jobs)
    for name in before.jobs:
        assert before.jobs[name].digest == after.jobs[name].digest


def test_identical_lines_are_numbered() -> None:
    state = load_files({"x/y.crontab": "* * * * * a\n* * * * * a\n* * * * * a\n"})
    base = f"x-y.crontab-{short('* * * * *', 'a')}"
    assert list(state.jobs) == [base, f"{base}-2", f"{base}-3"]


def test_h_hashes_the_derived_name() -> None:
    state = load_files({"crontab": "H H * * * backup\n"})
    ((name, job),) = state.jobs.items()
    assert job.schedule == parse_schedule("H H * * *", name)


# ---------------------------------------------------------------- lines


def test_fields_aliases_seconds_and_user_column() -> None:
    state = load_files(
        {
            "crontab": (
                "@daily   a b  c\n"
                "@every 90s tick\n"
                "# cronstable: fields=7\n"
                "*/10 * * * * * * seconds\n"
                "# cronstable: fields=5 user-column\n"
                "0 3 * * * backup /usr/bin/dump --all\n"
            )
        }
    )
    jobs = list(state.jobs.values())
    assert [j.config.command for j in jobs] == ["a b  c", "tick", "seconds", "/usr/bin/dump --all"]
    assert jobs[1].schedule.interval == 90
    assert jobs[2].schedule.has_seconds
    assert jobs[3].config.user == "backup" and jobs[0].config.user is None


def test_the_six_field_year_form_is_not_read() -> None:
    (job,) = load_files({"crontab": "0 0 1 1 * 2030 cmd\n"}).jobs.values()
    assert job.config.command == "2030 cmd"  # five fields, then the command


def test_environment_lines_shell_and_tz() -> None:
    state = load_files(
        {
            "crontab": (
                "SHELL=/bin/bash\n"
                "A = 'quoted value'\n"
                "0 1 * * * first\n"
                'A="again"\n'
                "TZ=Asia/Tokyo\n"
                "0 2 * * * second\n"
            )
        }
    )
    first, second = state.jobs.values()
    env = {e.key: e.value for e in first.config.environment}
    assert first.config.shell == "/bin/bash"
    assert env == {"SHELL": "/bin/bash", "A": "quoted value"}
    env2 = {e.key: e.value for e in second.config.environment}
    assert env2 == {"SHELL": "/bin/bash", "A": "again", "TZ": "Asia/Tokyo"}
    assert second.timezone == UTC  # TZ= is only a variable


def test_cron_tz_lines_prefixes_and_defaults() -> None:
    state = load_files(
        {
            "_d.yaml": "defaults: {timezone: Asia/Tokyo}\n",
            "crontab": (
                "# cronstable: include=_d.yaml\n"
                "0 1 * * * from-defaults\n"
                "TZ=Europe/Paris 0 2 * * * prefix\n"
                "CRON_TZ=America/New_York\n"
                "0 3 * * * from-cron-tz\n"
                "CRON_TZ=Europe/Lisbon 0 4 * * * prefix-wins\n"
            ),
        }
    )
    zones = {j.config.command: j.timezone for j in state.jobs.values()}
    assert zones == {
        "from-defaults": ZoneInfo("Asia/Tokyo"),
        "prefix": ZoneInfo("Europe/Paris"),
        "from-cron-tz": ZoneInfo("America/New_York"),
        "prefix-wins": ZoneInfo("Europe/Lisbon"),
    }
    assert not state.warnings


def test_a_crontab_without_a_zone_is_read_in_utc_with_one_warning() -> None:
    state = load_files({"crontab": "0 1 * * * a\n0 2 * * * b\n"})
    assert all(j.timezone == UTC for j in state.jobs.values())
    (warning,) = state.warnings
    assert str(warning).startswith("crontab:1:1: no time zone is set")


def test_mailto_sets_and_clears_the_failure_mail_and_warns_once() -> None:
    files = {
        "crontab": (
            "CRON_TZ=UTC\n"
            "0 1 * * * none\n"
            "MAILTO=ops@example.com, dev@example.com\n"
            "0 2 * * * mailed\n"
            "0 3 * * * mailed-too\n"
            "MAILTO=\n"
            "0 4 * * * cleared\n"
        )
    }
    state = load_files(files)
    to = {j.config.command: j.config.on_failure.report.mail.to for j in state.jobs.values()}
    assert to == {
        "none": None,
        "mailed": ["ops@example.com", "dev@example.com"],
        "mailed-too": ["ops@example.com", "dev@example.com"],
        "cleared": None,
    }
    # once for the file (this rule); the reporting rule adds one per job whose
    # mail sets some but not all of its required keys
    mailto = [str(w) for w in state.warnings if "MAILTO sets mail.to" in str(w)]
    assert len(mailto) == 1
    assert mailto[0].startswith("crontab:4:1: MAILTO sets mail.to, but no mail.from")
    partial = [str(w) for w in state.warnings if "this reporter stays off" in str(w)]
    assert len(partial) == 2 and len(state.warnings) == 3
    files["_mail.yaml"] = (
        "defaults: {onFailure: {report: {mail: {from: cron@example.com, smtpHost: mx}}}}\n"
    )
    files["crontab"] = "# cronstable: include=_mail.yaml\n" + files["crontab"]
    # from and smtpHost reach every line now: no MAILTO warning; the lines without a
    # MAILTO get the reporting rule's warning (their merged mail has no `to`)
    warnings = [str(w) for w in load_files(files).warnings]
    assert not [w for w in warnings if "MAILTO" in w]
    assert len(warnings) == 2 and all("but not to" in w for w in warnings)


def test_stderr_is_not_a_failure_unless_defaults_say_so() -> None:
    state = load_files(
        {
            "_strict.yaml": "defaults: {failsWhen: {producesStderr: true}}\n",
            "a.crontab": "CRON_TZ=UTC\n0 1 * * * a\n",
            "b.crontab": "# cronstable: include=_strict.yaml\nCRON_TZ=UTC\n0 1 * * * b\n",
        }
    )
    by_cmd = {j.config.command: j.config.fails_when.produces_stderr for j in state.jobs.values()}
    assert by_cmd == {"a": False, "b": True}


# ---------------------------------------------------------------- % and stdin


@pytest.mark.parametrize(
    ("written", "command", "stdin"),
    [
        ("echo hi", "echo hi", None),
        ("cat%", "cat", ""),
        ("mail -s x root%line one%line two%", "mail -s x root", "line one\nline two\n"),
        ("date +\\%Y-\\%m", "date +%Y-%m", None),
        ("printf 'a\\b'%x\\%y\\z%", "printf 'a\\b'", "x%y\\z\n"),
        ("a%b\\", "a", "b\\"),
        ("a\\\\%b", "a\\\\", "b"),  # an escaped backslash does not escape the %
    ],
)
def test_percent_is_split_exactly_as_vixie(written: str, command: str, stdin: str | None) -> None:
    assert split_stdin(written) == (command, stdin)


def vixie_reference(cmd: str) -> tuple[str, str | None]:
    """A transcription of Vixie cron 4.1's do_command.c loops, byte by byte."""
    buf = list(cmd) + ["\0"]
    escaped = False
    p = 0
    i = 0
    stdin: str | None = None
    while buf[i] != "\0":
        ch = buf[i]
        if p != i:
            buf[p] = ch
        if escaped:
            if ch == "%":
                p -= 1
                buf[p] = ch
            escaped = False
            i += 1
            p += 1
            continue
        if ch == "\\":
            escaped = True
            i += 1
            p += 1
            continue
        if ch == "%":
            stdin_start = i + 1
            stdin_src = "".join(buf[stdin_start:-1])
            stdin = ""
            esc = False
            for c in stdin_src:
                if esc:
                    if c != "%":
                        stdin += "\\"
                elif c == "%":
                    c = "\n"
                esc = c == "\\"
                if not esc:
                    stdin += c
            if esc:
                stdin += "\\"
            break
        i += 1
        p += 1
    return "".join(buf[:p]), stdin


def test_percent_matches_a_transcription_of_vixie_on_every_short_string() -> None:
    import itertools

    for n in range(7):
        for chars in itertools.product("a%\\", repeat=n):
            text = "".join(chars)
            assert split_stdin(text) == vixie_reference(text), text


@pytest.mark.asyncio
@pytest.mark.timeout(15)
async def test_stdin_reaches_the_command() -> None:
    state = load_files(
        {
            "crontab": "# cronstable: captureStdout=true\n* * * * * "
            f"{sys.executable} -c 'import sys; print(repr(sys.stdin.read()))'"
            "%one%two \\% three\n"
        }
    )
    (job,) = state.jobs.values()
    assert job.config.stdin == "one\ntwo % three"
    proc = JobProcess(job, scheduled_time=datetime(2026, 1, 1, tzinfo=UTC), attempt=1)
    await proc.start()
    result = await proc.wait()
    assert result.stdout == repr("one\ntwo % three")


# ---------------------------------------------------------------- directives


def test_directives_set_job_options_with_dotted_keys_and_flow_values() -> None:
    state = load_files(
        {
            "crontab": (
                "CRON_TZ=UTC\n"
                "A=1\n"
                "# cronstable: name=report concurrencyPolicy=Forbid executionTimeout=300\n"
                "# cronstable: onFailure.retry.maximumRetries=3\n"
                "# cronstable: environment=[{key: B, value: 'b c'}]\n"
                "0 3 * * * report\n"
                "0 4 * * * plain\n"
            )
        }
    )
    report = state.jobs["report"].config
    assert report.concurrency_policy == "Forbid" and report.execution_timeout == 300
    assert report.on_failure.retry.maximum_retries == 3
    assert [(e.key, e.value) for e in report.environment] == [("A", "1"), ("B", "b c")]
    (plain,) = [j for n, j in state.jobs.items() if n != "report"]
    assert plain.config.concurrency_policy == "Allow"


def test_errors_carry_file_line_and_column() -> None:
    found = problems(
        {
            "ops/crontab": (
                "CRON_TZ=UTC\n"
                "# cronstable: concurrencyPolicy=Sometimes\n"
                "0 3 * * * a\n"
                "61 * * * * b\n"
                "# cronstable: executionTimeout=[1\n"
                "0 4 * * * c\n"
                "0 5 * *\n"
                "# cronstable: bad-directive\n"
                "0 6 * * * d\n"
                "# cronstable: name=orphan\n"
            )
        }
    )
    assert any(p.startswith("ops/crontab:2:15: jobs[0].concurrencyPolicy:") for p in found), found
    assert any(
        p.startswith("ops/crontab:4:1: jobs[1].schedule:") and "minute 61" in p for p in found
    )
    assert any(p.startswith("ops/crontab:5:32: executionTimeout:") for p in found), found
    assert any(p.startswith("ops/crontab:7:1: a crontab line is 5 fields") for p in found), found
    assert any(p.startswith("ops/crontab:8:15: invalid directive 'bad-directive'") for p in found)
    assert any(p.startswith("ops/crontab:10:1: this '# cronstable:' directive") for p in found)


def test_include_is_only_read_before_the_first_line_and_must_exist() -> None:
    found = problems({"crontab": "0 1 * * * a\n# cronstable: include=_d.yaml\n"})
    assert any("crontab:2:15: include= must come before" in p for p in found), found
    found = problems({"crontab": "# cronstable: include=_missing.yaml\n0 1 * * * a\n"})
    assert any(p.startswith("crontab:1:15: include[0]: cannot include") for p in found), found


def test_prefix_with_the_jobs_own_timezone_is_an_error() -> None:
    found = problems({"crontab": "# cronstable: timezone=UTC\nTZ=Europe/Paris 0 1 * * * a\n"})
    assert any(p.startswith("crontab:2:1:") and "both set the zone" in p for p in found), found


# ---------------------------------------------------------------- the example


def test_the_example_repository_has_a_crontab_that_validates() -> None:
    crontabs = list((REPO / "examples" / "gitops-repo").rglob("*crontab"))
    assert crontabs
    result = subprocess.run(
        [sys.executable, "-m", "cronstable", "validate", "examples/gitops-repo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
