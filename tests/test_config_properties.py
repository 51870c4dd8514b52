"""Property tests of the configuration loader and its fingerprints.

* Whatever bytes a file holds, :func:`load` returns a :class:`DesiredState` or
  raises :class:`ConfigError`: nothing else escapes.
* Job digests and the job-set id depend on the resolved settings only: not on
  key order, comments, whitespace, indentation, flow or block style, job order
  or how jobs are spread over files; editing one job changes that job's digest
  and no other.

Inputs that once crashed the loader (keys starting with ``<``, time zones
naming tzdata directories, logging values nested ~500 deep) have regression
tests in ``test_config_loader.py``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronstable.config import ConfigError, DesiredState, MemoryTree, load

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

# A few files beside the one under test, so that includes and env files may resolve.
SIBLINGS = {
    "x.env": b"A=1\nB=2\n",
    "d/e.yaml": b"defaults:\n  shell: /bin/bash\n",
    "d/f.yaml": b"jobs:\n  - name: from-d\n    command: echo\n    schedule: '@daily'\n",
}


def load_text(data: bytes | str) -> DesiredState | ConfigError:
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    try:
        state = load(MemoryTree({"c.yaml": raw, **SIBLINGS}), "c.yaml")
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert isinstance(str(problem), str)
        return exc
    assert isinstance(state, DesiredState)
    return state


# --------------------------------------------------------------------------
# (a) Random text
# --------------------------------------------------------------------------

FRAGMENTS = [
    "jobs:",
    "defaults:",
    "include:",
    "web:",
    "logging:",
    "\n",
    "\n  ",
    "\n    ",
    "  ",
    "- ",
    ": ",
    "name: a",
    "name: b",
    "command: echo",
    "command: [a, b]",
    "schedule: '* * * * *'",
    "schedule: {minute: '*/2'}",
    "schedule: 61 * * * *",
    "shell: /bin/bash",
    "utc: no",
    "timezone: Europe/Lisbon",
    "environment:",
    "key: K",
    "value: 1.10",
    "env_file: x.env",
    "env_file: ../y.env",
    "include: [d]",
    "include: c.yaml",
    "listen: [http://h:1]",
    "version: 1",
    "killTimeout: 0.5",
    "priority: 19",
    "concurrencyPolicy: forbid",
    "onFailure:",
    "retry:",
    "maximumRetries: -1",
    "&a ",
    "*a",
    "<<: *a",
    "<<: [*a]",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    '"',
    "#",
    "|",
    ">",
    "?",
    "\t",
    "---",
    "...",
    "~",
    "!!str ",
    "!tag ",
    "%YAML 1.1\n",
    "\ufeff",
    "\\",
    "é",
    "\x00",
    "\x85",
]

yamlish = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


@FAST
@given(st.text(max_size=200))
def test_any_text_loads_or_is_a_config_error(text: str) -> None:
    load_text(text)


@FAST
@given(yamlish)
def test_yaml_ish_text_loads_or_is_a_config_error(text: str) -> None:
    load_text(text)


@FEW
@given(st.binary(max_size=200))
def test_any_bytes_load_or_are_a_config_error(data: bytes) -> None:
    load_text(data)


# --------------------------------------------------------------------------
# (b) Random structures, dumped with yaml.safe_dump
# --------------------------------------------------------------------------

JOB_KEYS = [
    "name",
    "command",
    "shell",
    "schedule",
    "utc",
    "timezone",
    "environment",
    "env_file",
    "captureStdout",
    "captureStderr",
    "saveLimit",
    "maxLineLength",
    "streamPrefix",
    "failsWhen",
    "onFailure",
    "onPermanentFailure",
    "onSuccess",
    "concurrencyPolicy",
    "executionTimeout",
    "killTimeout",
    "user",
    "group",
    "statsd",
    "enabled",
    "startingDeadlineSeconds",
    "clusterPolicy",
    "concurrencyScope",
    "priority",
]
NESTED_KEYS = [
    "retry",
    "report",
    "mail",
    "sentry",
    "shell",
    "to",
    "from",
    "dsn",
    "value",
    "fromEnvVar",
    "fingerprint",
    "key",
    "maximumRetries",
    "initialDelay",
    "producesStdout",
    "always",
    "minute",
    "hour",
    "dayOfWeek",
    "host",
    "port",
    "prefix",
    "listen",
    "version",
    "handlers",
    "root",
    "level",
]
PLAUSIBLE = [
    "* * * * *",
    "@daily",
    "@reboot",
    "*/2",
    "61 * * * *",
    "UTC",
    "Europe/Lisbon",
    "Nowhere/Land",
    "a@b, c@d",
    "http://h:1",
    "unix:///x",
    "tcp://x",
    "1.10",
    "12:30",
    "yes",
    "off",
    "0.5",
    "-1",
    "19",
    "20",
    "Allow",
    "forbid",
    "Leader",
    "cluster",
    "x.env",
    "d",
    "d/e.yaml",
    "../x",
    "/abs",
    "{job_name}",
    "{",
    "1e400",
    "nan",
    "root",
    "a b",
]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(PLAUSIBLE),
)
keys = st.one_of(st.sampled_from(JOB_KEYS + NESTED_KEYS), st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)
job_like = st.dictionaries(st.sampled_from(JOB_KEYS), values, max_size=10)
document = st.one_of(
    values,
    st.fixed_dictionaries(
        {"jobs": st.lists(job_like, max_size=3)},
        optional={
            "defaults": job_like,
            "include": values,
            "web": values,
            "logging": values,
            "cluster": values,
        },
    ),
)


def dump(data: Any, **style: Any) -> bytes:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, **style).encode(
        "utf-8", "surrogatepass"
    )


@SOME
@given(values)
def test_any_structure_loads_or_is_a_config_error(data: Any) -> None:
    load_text(dump(data))


@SOME
@given(document)
def test_any_config_shaped_structure_loads_or_is_a_config_error(data: Any) -> None:
    load_text(dump(data))


@FEW
@given(document, st.booleans())
def test_any_config_shaped_structure_in_flow_style(data: Any, flow: bool) -> None:
    load_text(dump(data, default_flow_style=flow, indent=4))


# --------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------

# single-line printable text with no YAML surprises after safe_dump
words = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12
).filter(lambda s: s.strip() == s and s != "")
env_keys = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True)

settings_strategy = st.fixed_dictionaries(
    {},
    optional={
        "shell": st.sampled_from(["/bin/sh", "/bin/bash", "/bin/zsh"]),
        "utc": st.booleans(),
        "timezone": st.sampled_from(["UTC", "Europe/Lisbon", "America/New_York"]),
        "captureStdout": st.booleans(),
        "captureStderr": st.booleans(),
        "saveLimit": st.integers(0, 10_000),
        "killTimeout": st.sampled_from([0, 0.5, 1, 30, 42.25]),
        "executionTimeout": st.sampled_from([1, 2.5, 3600]),
        "concurrencyPolicy": st.sampled_from(["Allow", "Forbid", "Replace"]),
        "enabled": st.booleans(),
        "priority": st.integers(-20, 19),
        "startingDeadlineSeconds": st.integers(0, 600),
        "environment": st.lists(
            st.fixed_dictionaries({"key": env_keys, "value": words}), max_size=3
        ),
        "failsWhen": st.fixed_dictionaries(
            {}, optional={"producesStdout": st.booleans(), "always": st.booleans()}
        ),
        "onFailure": st.fixed_dictionaries(
            {
                "retry": st.fixed_dictionaries(
                    {},
                    optional={
                        "maximumRetries": st.integers(-1, 5),
                        "initialDelay": st.integers(0, 9),
                    },
                )
            }
        ),
    },
)
SCHEDULES = ["* * * * *", "*/5 * * * *", "0 3 * * mon-fri", "@daily", "@hourly", "15 9 1 * *"]


@st.composite
def job_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(words, min_size=1, max_size=5, unique=True))
    out = []
    for name in names:
        job = {
            "name": name,
            "command": draw(st.one_of(words, st.lists(words, min_size=1, max_size=3))),
            "schedule": draw(st.sampled_from(SCHEDULES)),
        }
        job.update(draw(settings_strategy))
        out.append(job)
    return out


def shuffled(data: Any, rng: random.Random) -> Any:
    """The same data with every mapping's keys in a random order."""
    if isinstance(data, dict):
        items = list(data.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(data, list):
        return [shuffled(v, rng) for v in data]
    return data


def commented(text: str, rng: random.Random) -> str:
    """Full-line comments and blank lines between lines, trailing spaces."""
    out = ["# generated; comments must not matter"]
    for line in text.splitlines():
        if rng.random() < 0.3:
            out.append(" " * rng.randint(0, 6) + "# " + "note " * rng.randint(0, 3))
        if rng.random() < 0.2:
            out.append("")
        out.append(line + " " * rng.randint(0, 2))
    return "\n".join(out) + "\n"


WIDE = 10**6  # no folding of long scalars, so every scalar stays on one line


def render(jobs: list[dict[str, Any]], rng: random.Random | None = None) -> bytes:
    """One YAML rendering of ``{"jobs": jobs}``; a random style when ``rng`` is given."""
    doc: dict[str, Any] = {"jobs": jobs}
    if rng is None:
        return yaml.safe_dump(doc, sort_keys=False, width=WIDE).encode()
    doc = shuffled(doc, rng)
    flow = rng.choice([False, True, None])
    text = yaml.safe_dump(
        doc,
        sort_keys=False,
        width=WIDE,
        default_flow_style=flow,
        indent=rng.choice([2, 3, 4, 6]),
        explicit_start=rng.random() < 0.5,
    )
    return commented(text, rng).encode()


def digests(state: DesiredState) -> dict[str, str]:
    return {name: job.digest for name, job in state.jobs.items()}


def must_load(files: dict[str, bytes], entry: str = "c.yaml") -> DesiredState:
    try:
        return load(MemoryTree(files), entry)
    except ConfigError as exc:  # pragma: no cover - shows the generated text on failure
        pytest.fail(f"generated configuration did not load:\n{exc}\n---\n{files}")


@FEW
@given(job_sets(), st.randoms(use_true_random=False))
def test_fingerprints_ignore_key_order_comments_whitespace_and_style(
    jobs: list[dict[str, Any]], rng: random.Random
) -> None:
    plain = must_load({"c.yaml": render(jobs)})
    styled = must_load({"c.yaml": render(jobs, rng)})
    assert digests(styled) == digests(plain)
    assert styled.job_set_id == plain.job_set_id


@FEW
@given(job_sets(), st.randoms(use_true_random=False))
def test_job_set_id_ignores_job_order_and_files(
    jobs: list[dict[str, Any]], rng: random.Random
) -> None:
    plain = must_load({"c.yaml": render(jobs)})
    reordered = list(jobs)
    rng.shuffle(reordered)
    cut = rng.randint(0, len(reordered))
    files = {
        "a.yaml": render(reordered[:cut], rng),
        "sub/b.yaml": render(reordered[cut:], rng),
    }
    split = must_load(files, "")
    assert digests(split) == digests(plain)
    assert split.job_set_id == plain.job_set_id


EDITS: list[tuple[str, Any]] = [
    ("command", "a different command"),
    ("schedule", "7 7 * * *"),
    ("shell", "/bin/ksh"),
    ("killTimeout", 12.5),
    ("saveLimit", 12345),
    ("environment", [{"key": "EDITED", "value": "yes"}]),
    ("failsWhen", {"producesStdout": True, "always": True}),
    ("onFailure", {"retry": {"maximumRetries": 9}}),
    ("timezone", "Asia/Tokyo"),
    ("enabled", False),
]


@FEW
@given(job_sets(), st.data())
def test_editing_one_job_changes_only_its_digest(
    jobs: list[dict[str, Any]], data: st.DataObject
) -> None:
    before = must_load({"c.yaml": render(jobs)})
    index = data.draw(st.integers(0, len(jobs) - 1), label="index")
    key, value = data.draw(st.sampled_from(EDITS), label="edit")
    edited = [dict(j) for j in jobs]
    if edited[index].get(key) == value:
        return
    edited[index][key] = value
    after = must_load({"c.yaml": render(edited)})
    name = jobs[index]["name"]
    changed = {n for n in digests(before) if digests(before)[n] != digests(after)[n]}
    assert changed == {name}
    assert after.job_set_id != before.job_set_id


@FEW
@given(job_sets())
def test_adding_a_job_keeps_the_other_digests(jobs: list[dict[str, Any]]) -> None:
    before = must_load({"c.yaml": render(jobs)})
    extra = {"name": "zz-added-job-zz", "command": "true", "schedule": "@daily"}
    after = must_load({"c.yaml": render([*jobs, extra])})
    assert {n: d for n, d in digests(after).items() if n != extra["name"]} == digests(before)
    assert after.job_set_id != before.job_set_id


@pytest.mark.parametrize("word", ["true", "True", "yes", "on", "ON"])
def test_spelling_of_a_boolean_does_not_change_the_digest(word: str) -> None:
    def state(value: str) -> DesiredState:
        text = (
            "jobs:\n  - name: a\n    command: echo\n    schedule: '@daily'\n"
            f"    captureStdout: {value}\n"
        )
        return must_load({"c.yaml": text.encode()})

    assert state(word).jobs["a"].digest == state("true").jobs["a"].digest


def test_settings_equal_to_the_default_do_not_change_the_digest() -> None:
    base = "jobs:\n  - name: a\n    command: echo\n    schedule: '*/2 * * * *'\n"
    spelled = (
        base + "    shell: /bin/sh\n    killTimeout: 30.0\n    failsWhen: {nonzeroReturn: yes}\n"
    )
    mapping = "jobs:\n  - name: a\n    command: echo\n    schedule: {minute: '*/2'}\n"
    digest = must_load({"c.yaml": base.encode()}).jobs["a"].digest
    assert must_load({"c.yaml": spelled.encode()}).jobs["a"].digest == digest
    assert must_load({"c.yaml": mapping.encode()}).jobs["a"].digest == digest


def test_defaults_and_own_settings_fingerprint_alike() -> None:
    inline = "jobs:\n  - name: a\n    command: echo\n    schedule: '@daily'\n    shell: /bin/bash\n"
    via_defaults = (
        "defaults:\n  shell: /bin/bash\n"
        "jobs:\n  - name: a\n    command: echo\n    schedule: '@daily'\n"
    )
    assert (
        must_load({"c.yaml": inline.encode()}).jobs["a"].digest
        == must_load({"c.yaml": via_defaults.encode()}).jobs["a"].digest
    )


def test_env_file_content_is_part_of_the_digest() -> None:
    text = b"jobs:\n  - name: a\n    command: echo\n    schedule: '@daily'\n    env_file: a.env\n"
    one = must_load({"c.yaml": text, "a.env": b"A=1\n"}).jobs["a"].digest
    two = must_load({"c.yaml": text, "a.env": b"A=2\n"}).jobs["a"].digest
    same = must_load({"c.yaml": text, "a.env": b"# comment\nA = 1\n"}).jobs["a"].digest
    assert one != two
    assert one == same
