"""yacron 0.19.0's own example and test configurations load unchanged.

The files live in ``shared/compat/yacron-0.19.0/`` beside the checkout (CI puts
``shared/`` in the repository's parent directory); see PROVENANCE.txt there.
Every ``*.yaml`` is validated on its own with :func:`load_path`, as
``cronstable validate FILE`` would; only ``testbrokenconfig.yaml`` must fail.
"""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cronstable.config import ConfigError, DesiredState, load_path
from cronstable.platform import local_timezone

COMPAT = Path(__file__).resolve().parent.parent.parent / "shared" / "compat" / "yacron-0.19.0"

if not COMPAT.is_dir():
    pytest.skip(
        f"yacron compatibility files not found at {COMPAT} "
        "(CI checks out shared/ beside the repository)",
        allow_module_level=True,
    )

BROKEN = "testbrokenconfig.yaml"
FILES = sorted(p.name for p in COMPAT.glob("*.yaml"))


def load(name: str) -> DesiredState:
    return load_path(str(COMPAT / name))


def test_the_expected_files_are_there() -> None:
    assert {
        "_inc.yaml",
        "readme-defaults.yaml",
        "test-tz.yaml",
        "test-utc.yaml",
        "test.yaml",
        "test_include_parent.yaml",
        "test_included_child.yaml",
        "testbrokenconfig.yaml",
        "testconfig.yaml",
        "yacrontab.yaml",
    } <= set(FILES)


@pytest.mark.parametrize("name", [n for n in FILES if n != BROKEN])
def test_yacron_file_loads(name: str) -> None:
    state = load(name)
    assert state.files[0] == name
    for job in state.jobs.values():
        assert job.digest.startswith("v1:")


def test_broken_config_fails_with_a_located_problem() -> None:
    with pytest.raises(ConfigError) as info:
        load(BROKEN)
    [problem] = info.value.problems
    assert problem.file == str(COMPAT / BROKEN)
    assert problem.line is not None and problem.line >= 3
    assert problem.column is not None
    assert problem.message.startswith("invalid YAML:")
    assert str(problem).startswith(f"{COMPAT / BROKEN}:{problem.line}:{problem.column}: ")


def test_test_yaml_jobs_and_what_inc_contributes() -> None:
    state = load("test.yaml")
    assert list(state.jobs) == ["test-01", "test-02", "test-03"]
    assert state.files == ("test.yaml", "_inc.yaml")
    # _inc.yaml contributes the web and logging sections and the defaults
    assert state.web is not None
    assert state.web.listen == ["http://127.0.0.1:8080", "unix:///tmp/yacron.sock"]
    assert state.logging is not None
    assert state.logging.dict_config()["disable_existing_loggers"] is False
    assert state.logging.dict_config()["root"] == {"level": "INFO", "handlers": ["console"]}
    for job in state.jobs.values():
        assert job.config.shell == "/bin/bash"
        assert job.config.concurrency_policy == "Allow"
        assert job.config.statsd is not None
        assert job.config.statsd.port == 8125
        assert job.config.statsd.prefix == "my.cron.jobs.prefix.test01"
        report = job.config.on_permanent_failure.report
        assert report.sentry.level == "warning"
        assert report.sentry.extra == {"foo": "bar", "zbr": "123"}
        assert report.sentry.dsn.value is None
        assert report.mail.to == ["example@bar.com"]
        assert report.mail.smtp_port == 10025
        assert report.mail.body == "{{stderr}}\n\n(exit code: {{exit_code}})\n"


def test_test_yaml_job_details() -> None:
    state = load("test.yaml")
    one, two, three = (state.jobs[n] for n in ("test-01", "test-02", "test-03"))
    assert one.config.command == ["echo", "foobar"]
    assert one.schedule.text == "@reboot"
    assert one.config.capture_stdout is True
    assert one.config.fails_when.produces_stdout is True
    assert one.config.fails_when.produces_stderr is True  # from _inc.yaml's defaults
    assert one.config.on_failure.retry.maximum_retries == 3
    assert one.config.on_failure.retry.maximum_delay == 30
    assert dict(one.environment) == {"FOO": "foo", "BAR": "bar"}
    # the included defaults' environment, then the job's own entries (last wins)
    assert dict(two.environment) == {"FOO": "xpto", "BAR": "bar", "ZBR": "blah"}
    assert two.config.command.startswith('echo "hello" 1>&2\n')  # type: ignore[union-attr]
    assert two.schedule.text == "0 */2 * * * * *"
    assert three.config.kill_timeout == 0.5
    assert three.config.execution_timeout == 1
    assert three.schedule.text == "0 * * * * * *"


def test_mail_to_comma_string_becomes_two_recipients() -> None:
    mail = load("test.yaml").jobs["test-01"].config.on_success.report.mail
    assert mail.to == ["example@bar.com", "zzz@sleep.com"]
    assert mail.from_ == "example@foo.com"
    assert mail.smtp_host == "127.0.0.1"
    assert mail.subject == (
        "Cron job '{{name}}' {% if success %}completed{% else %}failed{% endif %}"
    )


def test_readme_defaults() -> None:
    state = load("readme-defaults.yaml")
    assert state.jobs["test-01"].config.shell == "/bin/bash"
    assert state.jobs["test-02"].config.shell == "/bin/sh"
    for job in state.jobs.values():
        assert dict(job.environment) == {"PATH": "/bin:/usr/bin"}
        assert job.config.utc is False
        assert job.timezone == local_timezone()


def test_include_parent_and_child() -> None:
    state = load("test_include_parent.yaml")
    assert list(state.jobs) == ["common-task", "test-03"]
    # the child's jobs keep the child's defaults; the parent's jobs get them too
    assert state.jobs["common-task"].config.shell == "/bin/ksh"
    assert state.jobs["common-task"].config.kill_timeout == 0.5
    assert state.jobs["test-03"].config.shell == "/bin/ksh"
    assert state.jobs["test-03"].schedule.text == "0 */5 * * * * *"


def test_included_child_on_its_own() -> None:
    state = load("test_included_child.yaml")
    assert list(state.jobs) == ["common-task"]
    assert state.jobs["common-task"].config.shell == "/bin/ksh"


def test_timezone_file() -> None:
    job = load("test-tz.yaml").jobs["test-01"]
    assert job.config.timezone == "America/Los_Angeles"
    assert job.timezone == ZoneInfo("America/Los_Angeles")
    assert job.config.utc is False


def test_utc_false_file() -> None:
    job = load("test-utc.yaml").jobs["test-01"]
    assert job.config.utc is False
    assert job.timezone == local_timezone()
    assert job.config.command == 'echo "heállo€"'


def test_testconfig_and_yacrontab() -> None:
    three = load("testconfig.yaml").jobs["test-03"]
    assert three.config.shell == "/bin/bash"
    assert three.config.kill_timeout == 0.5
    one = load("yacrontab.yaml").jobs["test-01"]
    assert dict(one.environment) == {"PYTHONIOENCODING": "utf-8"}
    assert one.config.capture_stdout is True


def test_the_whole_folder_as_one_directory_reports_every_collision() -> None:
    # yacron's examples are separate configurations: loaded as one directory, job
    # names collide (test-01 is in several files), web is defined more than once and
    # the broken file fails; every one of these is reported in the same error
    with pytest.raises(ConfigError) as info:
        load_path(str(COMPAT))
    found = info.value.problems
    assert BROKEN in {Path(p.file).name for p in found}
    assert any("job 'test-01' is defined twice" in p.message for p in found)
    assert any("a second 'web' section" in p.message for p in found)
    assert any(
        "test_included_child.yaml is included by " in p.message
        and "test_include_parent.yaml:2 and loaded directly" in p.message
        for p in found
    )
    assert all(p.line is not None for p in found)
