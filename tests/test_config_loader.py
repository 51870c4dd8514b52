"""Tests of cronstable.config.loader: yacron 0.19's format, includes, defaults, errors.

Most tests load a :class:`MemoryTree` (fast, exact); a few go through
:class:`DiskTree` and :func:`load_path` on ``tmp_path``.  Expected problems are
written out as the one-line ``str(problem)`` operators see, so file, line,
column, key path and message are all checked at once.
"""

from __future__ import annotations

import os
import textwrap
from datetime import UTC
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cronstable.config import (
    ConfigError,
    DesiredState,
    DiskTree,
    MemoryTree,
    Problem,
    load,
    load_path,
)
from cronstable.platform import local_timezone


def y(text: str) -> bytes:
    return textwrap.dedent(text).encode("utf-8")


def tree(files: dict[str, str | bytes]) -> MemoryTree:
    return MemoryTree({k: y(v) if isinstance(v, str) else v for k, v in files.items()})


def ok(files: dict[str, str | bytes], entry: str = "c.yaml") -> DesiredState:
    return load(tree(files), entry)


def problems(files: dict[str, str | bytes], entry: str = "c.yaml") -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        load(tree(files), entry)
    assert info.value.problems, "a ConfigError must carry problems"
    return list(info.value.problems)


def lines(files: dict[str, str | bytes], entry: str = "c.yaml") -> list[str]:
    return [str(p) for p in problems(files, entry)]


def job(name: str, extra: str = "", schedule: str = "'* * * * *'") -> str:
    """A YAML list item of a minimal job, indented for a top-level ``jobs:``."""
    text = f"  - name: {name}\n    command: echo {name}\n    schedule: {schedule}\n"
    return text + textwrap.indent(textwrap.dedent(extra), "    ") if extra else text


def jobs(*items: str) -> str:
    return "jobs:\n" + "".join(items)


# --------------------------------------------------------------------------
# Basics and yacron's defaults
# --------------------------------------------------------------------------


def test_minimal_job() -> None:
    state = ok({"c.yaml": jobs(job("a"))})
    assert list(state.jobs) == ["a"]
    j = state.jobs["a"]
    assert j.name == "a"
    assert j.config.command == "echo a"
    assert j.file == "c.yaml"
    assert j.line == 2
    assert j.timezone is UTC
    assert dict(j.environment) == {}
    assert state.web is None and state.logging is None
    assert state.files == ("c.yaml",)
    assert j.digest.startswith("v1:")
    assert state.job_set_id.startswith("v1:")


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ("shell", "/bin/sh"),
        ("utc", True),
        ("timezone", None),
        ("environment", []),
        ("env_file", None),
        ("capture_stdout", False),
        ("capture_stderr", True),
        ("save_limit", 4096),
        ("max_line_length", 16777216),
        ("stream_prefix", "[{job_name} {stream_name}] "),
        ("fails_when.produces_stdout", False),
        ("fails_when.produces_stderr", True),
        ("fails_when.nonzero_return", True),
        ("fails_when.always", False),
        ("on_failure.retry.maximum_retries", 0),
        ("on_failure.retry.initial_delay", 1),
        ("on_failure.retry.maximum_delay", 300),
        ("on_failure.retry.backoff_multiplier", 2),
        ("on_failure.report.mail.to", None),
        ("on_failure.report.shell.command", None),
        ("on_permanent_failure.report.sentry.dsn.value", None),
        ("on_success.report.mail.smtp_port", 25),
        ("concurrency_policy", "Allow"),
        ("execution_timeout", None),
        ("kill_timeout", 30),
        ("user", None),
        ("group", None),
        ("statsd", None),
        ("enabled", True),
        ("starting_deadline_seconds", None),
        ("cluster_policy", "EveryNode"),
        ("concurrency_scope", "node"),
        ("priority", None),
    ],
)
def test_yacron_defaults(attribute: str, expected: object) -> None:
    value: object = ok({"c.yaml": jobs(job("a"))}).jobs["a"].config
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


@pytest.mark.parametrize(
    "text",
    ["", "# nothing here\n", "jobs:\n", "jobs: []\n", "defaults: {}\n", "include: []\n"],
)
def test_files_without_jobs(text: str) -> None:
    state = ok({"c.yaml": text})
    assert dict(state.jobs) == {}
    assert state.files == ("c.yaml",)


def test_jobs_keep_configuration_order_and_lines() -> None:
    state = ok({"c.yaml": jobs(job("z"), job("a"), job("m"))})
    assert list(state.jobs) == ["z", "a", "m"]
    assert [j.line for j in state.jobs.values()] == [2, 5, 8]


def test_command_as_list_and_block_text() -> None:
    text = """\
        jobs:
          - name: a
            command: [echo, "1.10", yes]
            schedule: '@daily'
          - name: b
            command: |
              echo one
              echo two
            schedule: {minute: '*/2'}
        """
    state = ok({"c.yaml": text})
    assert state.jobs["a"].config.command == ["echo", "1.10", "yes"]
    assert state.jobs["b"].config.command == "echo one\necho two\n"
    assert state.jobs["b"].schedule.text == "0 */2 * * * * *"


# --------------------------------------------------------------------------
# Scalars converted by field type
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("yes", True),
        ("Yes", True),
        ("on", True),
        ("ON", True),
        ("false", False),
        ("False", False),
        ("no", False),
        ("NO", False),
        ("off", False),
        ("Off", False),
        # strictyaml's (yacron's) extra words
        ("y", True),
        ("Y", True),
        ("1", True),
        ("n", False),
        ("N", False),
        ("0", False),
    ],
)
def test_boolean_words(word: str, value: bool) -> None:
    config = ok({"c.yaml": jobs(job("a", f"captureStdout: {word}\nenabled: {word}\n"))})
    assert config.jobs["a"].config.capture_stdout is value
    assert config.jobs["a"].config.enabled is value


@pytest.mark.parametrize("word", ["maybe", "2", "-1", "yess", "nope", "'t rue'", "[]", "{}"])
def test_not_a_boolean(word: str) -> None:
    assert len(lines({"c.yaml": jobs(job("a", f"captureStdout: {word}\n"))})) == 1


def test_not_a_boolean_message() -> None:
    assert lines({"c.yaml": jobs(job("a", "captureStdout: maybe\n"))}) == [
        "c.yaml:5:5: jobs[0].captureStdout: expected true or false "
        "(also yes/no, on/off, y/n, 1/0), got 'maybe'"
    ]


def test_text_values_stay_as_written() -> None:
    extra = """\
        shell: yes
        environment:
          - key: VERSION
            value: 1.10
          - key: AT
            value: 12:30
          - key: FLAG
            value: yes
          - key: OCTAL
            value: 0755
          - key: EMPTY
            value: ''
          - key: NOTHING
            value:
        """
    state = ok({"c.yaml": jobs(job("a", extra))})
    assert state.jobs["a"].config.shell == "yes"
    assert dict(state.jobs["a"].environment) == {
        "VERSION": "1.10",
        "AT": "12:30",
        "FLAG": "yes",
        "OCTAL": "0755",
        "EMPTY": "",
        "NOTHING": "",
    }


def test_numbers() -> None:
    extra = """\
        killTimeout: 0.5
        executionTimeout: 1
        saveLimit: 100
        maxLineLength: 1_024
        startingDeadlineSeconds: 0
        priority: -5
        onFailure:
          retry:
            maximumRetries: -1
            initialDelay: 0.25
            maximumDelay: 1e3
            backoffMultiplier: 1.5
        """
    config = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].config
    assert config.kill_timeout == 0.5
    assert config.execution_timeout == 1.0
    assert config.save_limit == 100
    assert config.max_line_length == 1024
    assert config.starting_deadline_seconds == 0
    assert config.priority == -5
    assert config.on_failure.retry.maximum_retries == -1
    assert config.on_failure.retry.initial_delay == 0.25
    assert config.on_failure.retry.maximum_delay == 1000.0
    assert config.on_failure.retry.backoff_multiplier == 1.5


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("priority: -20", None),
        ("priority: 19", None),
        ("priority: 20", "jobs[0].priority: must be at most 19, got 20"),
        ("priority: -21", "jobs[0].priority: must be at least -20, got -21"),
        ("priority: high", "jobs[0].priority: expected an integer, got 'high'"),
        ("priority: 1.5", "jobs[0].priority: expected an integer, got '1.5'"),
        ("saveLimit: 0", None),
        ("saveLimit: -1", "jobs[0].saveLimit: must be at least 0, got -1"),
        ("saveLimit: 0x10", "jobs[0].saveLimit: expected an integer, got '0x10'"),
        ("maxLineLength: 0", "jobs[0].maxLineLength: must be at least 1, got 0"),
        ("killTimeout: 0", None),
        ("killTimeout: -1", "jobs[0].killTimeout: must be at least 0, got -1"),
        ("killTimeout: soon", "jobs[0].killTimeout: expected a number, got 'soon'"),
        ("killTimeout: inf", "jobs[0].killTimeout: expected a finite number, got 'inf'"),
        ("executionTimeout: 0", "jobs[0].executionTimeout: must be more than 0, got 0"),
        ("executionTimeout: 0.001", None),
        (
            "startingDeadlineSeconds: -1",
            "jobs[0].startingDeadlineSeconds: must be at least 0, got -1",
        ),
        ("startingDeadlineSeconds: 30", None),
    ],
)
def test_number_ranges(setting: str, message: str | None) -> None:
    files = {"c.yaml": jobs(job("a", setting + "\n"))}
    if message is None:
        ok(files)
    else:
        assert lines(files) == [f"c.yaml:5:5: {message}"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("maximumRetries: -2", "must be at least -1, got -2"),
        ("initialDelay: -1", "must be at least 0, got -1"),
        ("maximumDelay: -0.5", "must be at least 0, got -0.5"),
        ("backoffMultiplier: 0.5", "must be at least 1, got 0.5"),
    ],
)
def test_retry_ranges(setting: str, message: str) -> None:
    files = {"c.yaml": jobs(job("a", f"onFailure:\n  retry:\n    {setting}\n"))}
    key = setting.split(":")[0]
    assert lines(files) == [f"c.yaml:7:9: jobs[0].onFailure.retry.{key}: {message}"]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "concurrencyPolicy: forbid",
            "jobs[0].concurrencyPolicy: expected one of Allow, Forbid, Replace, BufferOne, "
            "BufferAll, got 'forbid' "
            "(did you mean 'Forbid'?)",
        ),
        (
            "concurrencyPolicy: Replce",
            "jobs[0].concurrencyPolicy: expected one of Allow, Forbid, Replace, BufferOne, "
            "BufferAll, got 'Replce' "
            "(did you mean 'Replace'?)",
        ),
        (
            "clusterPolicy: leader",
            "jobs[0].clusterPolicy: expected one of EveryNode, Leader, PreferLeader, got 'leader' "
            "(did you mean 'Leader'?)",
        ),
        (
            "concurrencyScope: Cluster",
            "jobs[0].concurrencyScope: expected one of node, cluster, got 'Cluster' "
            "(did you mean 'cluster'?)",
        ),
        (
            "concurrencyPolicy: whatever",
            "jobs[0].concurrencyPolicy: expected one of Allow, Forbid, Replace, BufferOne, "
            "BufferAll, got 'whatever'",
        ),
    ],
)
def test_literal_choices_with_did_you_mean(setting: str, expected: str) -> None:
    assert lines({"c.yaml": jobs(job("a", setting + "\n"))}) == [f"c.yaml:5:5: {expected}"]


@pytest.mark.parametrize(
    ("setting", "attribute", "value"),
    [
        ("concurrencyPolicy: Forbid", "concurrency_policy", "Forbid"),
        ("concurrencyPolicy: Replace", "concurrency_policy", "Replace"),
        ("clusterPolicy: Leader", "cluster_policy", "Leader"),
        ("clusterPolicy: PreferLeader", "cluster_policy", "PreferLeader"),
        ("concurrencyScope: cluster", "concurrency_scope", "cluster"),
    ],
)
def test_literal_choices(setting: str, attribute: str, value: str) -> None:
    cluster = "cluster: {backend: filesystem, filesystem: {path: /mnt/shared}}\n"
    config = ok({"c.yaml": cluster + jobs(job("a", setting + "\n"))}).jobs["a"].config
    assert getattr(config, attribute) == value


# --------------------------------------------------------------------------
# Errors: exact one-line form
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            jobs(job("a", "comand: x\n")),
            ["c.yaml:5:5: jobs[0]: unknown key 'comand' (did you mean 'command'?)"],
            id="unknown-job-key",
        ),
        pytest.param(
            jobs(job("a", "CaptureStdout: true\n")),
            ["c.yaml:5:5: jobs[0]: unknown key 'CaptureStdout' (did you mean 'captureStdout'?)"],
            id="unknown-job-key-case",
        ),
        pytest.param(
            "jobz: []\n",
            ["c.yaml:1:1: unknown key 'jobz' (did you mean 'jobs'?)"],
            id="unknown-top-level-key",
        ),
        pytest.param(
            "defaults:\n  shel: /bin/bash\n",
            ["c.yaml:2:3: defaults: unknown key 'shel' (did you mean 'shell'?)"],
            id="unknown-defaults-key",
        ),
        pytest.param(
            "defaults:\n  name: x\n",
            ["c.yaml:2:3: defaults: unknown key 'name'"],
            id="name-in-defaults",
        ),
        pytest.param(
            jobs(job("a", "onFailure:\n  retry:\n    maximumRetrys: 3\n")),
            [
                "c.yaml:7:9: jobs[0].onFailure.retry: unknown key 'maximumRetrys' "
                "(did you mean 'maximumRetries'?)"
            ],
            id="unknown-nested-key",
        ),
        pytest.param(
            jobs(job("a", "onSuccess:\n  report:\n    mail:\n      smtphost: x\n")),
            [
                "c.yaml:8:11: jobs[0].onSuccess.report.mail: unknown key 'smtphost' "
                "(did you mean 'smtpHost'?)"
            ],
            id="unknown-reporter-key",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: echo\n    schedule: '61 * * * *'\n",
            ["c.yaml:4:5: jobs[0].schedule: '61 * * * *': minute 61 is out of range 0-59"],
            id="bad-schedule",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: echo\n"
            "    schedule:\n      minute: 1\n      hours: 2\n",
            ["c.yaml:6:7: jobs[0].schedule: unknown key 'hours' (did you mean 'hour'?)"],
            id="bad-schedule-field",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: echo\n    schedule: [1]\n",
            [
                "c.yaml:4:5: jobs[0].schedule: expected a cron expression or a mapping of "
                "fields, got a list"
            ],
            id="schedule-list",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: echo\n",
            ["c.yaml:2:5: jobs[0]: missing required key 'schedule'"],
            id="missing-schedule",
        ),
        pytest.param(
            "jobs:\n  - command: echo\n    schedule: '@daily'\n",
            ["c.yaml:2:5: jobs[0]: missing required key 'name'"],
            id="missing-name",
        ),
        pytest.param(
            "jobs:\n  - name: ''\n    command: x\n    schedule: '@daily'\n",
            ["c.yaml:2:5: jobs[0].name: a job name must not be empty"],
            id="empty-name",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: ''\n    schedule: '@daily'\n",
            ["c.yaml:3:5: jobs[0].command: the command must not be empty"],
            id="empty-command",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: []\n    schedule: '@daily'\n",
            ["c.yaml:3:5: jobs[0].command: a command list must not be empty"],
            id="empty-command-list",
        ),
        pytest.param(
            jobs(job("a", "shell: [bash]\n")),
            ["c.yaml:5:5: jobs[0].shell: expected text, got a list"],
            id="text-got-list",
        ),
        pytest.param(
            jobs(job("a", "failsWhen: yes\n")),
            ["c.yaml:5:5: jobs[0].failsWhen: expected a mapping, got 'yes'"],
            id="mapping-got-text",
        ),
        pytest.param(
            jobs(job("a", "environment: {A: b}\n")),
            ["c.yaml:5:5: jobs[0].environment: expected a list, got a mapping"],
            id="list-got-mapping",
        ),
        pytest.param(
            jobs(job("a", "environment:\n  - key: A\n  - {key: 'X=Y', value: 1}\n")),
            [
                "c.yaml:6:9: jobs[0].environment[0]: missing required key 'value'",
                "c.yaml:7:10: jobs[0].environment[1].key: 'X=Y' is not a valid variable name",
            ],
            id="environment-entries",
        ),
        pytest.param(
            jobs(job("a", "statsd:\n  host: h\n  port: 0\n")),
            [
                "c.yaml:5:5: jobs[0].statsd: missing required key 'prefix'",
                "c.yaml:7:7: jobs[0].statsd.port: must be at least 1, got 0",
            ],
            id="statsd",
        ),
        pytest.param(
            jobs(job("a", "streamPrefix: '[{job_name] '\n")),
            [
                "c.yaml:5:5: jobs[0].streamPrefix: invalid prefix template: "
                "expected '}' before end of string"
            ],
            id="stream-prefix",
        ),
        pytest.param(
            "- a\n- b\n",
            ["c.yaml:1:1: a configuration file must be a mapping of sections"],
            id="document-is-a-list",
        ),
        pytest.param(
            "jobs:\n  - name: a\n    command: echo\n    schedule:\n",
            [
                "c.yaml:4:5: jobs[0].schedule: empty schedule: write a cron expression "
                "(like '0 3 * * *') or a mapping of fields"
            ],
            id="empty-schedule",
        ),
        pytest.param(
            "jobs: x\n",
            ["c.yaml:1:1: jobs: expected a list of jobs"],
            id="jobs-not-a-list",
        ),
        pytest.param(
            "jobs:\n  - x\n  - [1]\n",
            [
                "c.yaml:2:5: jobs[0]: a job must be a mapping",
                "c.yaml:3:5: jobs[1]: a job must be a mapping",
            ],
            id="job-not-a-mapping",
        ),
        pytest.param(
            "defaults: [1]\n",
            ["c.yaml:1:1: defaults: expected a mapping of job settings"],
            id="defaults-not-a-mapping",
        ),
        pytest.param(
            "include: {a: 1}\n",
            ["c.yaml:1:1: include: expected a list of paths"],
            id="include-not-a-list",
        ),
        pytest.param(
            "include:\n  - [a]\n",
            ["c.yaml:2:5: include[0]: expected a path"],
            id="include-entry-not-a-path",
        ),
        pytest.param(
            "a: 1\nb: [\n",
            [
                "c.yaml:3:1: invalid YAML: while parsing a flow node, "
                "did not find expected node content"
            ],
            id="invalid-yaml",
        ),
        pytest.param(
            jobs(job("a", "shell: x\nshell: y\n")),
            ["c.yaml:6:5: jobs[0].shell: duplicate key 'shell' (first defined on line 5)"],
            id="duplicate-key",
        ),
        pytest.param(
            "a: !include x.yaml\n",
            ["c.yaml:1:4: unsupported tag '!include'"],
            id="unsupported-tag",
        ),
    ],
)
def test_error_lines(text: str, expected: list[str]) -> None:
    assert lines({"c.yaml": text}) == expected


def test_stream_prefix_placeholder_message() -> None:
    assert lines({"c.yaml": jobs(job("a", "streamPrefix: '{job} '\n"))}) == [
        "c.yaml:5:5: jobs[0].streamPrefix: unknown placeholder {job}; "
        "use {job_name} and {stream_name}"
    ]


def test_stream_prefix_with_both_placeholders() -> None:
    extra = "streamPrefix: '{stream_name}/{job_name}: '\n"
    config = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].config
    assert config.stream_prefix == "{stream_name}/{job_name}: "


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("kill_timeout: 3\n", "kill_timeout"),
        ("onSuccess: {report: {mail: {smtp_host: h}}}\n", "smtp_host"),
        ("onSuccess: {report: {mail: {from_: a@b}}}\n", "from_"),
    ],
)
def test_snake_case_attribute_names_are_unknown_keys(extra: str, key: str) -> None:
    [problem] = problems({"c.yaml": jobs(job("a", extra))})
    assert problem.message.startswith(f"unknown key {key!r}")


def test_problem_fields() -> None:
    [problem] = problems(
        {"c.yaml": jobs(job("a"), job("b", "onFailure:\n  retry:\n    initialDelay: x\n"))}
    )
    assert problem == Problem(
        "c.yaml",
        10,
        9,
        ("jobs", 1, "onFailure", "retry", "initialDelay"),
        "expected a number, got 'x'",
    )


def test_problems_in_a_subdirectory_name_the_path() -> None:
    assert lines({"teams/ops/c.yaml": jobs(job("a", "priority: 50\n"))}, "teams/ops/c.yaml") == [
        "teams/ops/c.yaml:5:5: jobs[0].priority: must be at most 19, got 50"
    ]


def test_invalid_utf8_in_a_config_file() -> None:
    [problem] = problems({"c.yaml": b"jobs: []\n# caf\xe9\n"})
    assert (problem.file, problem.line, problem.key) == ("c.yaml", 2, ())
    assert problem.message.startswith("not valid UTF-8")


def test_multi_document_config_file() -> None:
    [problem] = problems({"c.yaml": "jobs: []\n---\njobs: []\n"})
    assert (problem.file, problem.line) == ("c.yaml", 2)
    assert "single document" in problem.message


def test_bom_config_file_loads() -> None:
    state = ok({"c.yaml": b"\xef\xbb\xbf" + y(jobs(job("a")))})
    assert state.jobs["a"].line == 2


def test_cluster_and_state_sections_are_checked() -> None:
    assert lines({"c.yaml": "cluster: {}\nstate: {}\njobs: []\n"}) == [
        "c.yaml:1:1: cluster: missing required key 'backend'",
        "c.yaml:2:1: state: missing required key 'backend'",
    ]
    assert lines({"c.yaml": "state: {backend: disk}\n"}) == [
        "c.yaml:1:9: state.backend: expected one of etcd, filesystem, got 'disk'"
    ]


def test_a_state_on_etcd_needs_the_cluster_etcd() -> None:
    assert lines({"c.yaml": "state:\n  backend: etcd\n"}) == [
        "c.yaml:2:3: state.backend: backend etcd keeps the records in the etcd of the "
        "cluster section (cluster: {backend: etcd, etcd: {endpoints: [...]}}), and there is none"
    ]
    text = (
        "cluster: {backend: etcd, etcd: {endpoints: [http://127.0.0.1:2379]}}\n"
        "state: {backend: etcd, onStoreUnavailable: fail-closed}\n"
    )
    state = ok({"c.yaml": text})
    assert state.state is not None
    assert (state.state.backend, state.state.on_store_unavailable) == ("etcd", "fail-closed")


def test_a_shared_state_directory_is_said_so_and_only_for_filesystem() -> None:
    state = ok({"c.yaml": "state: {backend: filesystem, shared: true}\n"})
    assert state.state is not None and state.state.shared
    text = (
        "cluster: {backend: etcd, etcd: {endpoints: [http://127.0.0.1:2379]}}\n"
        "state: {backend: etcd, shared: true}\n"
    )
    assert lines({"c.yaml": text}) == [
        "c.yaml:2:24: state.shared: shared is for backend filesystem (a --state-dir every "
        "node mounts); the etcd store is always shared"
    ]


def test_kubernetes_leases_keep_no_state_records() -> None:
    """A Lease is no record store: with the kubernetes backend the state stays on a
    directory, and etcd state (which needs the cluster's etcd) is refused saying so."""
    cluster = "cluster: {backend: kubernetes, kubernetes: {namespace: ops}}\n"
    assert lines({"c.yaml": cluster + "state: {backend: etcd}\n"}) == [
        "c.yaml:2:9: state.backend: backend etcd keeps the records in the etcd of the "
        "cluster section (cluster: {backend: etcd, etcd: {endpoints: [...]}}), and there is "
        "none (the cluster's Kubernetes Leases keep no records: use backend filesystem, "
        "each node's --state-dir)"
    ]
    state = ok({"c.yaml": cluster + "state: {backend: filesystem}\n"})
    assert state.cluster is not None and state.cluster.kubernetes is not None
    assert (state.cluster.kubernetes.namespace, state.cluster.kubernetes.lease_name) == (
        "ops",
        "cronstable",
    )


def test_kubernetes_settings_errors_name_the_key() -> None:
    text = (
        "cluster:\n  backend: kubernetes\n  kubernetes:\n    leaseName: Cron_Lease\n"
        "    kubeconfig: kube/config\n"
    )
    assert lines({"c.yaml": text}) == [
        "c.yaml:4:5: cluster.kubernetes.leaseName: 'Cron_Lease' is not a Kubernetes Lease "
        "name (1-63 lower-case letters, digits and '-', starting and ending with a letter or "
        "digit)",
        "c.yaml:5:5: cluster.kubernetes.kubeconfig: 'kube/config' is not an absolute path "
        "(it names a file on the node, not in the repository)",
    ]
    assert lines({"c.yaml": "cluster: {backend: kubernetes}\n"}) == [
        "c.yaml:1:1: cluster: backend kubernetes needs its kubernetes: settings"
    ]


def test_a_cluster_scope_needs_a_cluster_section() -> None:
    text = 'jobs: [{name: j, command: "true", schedule: "@daily", concurrencyScope: cluster}]\n'
    assert lines({"c.yaml": text}) == [
        "c.yaml:1: concurrencyScope: job 'j': concurrencyScope cluster needs a shared "
        "store: add a cluster section (etcd, filesystem or kubernetes)"
    ]


def test_cluster_section_errors_name_the_key() -> None:
    assert lines({"c.yaml": "cluster:\n  backend: etcd\n  leaseTtl: 1\njobs: []\n"}) == [
        "c.yaml:3:3: cluster.leaseTtl: must be at least 2, got 1"
    ]
    assert lines({"c.yaml": "cluster:\n  backend: etcd\n"}) == [
        "c.yaml:1:1: cluster: backend etcd needs its etcd: settings"
    ]
    text = "cluster:\n  backend: etcd\n  etcd: {endpoints: [ftp://x]}\n"
    assert lines({"c.yaml": text}) == [
        "c.yaml:3:22: cluster.etcd.endpoints[0]: 'ftp://x' is not http://HOST:PORT or "
        "https://HOST:PORT"
    ]


def test_cluster_section_loads() -> None:
    text = (
        "cluster:\n  backend: filesystem\n  leaseTtl: 3\n  distribution: spread\n"
        "  filesystem: {path: /mnt/shared}\njobs: []\n"
    )
    state = ok({"c.yaml": text})
    assert state.cluster is not None
    assert (state.cluster.lease_ttl, state.cluster.distribution) == (3, "spread")
    assert state.cluster.elect_leader
    assert state.problem(("cluster", "filesystem", "path"), "x").line == 5


def test_all_errors_are_reported_at_once() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": jobs(job("a", "shell: [x]\n"), job("b", "priority: 100\nutc: maybe\n")),
        "b.yaml": "foo: 1\n",
        "c.yaml": "a: [\n",
        "d/e.yaml": jobs(job("e", "timezone: Mars/Olympus\n")),
        "d/f.yaml": "include: [nope.yaml]\n",
    }
    assert lines(files, "") == [
        "a.yaml:5:5: jobs[0].shell: expected text, got a list",
        "a.yaml:9:5: jobs[1].priority: must be at most 19, got 100",
        "a.yaml:10:5: jobs[1].utc: expected true or false "
        "(also yes/no, on/off, y/n, 1/0), got 'maybe'",
        "b.yaml:1:1: unknown key 'foo'",
        "c.yaml:2:1: invalid YAML: while parsing a flow node, did not find expected node content",
        "d/e.yaml:5:5: jobs[0].timezone: unknown time zone 'Mars/Olympus'",
        "d/f.yaml:1:11: include[0]: cannot include 'nope.yaml': 'd/nope.yaml' does not exist",
    ]


def test_config_error_renders_every_problem_one_per_line() -> None:
    with pytest.raises(ConfigError) as info:
        load(tree({"c.yaml": jobs(job("a", "priority: 99\nkillTimeout: x\n"))}), "c.yaml")
    assert str(info.value) == (
        "c.yaml:5:5: jobs[0].priority: must be at most 19, got 99\n"
        "c.yaml:6:5: jobs[0].killTimeout: expected a number, got 'x'"
    )


def test_missing_entry_file() -> None:
    [problem] = problems({"c.yaml": ""}, "other.yaml")
    assert problem.file == "other.yaml"
    assert "does not exist" in problem.message


# --------------------------------------------------------------------------
# Defaults and includes
# --------------------------------------------------------------------------


def test_defaults_apply_to_the_files_jobs_and_jobs_override_them() -> None:
    text = """\
        defaults:
          shell: /bin/bash
          utc: false
          environment:
            - key: PATH
              value: /bin:/usr/bin
        jobs:
          - name: a
            command: echo a
            schedule: '*/5 * * * *'
          - name: b
            command: echo b
            shell: /bin/sh
            schedule: '*/5 * * * *'
        """
    state = ok({"c.yaml": text})
    assert state.jobs["a"].config.shell == "/bin/bash"
    assert state.jobs["b"].config.shell == "/bin/sh"
    assert dict(state.jobs["a"].environment) == {"PATH": "/bin:/usr/bin"}
    assert state.jobs["a"].timezone == local_timezone()


def test_defaults_maps_merge_deeply_and_scalars_are_replaced() -> None:
    text = """\
        defaults:
          failsWhen:
            producesStdout: true
          onFailure:
            retry:
              maximumRetries: 5
              initialDelay: 10
            report:
              mail:
                from: cron@example.com
                to: ops@example.com
        jobs:
          - name: a
            command: echo
            schedule: '@daily'
            failsWhen:
              always: true
            onFailure:
              retry:
                initialDelay: 20
              report:
                mail:
                  smtpHost: mail
        """
    config = ok({"c.yaml": text}).jobs["a"].config
    assert config.fails_when.produces_stdout is True
    assert config.fails_when.always is True
    assert config.fails_when.nonzero_return is True
    assert config.on_failure.retry.maximum_retries == 5
    assert config.on_failure.retry.initial_delay == 20
    assert config.on_failure.report.mail.from_ == "cron@example.com"
    assert config.on_failure.report.mail.to == ["ops@example.com"]
    assert config.on_failure.report.mail.smtp_host == "mail"


def test_empty_mapping_in_a_job_keeps_the_defaults_mapping() -> None:
    text = "defaults:\n  failsWhen:\n    always: true\n" + jobs(job("a", "failsWhen:\n"))
    assert ok({"c.yaml": text}).jobs["a"].config.fails_when.always is True


@pytest.mark.parametrize("key", ["failsWhen", "onFailure", "onSuccess", "onPermanentFailure"])
def test_an_empty_section_means_its_defaults(key: str) -> None:
    state = ok({"c.yaml": jobs(job("a", f"{key}:\n"), job("b"))})
    assert state.jobs["a"].config == state.jobs["b"].config.model_copy(
        update={"name": "a", "command": "echo a"}
    )
    assert state.jobs["a"].digest != state.jobs["b"].digest  # names differ


def test_empty_shell_is_an_error() -> None:
    assert lines({"c.yaml": jobs(job("a", "shell: ''\n"))}) == [
        "c.yaml:5:5: jobs[0].shell: must not be empty"
    ]


def test_lists_are_appended_defaults_first() -> None:
    text = """\
        defaults:
          onFailure:
            report:
              sentry:
                fingerprint: [from-defaults]
          environment:
            - {key: A, value: defaults}
            - {key: B, value: defaults}
        jobs:
          - name: a
            command: echo
            schedule: '@daily'
            onFailure:
              report:
                sentry:
                  fingerprint: [from-job]
            environment:
              - {key: B, value: job}
              - {key: C, value: job}
        """
    j = ok({"c.yaml": text}).jobs["a"]
    assert j.config.on_failure.report.sentry.fingerprint == ["from-defaults", "from-job"]
    assert [(v.key, v.value) for v in j.config.environment] == [
        ("A", "defaults"),
        ("B", "defaults"),
        ("B", "job"),
        ("C", "job"),
    ]
    assert dict(j.environment) == {"A": "defaults", "B": "job", "C": "job"}


def test_environment_entries_resolve_by_key_last_wins() -> None:
    extra = (
        "environment:\n  - {key: A, value: '1'}\n  - {key: B, value: x}\n  - {key: A, value: '2'}\n"
    )
    assert dict(ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].environment) == {
        "A": "2",
        "B": "x",
    }


CHAIN: dict[str, str | bytes] = {
    # top includes mid and side (in that order); mid includes base
    "top.yaml": """\
        include:
          - lib/mid.yaml
          - lib/side.yaml
        defaults:
          killTimeout: 3
          environment:
            - {key: TOP, value: top}
            - {key: WHO, value: top}
        jobs:
          - name: top-job
            command: echo
            schedule: '@daily'
        """,
    "lib/mid.yaml": """\
        include: [base.yaml]
        defaults:
          shell: /bin/mid
          saveLimit: 2
          environment:
            - {key: MID, value: mid}
            - {key: WHO, value: mid}
        jobs:
          - name: mid-job
            command: echo
            schedule: '@daily'
        """,
    "lib/side.yaml": """\
        defaults:
          saveLimit: 22
          failsWhen:
            always: true
        """,
    "lib/base.yaml": """\
        defaults:
          shell: /bin/base
          captureStdout: yes
          saveLimit: 1
          failsWhen:
            producesStdout: true
          environment:
            - {key: BASE, value: base}
            - {key: WHO, value: base}
        jobs:
          - name: base-job
            command: echo
            schedule: '@daily'
        """,
}


def test_include_chain_precedence() -> None:
    state = ok(CHAIN, "top.yaml")
    top = state.jobs["top-job"].config
    # own defaults over includes' defaults, later includes over earlier ones
    assert top.kill_timeout == 3
    assert top.shell == "/bin/mid"
    assert top.save_limit == 22
    assert top.capture_stdout is True
    assert top.fails_when.produces_stdout is True and top.fails_when.always is True
    assert dict(state.jobs["top-job"].environment) == {
        "BASE": "base",
        "MID": "mid",
        "TOP": "top",
        "WHO": "top",
    }


def test_included_files_jobs_keep_their_own_defaults() -> None:
    state = ok(CHAIN, "top.yaml")
    mid = state.jobs["mid-job"]
    assert mid.file == "lib/mid.yaml"
    assert mid.config.shell == "/bin/mid"
    assert mid.config.save_limit == 2
    assert mid.config.kill_timeout == 30  # the includer's defaults do not leak in
    assert mid.config.fails_when.always is False
    assert dict(mid.environment) == {"BASE": "base", "MID": "mid", "WHO": "mid"}
    base = state.jobs["base-job"]
    assert base.config.shell == "/bin/base"
    assert base.config.save_limit == 1
    assert dict(base.environment) == {"BASE": "base", "WHO": "base"}


def test_include_chain_reads_files_and_orders_jobs() -> None:
    state = ok(CHAIN, "top.yaml")
    assert list(state.jobs) == ["base-job", "mid-job", "top-job"]
    assert state.files == ("top.yaml", "lib/mid.yaml", "lib/base.yaml", "lib/side.yaml")


def test_include_order_decides_between_included_defaults() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [a.yaml, b.yaml]\n" + jobs(job("x")),
        "d.yaml": "include: [b.yaml, a.yaml]\n" + jobs(job("y")),
        "a.yaml": "defaults:\n  shell: /bin/a\n",
        "b.yaml": "defaults:\n  shell: /bin/b\n",
    }
    assert ok(files, "c.yaml").jobs["x"].config.shell == "/bin/b"
    assert ok(files, "d.yaml").jobs["y"].config.shell == "/bin/a"


def test_include_as_a_single_string() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: a.yaml\n" + jobs(job("x")),
        "a.yaml": "defaults:\n  shell: /bin/a\n",
    }
    assert ok(files).jobs["x"].config.shell == "/bin/a"


def test_include_paths_are_relative_to_the_including_file() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [teams/ops.yaml]\n",
        "teams/ops.yaml": "include: [../shared/d.yaml, ./more/x.yaml]\n",
        "shared/d.yaml": jobs(job("d")),
        "teams/more/x.yaml": jobs(job("x")),
    }
    state = ok(files)
    assert {n: j.file for n, j in state.jobs.items()} == {
        "d": "shared/d.yaml",
        "x": "teams/more/x.yaml",
    }


def test_file_names_starting_with_underscore_can_be_included_explicitly() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [_defaults.yaml, .hidden.yaml]\n" + jobs(job("a")),
        "_defaults.yaml": "defaults:\n  shell: /bin/bash\n",
        ".hidden.yaml": jobs(job("h")),
    }
    state = ok(files)
    assert state.jobs["a"].config.shell == "/bin/bash"
    assert "h" in state.jobs


def test_an_error_from_included_defaults_is_reported_where_it_is_written() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [lib/a.yaml]\n" + jobs(job("x"), job("y")),
        "lib/a.yaml": (
            "defaults:\n  concurrencyPolicy: forbid\n  failsWhen:\n    producesStdout: maybe\n"
        ),
    }
    assert lines(files) == [
        "lib/a.yaml:2:3: defaults.concurrencyPolicy: expected one of Allow, Forbid, Replace, "
        "BufferOne, BufferAll, got 'forbid' (did you mean 'Forbid'?)",
        "lib/a.yaml:4:5: defaults.failsWhen.producesStdout: expected true or false "
        "(also yes/no, on/off, y/n, 1/0), got 'maybe'",
    ]


def test_an_error_in_an_appended_list_item_is_located_in_its_own_layer() -> None:
    text = "defaults:\n  environment:\n    - {key: A, value: a}\n" + jobs(
        job("a", "environment:\n  - {key: '', value: b}\n")
    )
    assert lines({"c.yaml": text}) == [
        "c.yaml:9:10: jobs[0].environment[0].key: '' is not a valid variable name"
    ]


def test_a_missing_key_of_a_merged_mapping_is_reported_at_the_job() -> None:
    text = "defaults:\n  statsd:\n    host: h\n    port: 1\n    prefix: p\n" + jobs(
        job("a", "statsd:\n  port: 99999\n")
    )
    assert lines({"c.yaml": text}) == [
        "c.yaml:11:7: jobs[0].statsd.port: must be at most 65535, got 99999"
    ]


# --------------------------------------------------------------------------
# Include errors
# --------------------------------------------------------------------------


def test_include_errors() -> None:
    text = """\
        include:
          - ../outside.yaml
          - /etc/cronstable.yaml
          - missing.yaml
          - ''
          - sub/../../escape.yaml
          - sub
        """
    files: dict[str, str | bytes] = {"c.yaml": text, "sub/x.yaml": jobs(job("x"))}
    assert lines(files) == [
        "c.yaml:2:5: include[0]: '../outside.yaml' leaves the configuration tree",
        "c.yaml:3:5: include[1]: '/etc/cronstable.yaml' is an absolute path; "
        "paths are relative to the file naming them",
        "c.yaml:4:5: include[2]: cannot include 'missing.yaml': 'missing.yaml' does not exist",
        "c.yaml:5:5: include[3]: empty path",
        "c.yaml:6:5: include[4]: 'sub/../../escape.yaml' leaves the configuration tree",
    ]


def test_include_escaping_from_a_subdirectory() -> None:
    files: dict[str, str | bytes] = {
        "teams/c.yaml": "include: [../../x.yaml]\n",
    }
    assert lines(files, "teams/c.yaml") == [
        "teams/c.yaml:1:11: include[0]: '../../x.yaml' leaves the configuration tree"
    ]


@pytest.mark.parametrize(
    ("files", "entry", "cycle"),
    [
        ({"c.yaml": "include: [c.yaml]\n"}, "c.yaml", "c.yaml -> c.yaml"),
        (
            {"a.yaml": "include: [b.yaml]\n", "b.yaml": "include: [a.yaml]\n"},
            "a.yaml",
            "a.yaml -> b.yaml -> a.yaml",
        ),
        (
            {
                "a.yaml": "include: [b.yaml]\n",
                "b.yaml": "include: [sub]\n",
                "sub/c.yaml": "include: [../a.yaml]\n",
            },
            "a.yaml",
            "a.yaml -> b.yaml -> sub/c.yaml -> a.yaml",
        ),
    ],
)
def test_include_cycle(files: dict[str, str | bytes], entry: str, cycle: str) -> None:
    found = [p for p in problems(files, entry) if "include cycle" in p.message]
    assert [p.message for p in found] == [f"include cycle: {cycle}"]


def test_include_cycle_with_jobs_is_reported_once_and_nothing_else() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": "include: [b.yaml]\n" + jobs(job("a")),
        "b.yaml": "include: [a.yaml]\n" + jobs(job("b")),
    }
    assert [p.message for p in problems(files, "a.yaml")] == [
        "include cycle: a.yaml -> b.yaml -> a.yaml"
    ]


def test_include_cycle_is_located_at_the_include_entry() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": "include: [b.yaml]\n",
        "b.yaml": "jobs: []\ninclude:\n  - a.yaml\n",
    }
    [problem] = problems(files, "a.yaml")
    assert problem.line is not None and problem.column is not None
    assert problem.key[:1] == ("include",)


# --------------------------------------------------------------------------
# Directories
# --------------------------------------------------------------------------

DIRECTORY: dict[str, str | bytes] = {
    "b.yaml": jobs(job("b")),
    "a.yml": jobs(job("a")),
    "_private.yaml": jobs(job("private")),
    ".hidden.yaml": jobs(job("hidden")),
    "_templates/t.yaml": jobs(job("template")),
    ".git/x.yaml": jobs(job("git")),
    "teams/z.yaml": jobs(job("z")),
    "teams/ops/y.yaml": jobs(job("y")),
    "teams/_wip/w.yaml": jobs(job("wip")),
    "teams/.cache/c.yaml": jobs(job("cache")),
    "teams/notes.txt": b"not yaml: [",
    "teams/x.YAML.bak": b"not yaml: [",
    "README.md": b"# readme",
}


def test_directory_entry_loads_every_yaml_below_in_path_order() -> None:
    state = ok(DIRECTORY, "")
    assert state.files == ("a.yml", "b.yaml", "teams/ops/y.yaml", "teams/z.yaml")
    assert list(state.jobs) == ["a", "b", "y", "z"]


@pytest.mark.parametrize(
    "files", [{}, {"README.md": b"x"}, {"_only.yaml": b"jobs: []\n", ".x/a.yaml": b"jobs: []\n"}]
)
def test_a_tree_without_configuration_files_is_an_error(files: dict[str, bytes]) -> None:
    # an empty checkout must not silently mean "run nothing"
    [problem] = problems(dict(files), "")
    assert "no configuration files" in problem.message


def test_named_directory_entry() -> None:
    state = ok(DIRECTORY, "teams")
    assert list(state.jobs) == ["y", "z"]


def test_include_a_directory() -> None:
    files: dict[str, str | bytes] = {
        "main.yaml": "include: [jobs.d]\n" + jobs(job("main")),
        "jobs.d/z.yaml": "defaults:\n  shell: /bin/z\n" + jobs(job("z")),
        "jobs.d/a/b.yaml": jobs(job("b")),
        "jobs.d/_x.yaml": jobs(job("x")),
        "jobs.d/.y/y.yaml": jobs(job("y")),
        "jobs.d/_y/y.yaml": jobs(job("y")),
    }
    state = ok(files, "main.yaml")
    assert list(state.jobs) == ["b", "z", "main"]
    assert state.files == ("main.yaml", "jobs.d/a/b.yaml", "jobs.d/z.yaml")
    # the defaults of every included file merge under the includer's
    assert state.jobs["main"].config.shell == "/bin/z"


def test_include_of_an_empty_directory_is_fine() -> None:
    files: dict[str, str | bytes] = {"c.yaml": "include: [d]\n" + jobs(job("c")), "d/_x.yaml": ""}
    assert list(ok(files).jobs) == ["c"]


# --------------------------------------------------------------------------
# Duplicates
# --------------------------------------------------------------------------


def test_duplicate_job_in_one_file() -> None:
    assert lines({"c.yaml": jobs(job("a"), job("a"))}) == [
        "c.yaml:5:5: jobs[1].name: job 'a' is defined twice; the first is at c.yaml:2"
    ]


def test_duplicate_job_in_two_files() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": jobs(job("x")),
        "b.yaml": "\n" + jobs(job("y"), job("x")),
    }
    assert lines(files, "") == [
        "b.yaml:6:5: jobs[1].name: job 'x' is defined twice; the first is at a.yaml:2"
    ]


def test_duplicate_job_through_an_include() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [lib.yaml]\n" + jobs(job("x")),
        "lib.yaml": jobs(job("x")),
    }
    assert lines(files) == [
        "c.yaml:3:5: jobs[0].name: job 'x' is defined twice; the first is at lib.yaml:2"
    ]


def test_file_reached_directly_and_by_include() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": "include: [b.yaml]\n" + jobs(job("x")),
        "b.yaml": jobs(job("y")),
    }
    assert lines(files, "") == [
        "b.yaml:2:5: jobs[0].name: job 'y' is defined twice: "
        "b.yaml is included by a.yaml:1 and loaded directly"
    ]


def test_file_included_twice_diamond() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": "include:\n  - b.yaml\n  - c.yaml\n",
        "b.yaml": "include: [d.yaml]\n",
        "c.yaml": "\ninclude: [d.yaml]\n",
        "d.yaml": jobs(job("d")),
    }
    assert lines(files, "a.yaml") == [
        "d.yaml:2:5: jobs[0].name: job 'd' is defined twice: "
        "d.yaml is included by b.yaml:1 and included by c.yaml:2"
    ]


def test_a_defaults_only_file_may_be_included_by_several_files() -> None:
    files: dict[str, str | bytes] = {
        "a.yaml": "include: [common.yaml]\n" + jobs(job("a")),
        "b.yaml": "include: [common.yaml]\n" + jobs(job("b")),
        "common.yaml": "defaults:\n  shell: /bin/bash\n",
    }
    state = ok(files, "")
    assert {j.config.shell for j in state.jobs.values()} == {"/bin/bash"}


WEB = "web:\n  listen:\n    - http://127.0.0.1:8080\n"
LOGGING = "logging:\n  version: 1\n"


@pytest.mark.parametrize(("section", "text"), [("web", WEB), ("logging", LOGGING)])
def test_second_web_or_logging_section(section: str, text: str) -> None:
    files: dict[str, str | bytes] = {"a.yaml": "\n" + text, "b.yaml": "jobs: []\n" + text}
    assert lines(files, "") == [
        f"b.yaml:2:1: {section}: a second '{section}' section; the first is in a.yaml:2"
    ]


def test_second_web_section_through_an_include() -> None:
    files: dict[str, str | bytes] = {"c.yaml": "include: [w.yaml]\n" + WEB, "w.yaml": WEB}
    assert lines(files) == ["c.yaml:2:1: web: a second 'web' section; the first is in w.yaml:1"]


def test_sections_in_a_file_reached_twice_are_not_duplicates() -> None:
    files: dict[str, str | bytes] = {"a.yaml": "include: [w.yaml]\n", "w.yaml": WEB + LOGGING}
    state = ok(files, "")
    assert state.web is not None and state.logging is not None


# --------------------------------------------------------------------------
# env_file
# --------------------------------------------------------------------------


def test_env_file_is_read_and_environment_wins() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": jobs(
            job("a", "env_file: env/a.env\nenvironment:\n  - {key: B, value: from-yaml}\n")
        ),
        "env/a.env": b'# comment\n\nA=1\n  B = 2  \nC=x=y\nQ="quoted"\nA=again\n',
    }
    state = ok(files)
    assert dict(state.jobs["a"].environment) == {
        "A": "again",
        "B": "from-yaml",
        "C": "x=y",
        "Q": '"quoted"',
    }
    assert state.files == ("c.yaml", "env/a.env")


def test_env_file_is_relative_to_the_file_naming_it() -> None:
    files: dict[str, str | bytes] = {
        "teams/c.yaml": jobs(job("a", "env_file: a.env\n"), job("b", "env_file: ../root.env\n")),
        "teams/a.env": b"WHERE=teams\n",
        "a.env": b"WHERE=root\n",
        "root.env": b"WHERE=root\n",
    }
    state = ok(files, "teams/c.yaml")
    assert dict(state.jobs["a"].environment) == {"WHERE": "teams"}
    assert dict(state.jobs["b"].environment) == {"WHERE": "root"}


def test_env_file_from_included_defaults_is_relative_to_the_included_file() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "include: [lib/d.yaml]\n" + jobs(job("a")),
        "lib/d.yaml": "defaults:\n  env_file: e.env\n  environment:\n    - {key: Y, value: yaml}\n",
        "lib/e.env": b"X=lib\nY=env\n",
        "e.env": b"X=root\n",
    }
    assert dict(ok(files).jobs["a"].environment) == {"X": "lib", "Y": "yaml"}


def test_job_env_file_overrides_defaults_env_file() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "defaults:\n  env_file: d.env\n" + jobs(job("a", "env_file: j.env\n"), job("b")),
        "d.env": b"FROM=defaults\n",
        "j.env": b"FROM=job\n",
    }
    state = ok(files)
    assert dict(state.jobs["a"].environment) == {"FROM": "job"}
    assert dict(state.jobs["b"].environment) == {"FROM": "defaults"}


def test_env_file_errors() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": jobs(
            job("a", "env_file: nope.env\n"),
            job("b", "env_file: bad.env\n"),
            job("c", "env_file: ../x.env\n"),
            job("d", "env_file: /etc/environment\n"),
            job("e", "env_file: dir\n"),
        ),
        "bad.env": b"A=1\n\nnoequals\n",
        "dir/x.env": b"A=1\n",
    }
    assert lines(files) == [
        "bad.env:3: expected KEY=VALUE, got 'noequals'",
        "c.yaml:5:5: jobs[0].env_file: cannot read env_file: 'nope.env' does not exist",
        "c.yaml:13:5: jobs[2].env_file: cannot read env_file: "
        "'../x.env' leaves the configuration tree",
        "c.yaml:17:5: jobs[3].env_file: cannot read env_file: '/etc/environment' is an absolute "
        "path; paths are relative to the file naming them",
        "c.yaml:21:5: jobs[4].env_file: cannot read env_file: 'dir' is a directory",
    ]


def test_env_file_error_from_defaults_is_located_in_defaults() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": "defaults:\n  env_file: missing.env\n" + jobs(job("a"))
    }
    assert lines(files) == [
        "c.yaml:2:3: defaults.env_file: cannot read env_file: 'missing.env' does not exist"
    ]


def test_env_file_shell_style_export() -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": jobs(job("a", "env_file: a.env\n")),
        "a.env": b"export A=1\nexport\tB = two words\nexported=3\n",
    }
    assert dict(ok(files).jobs["a"].environment) == {"A": "1", "B": "two words", "exported": "3"}


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        (b"=value\n", 1, "invalid variable name ''"),
        (b"A=1\nMY VAR=1\n", 2, "invalid variable name 'MY VAR'"),
        (b"A=1\nB=caf\xe9\n", 2, "not valid UTF-8"),
        (b"# c\nA=1\nexport\n", 3, "expected KEY=VALUE, got 'export'"),
    ],
)
def test_env_file_content_errors_have_a_line(content: bytes, line: int, message: str) -> None:
    files: dict[str, str | bytes] = {
        "c.yaml": jobs(job("a", "env_file: a.env\n")),
        "a.env": content,
    }
    [problem] = problems(files)
    assert (problem.file, problem.line) == ("a.env", line)
    assert problem.message.startswith(message)


# --------------------------------------------------------------------------
# Reporters, web, logging
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to", "recipients"),
    [
        ("example@bar.com, zzz@sleep.com", ["example@bar.com", "zzz@sleep.com"]),
        ("'a@x,b@y , ,'", ["a@x", "b@y"]),
        ("one@example.com", ["one@example.com"]),
        ("[a@x, b@y]", ["a@x", "b@y"]),
        ("", None),
    ],
)
def test_mail_to_list_or_comma_string(to: str, recipients: list[str] | None) -> None:
    extra = (
        f"onSuccess:\n  report:\n    mail:\n      from: cron@x\n      to: {to}\n"
        "      smtpHost: mail\n"
    )
    mail = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].config.on_success.report.mail
    assert mail.to == recipients


def test_reporters_sentry_mail_shell() -> None:
    extra = """\
        onPermanentFailure:
          report:
            sentry:
              dsn:
                fromEnvVar: SENTRY_DSN
              extra:
                zbr: 123
              level: warning
            mail:
              from: cron@example.com
              to: ops@example.com
              smtpHost: 127.0.0.1
              smtpPort: 10025
              tls: yes
            shell:
              shell: /bin/bash
              command: [notify, --job]
        """
    report = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].config.on_permanent_failure.report
    assert report.sentry.dsn.from_env_var == "SENTRY_DSN"
    assert report.sentry.extra == {"zbr": "123"}
    assert report.sentry.level == "warning"
    assert report.mail.smtp_port == 10025
    assert report.mail.tls is True
    assert report.shell.command == ["notify", "--job"]


def test_web_listen() -> None:
    text = "web:\n  listen:\n    - http://127.0.0.1:8080\n    - 'http://[::1]:80'\n    - unix:///run/c.sock\n"
    state = ok({"c.yaml": text})
    assert state.web is not None
    assert state.web.listen == ["http://127.0.0.1:8080", "http://[::1]:80", "unix:///run/c.sock"]


def test_web_mcp_defaults_and_limits() -> None:
    text = "web:\n  listen: [http://127.0.0.1:8080]\n  mcp: {enabled: true}\n"
    state = ok({"c.yaml": text})
    assert state.web is not None and state.web.mcp is not None
    mcp = state.web.mcp
    assert (mcp.enabled, mcp.max_sessions, mcp.session_idle_timeout) == (True, 16, 300)
    assert ok({"c.yaml": "web:\n  listen: []\n"}).web.mcp is None  # type: ignore[union-attr]
    text = (
        "web:\n  listen: [http://127.0.0.1:8080]\n"
        "  mcp:\n    enabled: yes\n    maxSessions: 0\n    sessionIdleTimeout: -1\n"
    )
    assert lines({"c.yaml": text}) == [
        "c.yaml:5:5: web.mcp.maxSessions: must be at least 1, got 0",
        "c.yaml:6:5: web.mcp.sessionIdleTimeout: must be more than 0, got -1",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://host",
        "https://h",
        "tcp://h:1",
        "unix://relative",
        "unix://${HOME}/x.sock",
        "http://h:70000",
        "h:80",
        "''",
    ],
)
def test_web_listen_invalid(url: str) -> None:
    shown = "" if url == "''" else url
    assert lines({"c.yaml": f"web:\n  listen:\n    - {url}\n"}) == [
        f"c.yaml:3:7: web.listen[0]: '{shown}' is not a listen address; "
        "use http://HOST:PORT, https://HOST:PORT, unix:///PATH or unix://${XDG_RUNTIME_DIR}/NAME"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("web: {}\n", "c.yaml:1:1: web: missing required key 'listen'"),
        (
            "web:\n  listen: http://h:1\n",
            "c.yaml:2:3: web.listen: expected a list, got 'http://h:1'",
        ),
        ("web:\n  listen: []\n  colour: {}\n", "c.yaml:3:3: web: unknown key 'colour'"),
    ],
)
def test_web_section_errors(text: str, expected: str) -> None:
    assert lines({"c.yaml": text}) == [expected]


def test_logging_section_becomes_a_dict_config() -> None:
    text = """\
        logging:
          version: 1
          disable_existing_loggers: false
          formatters:
            simple:
              format: '%(levelname)s %(message)s'
          handlers:
            console:
              class: logging.StreamHandler
              level: DEBUG
              formatter: simple
              stream: ext://sys.stdout
            file:
              class: logging.handlers.RotatingFileHandler
              filename: /var/log/c.log
              maxBytes: 1048576
              backupCount: 3
              delay: true
          root:
            level: INFO
            handlers: [console]
        """
    state = ok({"c.yaml": text})
    assert state.logging is not None
    config = state.logging.dict_config()
    assert config["version"] == 1
    assert config["disable_existing_loggers"] is False
    assert config["handlers"]["file"]["maxBytes"] == 1048576
    assert config["handlers"]["file"]["backupCount"] == 3
    assert config["handlers"]["file"]["delay"] is True
    assert config["handlers"]["console"]["level"] == "DEBUG"
    assert config["root"] == {"level": "INFO", "handlers": ["console"]}
    assert config["formatters"]["simple"]["format"] == "%(levelname)s %(message)s"
    assert "incremental" not in config


def test_logging_minimal() -> None:
    state = ok({"c.yaml": "logging:\n  version: '1'\n"})
    assert state.logging is not None
    assert state.logging.dict_config() == {"version": 1}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("logging: {}\n", "c.yaml:1:1: logging: missing required key 'version'"),
        ("logging:\n  version: 2\n", "c.yaml:2:3: logging.version: expected one of 1, got '2'"),
        (
            "logging:\n  version: 1\n  formaters: {}\n",
            "c.yaml:3:3: logging: unknown key 'formaters' (did you mean 'formatters'?)",
        ),
        (
            "logging:\n  version: 1\n  disable_existing_loggers: nope\n",
            "c.yaml:3:3: logging.disable_existing_loggers: expected true or false "
            "(also yes/no, on/off, y/n, 1/0), got 'nope'",
        ),
    ],
)
def test_logging_section_errors(text: str, expected: str) -> None:
    assert lines({"c.yaml": text}) == [expected]


# --------------------------------------------------------------------------
# Time zones, users, groups
# --------------------------------------------------------------------------


def test_utc_is_the_default_zone() -> None:
    assert ok({"c.yaml": jobs(job("a"))}).jobs["a"].timezone is UTC


def test_utc_false_uses_the_local_zone() -> None:
    assert ok({"c.yaml": jobs(job("a", "utc: false\n"))}).jobs["a"].timezone == local_timezone()


@pytest.mark.parametrize("utc", ["true", "false"])
def test_timezone_wins_over_utc(utc: str) -> None:
    extra = f"utc: {utc}\ntimezone: America/Los_Angeles\n"
    j = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"]
    assert j.timezone == ZoneInfo("America/Los_Angeles")
    assert j.config.timezone == "America/Los_Angeles"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "Europe/Lisbon ", "../../etc/passwd", "UTC\\0"])
def test_unknown_timezone(zone: str) -> None:
    [line] = lines({"c.yaml": jobs(job("a", f'timezone: "{zone}"\n'))})
    assert line.startswith("c.yaml:5:5: jobs[0].timezone: unknown time zone ")


def test_unknown_timezone_message() -> None:
    assert lines({"c.yaml": jobs(job("a", "timezone: Mars/Olympus\n"))}) == [
        "c.yaml:5:5: jobs[0].timezone: unknown time zone 'Mars/Olympus'"
    ]


@pytest.mark.parametrize("zone", ["America", "Etc", "x" * 300])
def test_timezone_that_is_not_a_zone_file_is_a_problem(zone: str) -> None:
    pytest.importorskip("tzdata")  # the crash goes through the tzdata package's resources
    with pytest.raises(ConfigError) as info:
        load(tree({"c.yaml": jobs(job("a", f"timezone: {zone}\n"))}), "c.yaml")
    assert [p.key for p in info.value.problems] == [("jobs", 0, "timezone")]


@pytest.mark.parametrize(
    "name", ["root", "www-data", "_svc", "backup.user", "nobody$", "1000", "0"]
)
def test_user_and_group_forms(name: str) -> None:
    config = ok({"c.yaml": jobs(job("a", f"user: '{name}'\ngroup: '{name}'\n"))}).jobs["a"].config
    assert (config.user, config.group) == (name, name)


def test_numeric_user_is_text() -> None:
    config = ok({"c.yaml": jobs(job("a", "user: 1000\ngroup: 100\n"))}).jobs["a"].config
    assert (config.user, config.group) == ("1000", "100")


@pytest.mark.parametrize("name", ["a b", "-x", "1a", "0x1", "a:b", "a/b", "x" * 40, "é"])
def test_user_and_group_invalid_forms(name: str) -> None:
    assert lines({"c.yaml": jobs(job("a", f"user: '{name}'\ngroup: '{name}'\n"))}) == [
        f"c.yaml:5:5: jobs[0].user: '{name}' is neither a name nor a numeric id",
        f"c.yaml:6:5: jobs[0].group: '{name}' is neither a name nor a numeric id",
    ]


def test_user_names_are_not_looked_up() -> None:
    # only the form is checked: the user need not exist where the config is validated
    config = ok({"c.yaml": jobs(job("a", "user: no-such-user-xyz\n"))}).jobs["a"].config
    assert config.user == "no-such-user-xyz"


# --------------------------------------------------------------------------
# Known bugs: keys starting with "<"
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        jobs(job("a", "<x: 1\n")),
        "web:\n  listen: []\n  <: 1\n",
        "defaults:\n  '<oops': 1\n",
    ],
)
def test_unknown_key_starting_with_angle_bracket_is_a_problem(text: str) -> None:
    with pytest.raises(ConfigError):
        load(tree({"c.yaml": text}), "c.yaml")


def test_unknown_nested_key_starting_with_angle_bracket_is_named() -> None:
    text = "jobs:\n  - name: a\n    command: echo\n    schedule:\n      <minute: 1\n"
    assert lines({"c.yaml": text}) == [
        "c.yaml:5:7: jobs[0].schedule: unknown key '<minute' (did you mean 'minute'?)"
    ]


def test_deeply_nested_logging_values_do_not_crash() -> None:
    for depth in (550, 650, 750, 850):
        text = "logging:\n  version: 1\n  root:\n    x: " + "[" * depth + "]" * depth + "\n"
        try:
            load(tree({"c.yaml": text}), "c.yaml")
        except ConfigError:
            pass


def test_too_deep_logging_values_are_located() -> None:
    nested = "[" * 120 + "]" * 120
    text = f"logging:\n  version: 1\n  root:\n    level: INFO\n  handlers:\n    h: {nested}\n"
    assert lines({"c.yaml": text}) == [
        "c.yaml:6:106: logging.handlers.h: nests too deeply below here (more than 100 levels)"
    ]


def test_duplicate_key_problem_has_its_key_path() -> None:
    [problem] = problems({"c.yaml": jobs(job("a", "shell: x\nshell: y\n"))})
    assert problem.key == ("jobs", 0, "shell")


# --------------------------------------------------------------------------
# On disk: DiskTree and load_path
# --------------------------------------------------------------------------


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(y(content) if isinstance(content, str) else content)


def test_disk_tree_matches_memory_tree(tmp_path: Path) -> None:
    write(tmp_path, DIRECTORY)
    on_disk = load(DiskTree(tmp_path), "")
    in_memory = ok(DIRECTORY, "")
    assert on_disk.files == in_memory.files
    assert list(on_disk.jobs) == list(in_memory.jobs)
    assert on_disk.job_set_id == in_memory.job_set_id
    assert {n: j.digest for n, j in on_disk.jobs.items()} == {
        n: j.digest for n, j in in_memory.jobs.items()
    }


def test_disk_tree_include_chain_and_env_file(tmp_path: Path) -> None:
    write(tmp_path, {**CHAIN, "lib/e.env": b"E=1\n"})
    (tmp_path / "lib" / "base.yaml").write_bytes(
        (tmp_path / "lib" / "base.yaml").read_bytes() + b"    env_file: e.env\n"
    )
    state = load_path(str(tmp_path / "top.yaml"))
    assert state.jobs["top-job"].config.shell == "/bin/mid"
    assert dict(state.jobs["base-job"].environment)["E"] == "1"
    assert state.files[-1] == "lib/e.env"


def test_load_path_names_files_as_the_user_wrote_them(tmp_path: Path) -> None:
    write(
        tmp_path, {"cfg/jobs/a.yaml": jobs(job("a", "priority: 99\n")), "cfg/_t/x.yaml": "bad: ["}
    )
    root = tmp_path / "cfg"
    expected = f"{root}/jobs/a.yaml:5:5: jobs[0].priority: must be at most 19, got 99"
    for target in (root, root / "jobs" / "a.yaml"):
        with pytest.raises(ConfigError) as info:
            load_path(str(target))
        assert [str(p) for p in info.value.problems] == [expected]


def test_load_path_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as info:
        load_path(str(missing))
    assert [str(p) for p in info.value.problems] == [f"{missing}: no such file or directory"]


def test_load_path_include_leaving_the_directory(tmp_path: Path) -> None:
    write(tmp_path, {"outside.yaml": jobs(job("o")), "cfg/c.yaml": "include: [../outside.yaml]\n"})
    with pytest.raises(ConfigError) as info:
        load_path(str(tmp_path / "cfg"))
    assert [str(p) for p in info.value.problems] == [
        f"{tmp_path}/cfg/c.yaml:1:11: include[0]: '../outside.yaml' leaves the configuration tree"
    ]


def test_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    write(tmp_path, {"secret.yaml": jobs(job("s")), "cfg/a.yaml": jobs(job("a"))})
    os.symlink(tmp_path / "secret.yaml", tmp_path / "cfg" / "link.yaml")
    with pytest.raises(ConfigError) as info:
        load_path(str(tmp_path / "cfg"))
    [problem] = info.value.problems
    assert problem.file == str(tmp_path / "cfg" / "link.yaml")
    assert "outside the configuration tree" in problem.message


def test_symlink_inside_the_tree_is_followed(tmp_path: Path) -> None:
    write(tmp_path, {"cfg/_lib/real.yaml": jobs(job("r")), "cfg/c.yaml": "include: [link.yaml]\n"})
    os.symlink(tmp_path / "cfg" / "_lib" / "real.yaml", tmp_path / "cfg" / "link.yaml")
    state = load(DiskTree(tmp_path / "cfg"), "c.yaml")
    assert list(state.jobs) == ["r"]


def test_disk_tree_skips_private_and_hidden_directories(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "a.yaml": jobs(job("a")),
            "_t/x.yaml": "bad: [",
            ".git/x.yaml": "bad: [",
            "d/.h/x.yaml": "bad: [",
            "d/_p.yml": "bad: [",
            "d/b.yml": jobs(job("b")),
        },
    )
    state = load_path(str(tmp_path))
    assert state.files == ("a.yaml", "d/b.yml")


def test_disk_tree_follows_symlinked_directories_inside_the_root(tmp_path: Path) -> None:
    hidden = tmp_path / "cfg" / ".data"
    hidden.mkdir(parents=True)
    (hidden / "a.yaml").write_text('jobs: [{name: a, command: "true", schedule: "@daily"}]\n')
    (tmp_path / "cfg" / "jobs").symlink_to(".data")  # a ConfigMap-style mount
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.yaml").write_text('jobs: [{name: b, command: "true", schedule: "@daily"}]\n')
    (tmp_path / "cfg" / "elsewhere").symlink_to(outside)  # leaves the tree: not followed
    (tmp_path / "cfg" / "loop").symlink_to(".")  # a loop: visited once
    assert list(load_path(str(tmp_path / "cfg")).jobs) == ["a"]


def test_an_empty_section_in_a_job_leaves_the_error_where_the_default_is() -> None:
    files = {
        "_d.yaml": "defaults:\n  onFailure:\n    retry:\n      maximumRetries: x\n",
        "c.yaml": "include: [_d.yaml]\njobs:\n" + job("a", "onFailure:\n"),
    }
    assert lines(files) == [
        "_d.yaml:4:7: defaults.onFailure.retry.maximumRetries: expected an integer, got 'x'"
    ]


# --------------------------------------------------------------------------
# Secrets: yacron's precedence, and a warning when more than one source is set
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "chosen"),
    [
        ("{value: v, fromFile: /f, fromEnvVar: E}", ("value", "v")),
        ("{fromFile: /f, fromEnvVar: E}", ("fromFile", "/f")),
        ("{fromEnvVar: E, value: v}", ("value", "v")),
        ("{fromEnvVar: E}", ("fromEnvVar", "E")),
        ("{}", None),
        ("{value: }", None),
    ],
)
def test_the_first_set_secret_source_wins(secret: str, chosen: tuple[str, str] | None) -> None:
    extra = f"onFailure:\n  report:\n    sentry:\n      dsn: {secret}\n"
    dsn = ok({"c.yaml": jobs(job("a", extra))}).jobs["a"].config.on_failure.report.sentry.dsn
    assert dsn.chosen() == chosen


def test_one_secret_source_gives_no_warning() -> None:
    extra = "onSuccess:\n  report:\n    mail:\n      password:\n        fromFile: /run/pw\n"
    assert ok({"c.yaml": jobs(job("a", extra))}).warnings == ()


def test_a_secret_with_two_sources_is_a_warning_at_the_secret() -> None:
    extra = (
        "onSuccess:\n  report:\n    mail:\n      password:\n"
        "        value: x\n        fromFile: /run/pw\n"
    )
    state = ok({"c.yaml": jobs(job("a", extra))})
    assert list(state.jobs) == ["a"]
    assert [str(w) for w in state.warnings] == [
        "c.yaml:8:11: jobs[0].onSuccess.report.mail.password: value and fromFile are both set; "
        "only value is used (the first set of value, fromFile, fromEnvVar wins)"
    ]


def test_a_secret_source_merged_from_defaults_is_a_warning_where_the_job_adds_one() -> None:
    files = {
        "c.yaml": "defaults:\n  onFailure:\n    report:\n      sentry:\n        dsn:\n"
        "          fromEnvVar: SENTRY_DSN\n"
        + jobs(
            job("a"),
            job("b", "onFailure:\n  report:\n    sentry:\n      dsn: {value: https://k@s/1}\n"),
        )
    }
    state = ok(files)
    assert [str(w) for w in state.warnings] == [
        "c.yaml:17:11: jobs[1].onFailure.report.sentry.dsn: value and fromEnvVar are both set; "
        "only value is used (the first set of value, fromFile, fromEnvVar wins)"
    ]


def test_a_secret_with_three_sources_in_defaults_is_one_warning_for_every_job() -> None:
    files = {
        "c.yaml": "defaults:\n  onSuccess:\n    report:\n      mail:\n        password:\n"
        "          {value: a, fromFile: /b, fromEnvVar: C}\n" + jobs(job("a"), job("b"))
    }
    state = ok(files)
    assert [str(w) for w in state.warnings] == [
        "c.yaml:5:9: defaults.onSuccess.report.mail.password: value, fromFile and fromEnvVar "
        "are all set; only value is used (the first set of value, fromFile, fromEnvVar wins)"
    ]


def test_secret_warnings_survive_the_load_cache() -> None:
    from cronstable.config import LoadCache

    extra = "onSuccess:\n  report:\n    mail:\n      password: {value: x, fromEnvVar: P}\n"
    cache = LoadCache()
    first = load(tree({"c.yaml": jobs(job("a", extra))}), "c.yaml", cache=cache)
    again = load(tree({"c.yaml": jobs(job("a", extra))}), "c.yaml", cache=cache)
    assert again.warnings == first.warnings and len(first.warnings) == 1


def test_sections_know_where_their_keys_are_written() -> None:
    text = "logging:\n  version: 1\n  handlers:\n    console: {class: logging.StreamHandler}\n"
    state = ok({"c.yaml": text})
    key: tuple[str, ...] = ("logging", "handlers", "console")
    assert str(state.problem(key, "x")) == "c.yaml:4:5: logging.handlers.console: x"
    # deeper keys are placed at the nearest recorded one
    assert str(state.problem((*key, "class"), "x")) == (
        "c.yaml:4:15: logging.handlers.console.class: x"
    )
    key = ("logging", "handlers", "console", "class", "more")
    assert str(state.problem(key, "x")) == "c.yaml:4:15: logging.handlers.console.class.more: x"
    assert str(state.problem(("web",), "x")) == "<config>: web: x"
