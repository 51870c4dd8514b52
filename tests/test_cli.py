"""The command line, run as a real process the way operators and CI run it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "gitops-repo"


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_version() -> None:
    from cronstable import __version__

    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == __version__


def test_validate_example_repository() -> None:
    result = cli("validate", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "valid, 10 jobs" in result.stdout


def test_validate_reports_every_problem_with_location(tmp_path: Path) -> None:
    write(
        tmp_path / "jobs" / "backup.yaml",
        """\
        jobs:
          - name: a
            command: echo a
            schedule: "* * * * *"
          - name: b
            command: echo b
            schedule: "*/5 * * * *"
          - name: backup
            command: pg_dump
            schedule: '61 * * * *'
            killTimout: 3
        """,
    )
    result = cli("validate", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"{tmp_path}: invalid (2 problems)"
    assert (
        f"{tmp_path}/jobs/backup.yaml:10:5: jobs[2].schedule: '61 * * * *': "
        "minute 61 is out of range 0-59"
    ) in result.stderr
    assert (
        f"{tmp_path}/jobs/backup.yaml:11:5: jobs[2]: unknown key 'killTimout' "
        "(did you mean 'killTimeout'?)"
    ) in result.stderr


def test_validate_each_path_is_its_own_config(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n")
    bad = write(tmp_path / "bad.yaml", "jobs: [{name: x, command: 'true'}]\n")
    result = cli("validate", str(good), str(bad))
    assert result.returncode == 1
    assert f"{good}: valid, 1 job" in result.stdout
    assert f"{bad}: invalid (1 problem)" in result.stderr
    assert "missing required key 'schedule'" in result.stderr


def test_yacron_validate_flags(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n")
    assert cli("-c", str(good), "-v").returncode == 0
    assert cli("-c", str(good), "--validate-config").returncode == 0
    assert cli("-c", str(tmp_path / "missing.yaml"), "-v").returncode == 1


def test_missing_path_is_invalid(tmp_path: Path) -> None:
    result = cli("validate", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert "no such file or directory" in result.stderr


def test_job_set_id_prints_the_id_alone() -> None:
    result = cli("job-set-id", str(EXAMPLE))
    assert result.returncode == 0
    (line,) = result.stdout.splitlines()
    assert line.startswith("v1:") and len(line) == len("v1:") + 64


def test_job_set_id_ignores_job_order(tmp_path: Path) -> None:
    one = write(
        tmp_path / "one.yaml",
        """\
        jobs:
          - {name: a, command: echo a, schedule: "@daily"}
          - {name: b, command: echo b, schedule: "@hourly"}
        """,
    )
    two = write(
        tmp_path / "two.yaml",
        """\
        # same jobs, other order and style
        jobs:
          - name: b
            schedule: "@hourly"
            command: echo b
          - schedule: "@daily"
            name: a
            command: echo a
        """,
    )
    assert cli("job-set-id", str(one)).stdout == cli("job-set-id", str(two)).stdout


def test_next_output_is_chronological(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml",
        """\
        jobs:
          - {name: lisbon, command: "true", schedule: "30 1 * * *", timezone: Europe/Lisbon}
          - {name: utc, command: "true", schedule: "0 12 * * *"}
          - {name: boot, command: "true", schedule: "@reboot"}
          - {name: off, command: "true", schedule: "* * * * *", enabled: false}
        """,
    )
    result = cli("next", str(config), "-n", "2", "--after", "2026-10-24T12:00:00")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "boot\t@reboot",
        # fall-back night in Lisbon: 01:30 runs once, at its first occurrence (summer time)
        "lisbon\t2026-10-25T01:30:00+01:00",
        "utc\t2026-10-25T12:00:00+00:00",
        "lisbon\t2026-10-26T01:30:00+00:00",
        "utc\t2026-10-26T12:00:00+00:00",
    ]


def test_next_after_with_offset_and_bad_after(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '0 * * * *'}]\n"
    )
    result = cli("next", str(config), "--after", "2026-01-01T10:30:00+02:00")
    assert result.stdout == "x\t2026-01-01T09:00:00+00:00\n"
    bad = cli("next", str(config), "--after", "yesterday")
    assert bad.returncode == 2
    assert "not an ISO 8601 time" in bad.stderr


def test_next_after_outside_the_schedule_years_is_an_error(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '0 * * * *'}]\n"
    )
    for after in ("1969-12-31T23:00:00Z", "1900-06-01T00:00:00", "2100-01-01T00:00:00"):
        bad = cli("next", str(config), "--after", after)
        assert bad.returncode == 2, after
        assert bad.stdout == ""
        assert "is outside 1970-2099" in bad.stderr
    # the edges still answer
    assert cli("next", str(config), "--after", "1970-01-01T00:00:00Z").stdout == (
        "x\t1970-01-01T01:00:00+00:00\n"
    )
    assert cli("next", str(config), "--after", "2099-12-31T23:00:00Z").stdout == ""


def test_schema_command_prints_the_committed_schema() -> None:
    result = cli("schema")
    assert result.returncode == 0
    assert result.stdout == (REPO / "schema" / "cronstable.schema.json").read_text()


def test_usage_errors_exit_2() -> None:
    assert cli("frobnicate").returncode == 2
    assert cli("next", str(EXAMPLE), "-n", "0").returncode == 2


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["validate", str(EXAMPLE)],
        ["schema"],
        ["next", str(EXAMPLE)],
        ["job-set-id", str(EXAMPLE)],
        ["-c", str(EXAMPLE), "-v"],
        ["--third-party-licenses"],
        # client commands, against a port nothing listens on (refused at once)
        ["pause", "job", "--reason", "r", "--url", "http://127.0.0.1:9"],
        ["resume", "job", "--url", "http://127.0.0.1:9"],
        ["status", "--fleet", "--url", "http://127.0.0.1:9"],
        [
            "backfill",
            "job",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--url",
            "http://127.0.0.1:9",
        ],
    ],
    ids=lambda a: " ".join(a[:1]),
)
def test_fast_paths_do_not_import_asyncio_or_aiohttp(args: list[str]) -> None:
    probe = textwrap.dedent(
        f"""\
        import contextlib, io, sys
        from cronstable.__main__ import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main({args!r})
            except SystemExit:
                pass
        print(sorted(m for m in ("asyncio", "aiohttp", "mcp") if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("command", ["validate", "next"])
def test_a_configuration_with_mcp_enabled_loads_without_the_sdk(
    command: str, tmp_path: Path
) -> None:
    config = write(
        tmp_path / "c.yaml",
        "web:\n  listen: [http://127.0.0.1:0]\n  mcp: {enabled: true}\n"
        "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n",
    )
    probe = textwrap.dedent(
        f"""\
        import contextlib, io, sys
        from cronstable.__main__ import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main([{command!r}, {str(config)!r}])
            except SystemExit as exc:
                assert exc.code in (0, None), exc.code
        print(sorted(m for m in ("asyncio", "aiohttp", "mcp") if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_diff_of_two_paths(tmp_path: Path) -> None:
    old = write(
        tmp_path / "old" / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n"
    )
    new = write(
        tmp_path / "new" / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '@hourly'}]\n"
    )
    same = cli("diff", str(old.parent), str(old.parent))
    assert same.returncode == 0 and same.stdout.startswith("No changes")
    changed = cli("diff", str(old.parent), str(new.parent), "--at", "2026-01-01T00:30:00")
    assert changed.returncode == 1
    assert "~ job x (@hourly)" in changed.stdout
    assert "next after:  2026-01-01T01:00:00+00:00" in changed.stdout


def test_diff_with_an_invalid_old_side_compares_with_nothing(tmp_path: Path) -> None:
    old = write(tmp_path / "old" / "c.yaml", "jobs: [{name: x, command: 'true'}]\n")
    new = write(
        tmp_path / "new" / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n"
    )
    result = cli("diff", str(old.parent), str(new.parent))
    assert result.returncode == 1
    assert "missing required key 'schedule'" in result.stderr
    assert "comparing with nothing" in result.stderr
    assert "+ job x (@daily)" in result.stdout
    broken_new = cli("diff", str(new.parent), str(old.parent))
    assert broken_new.returncode == 2


def test_run_rejects_an_unknown_log_level_without_a_traceback(tmp_path: Path) -> None:
    result = cli("run", str(tmp_path), "-l", "bogus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "invalid choice" in result.stderr


def test_validate_prints_warnings_and_stays_valid(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml",
        """\
        jobs:
          - name: a
            command: "true"
            schedule: "@daily"
            onFailure:
              report:
                sentry:
                  dsn: {fromFile: /run/dsn, fromEnvVar: SENTRY_DSN}
        """,
    )
    result = cli("validate", str(config))
    assert result.returncode == 0, result.stderr
    assert "valid, 1 job" in result.stdout
    assert result.stderr.splitlines() == [
        f"  warning: {config}:8:11: jobs[0].onFailure.report.sentry.dsn: fromFile and fromEnvVar "
        "are both set; only fromFile is used (the first set of value, fromFile, fromEnvVar wins)"
    ]


def test_diff_shows_what_the_apply_runs_now(tmp_path: Path) -> None:
    """A new @reboot job: no run at a reload, one at a daemon start, flagged in every format."""
    old = write(
        tmp_path / "old" / "c.yaml", "jobs: [{name: x, command: 'true', schedule: '@daily'}]\n"
    )
    new = write(
        tmp_path / "new" / "c.yaml",
        "jobs:\n  - {name: x, command: 'true', schedule: '@daily'}\n"
        "  - {name: warm, command: 'true', schedule: '@reboot'}\n",
    )
    args = ("diff", str(old.parent), str(new.parent), "--at", "2026-03-29T00:30:00")
    text = cli(*args)
    assert text.returncode == 1, text.stderr
    assert "  ! at apply (start): runs now: @reboot: once per boot of each machine" in text.stdout
    assert "runs now: 0 at a reload, 1 at a start" in text.stdout
    body = json.loads(cli(*args, "--format", "json").stdout)
    assert body["timeEffects"]["runsNow"] == {"reload": 0, "start": 1}
    assert (
        "- **runs now** · job `warm` · at a daemon start"
        in cli(*args, "--format", "markdown").stdout
    )
