"""``cronstable import crontab FILE`` (issue 11 item 2): the YAML it prints loads to
the same job-set id as the crontab itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cronstable.config import load_path

REPO = Path(__file__).resolve().parent.parent

CRONTAB = r"""# cronstable: include=_defaults.yaml
SHELL=/bin/bash
PATH = "/usr/local/bin:/usr/bin:/bin"
MAILTO=ops@example.com
*/5 * * * * echo hi
# cronstable: name=report concurrencyPolicy=Forbid onFailure.retry.maximumRetries=3
# cronstable: environment=[{key: A, value: 'b c'}] failsWhen.producesStderr=true
0 3 * * mon-fri /usr/bin/report --all % line1%line2 \% x
CRON_TZ=America/New_York
@every 90s date
MAILTO=
H H * * * backup
TZ=Europe/Paris 0 9 * * friday weekly
# cronstable: fields=7 user-column
*/20 * * * * * * nobody tick
*/20 * * * * * * nobody tick
"""

DEFAULTS = """defaults:
  captureStdout: true
  onFailure: {report: {mail: {from: cron@example.com, smtpHost: mx.example.com}}}
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_import_then_load_gives_the_same_job_set_id(tmp_path: Path) -> None:
    original = tmp_path / "original"
    original.mkdir()
    (original / "team.crontab").write_text(CRONTAB)
    (original / "_defaults.yaml").write_text(DEFAULTS)
    result = cli("import", "crontab", "team.crontab", cwd=original)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# yaml-language-server: $schema=cronstable.schema.json\n")
    assert "stdin: |" in result.stdout
    converted = tmp_path / "converted"
    converted.mkdir()
    (converted / "team.yaml").write_text(result.stdout)
    (converted / "_defaults.yaml").write_text(DEFAULTS)
    direct = load_path(str(original))
    imported = load_path(str(converted))
    assert sorted(imported.jobs) == sorted(direct.jobs)
    assert imported.job_set_id == direct.job_set_id
    # and so does every job, setting by setting
    for name, job in direct.jobs.items():
        assert imported.jobs[name].digest == job.digest, name


def test_import_warns_for_a_crontab_without_a_zone_and_refuses_a_broken_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "crontab").write_text("0 1 * * * a\n")
    result = cli("import", "crontab", "crontab", cwd=tmp_path)
    assert result.returncode == 0
    assert "crontab:1:1: no time zone is set" in result.stderr
    (tmp_path / "crontab").write_text("CRON_TZ=UTC\n61 1 * * * a\n")
    bad = cli("import", "crontab", "crontab", cwd=tmp_path)
    assert bad.returncode == 1 and bad.stdout == ""
    assert "crontab:2:1: jobs[0].schedule: 'CRON_TZ=UTC 61 1 * * *': minute 61" in bad.stderr


def test_diff_shows_what_h_resolves_to(tmp_path: Path) -> None:
    old = tmp_path / "old"
    new = tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "c.yaml").write_text("jobs: []\n")
    (new / "c.yaml").write_text("jobs: [{name: spread, command: 'true', schedule: 'H H * * *'}]\n")
    from cronstable.schedule import parse_schedule

    resolved = parse_schedule("H H * * *", "spread").text
    for fmt in ("text", "json", "markdown"):
        result = cli("diff", str(old), str(new), "--format", fmt, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert f"H H * * * (resolved: {resolved})" in result.stdout, fmt
    shown = cli("next", str(new), cwd=tmp_path)
    assert f"# spread: H H * * * resolves to {resolved}" in shown.stderr
