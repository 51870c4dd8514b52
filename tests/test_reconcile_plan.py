"""plan() and its renderings: what `cronstable diff` shows is what the daemon will do."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.reconcile.plan import plan
from cronstable.reconcile.render import to_json, to_markdown, to_text

AT = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


def state(text: str, **extra: bytes) -> DesiredState:
    files = {"c.yaml": textwrap.dedent(text).encode(), **extra}
    return load(MemoryTree(files), "c.yaml")


BASE = """\
web: {listen: [http://127.0.0.1:8080]}
jobs:
  - {name: keep, command: echo keep, schedule: "0 * * * *"}
  - {name: edit, command: echo edit, schedule: "0 3 * * *", environment: [{key: A, value: "1"}]}
  - {name: drop, command: echo drop, schedule: "@daily"}
"""
NEW = """\
web: {listen: [http://127.0.0.1:9090]}
jobs:
  - {name: keep, command: echo keep, schedule: "0 * * * *"}
  - {name: edit, command: echo edit, schedule: "30 4 * * *", environment: [{key: A, value: "2"}]}
  - {name: fresh, command: echo fresh, schedule: "*/10 * * * *"}
"""


def test_plan_lists_added_removed_changed_and_sections() -> None:
    p = plan(state(NEW), state(BASE), revision="new", applied_revision="old")
    assert [(c.kind, c.name) for c in p.jobs] == [
        ("removed", "drop"),
        ("added", "fresh"),
        ("changed", "edit"),
    ]
    edit = p.jobs[2]
    assert [(f.path, f.old, f.new) for f in edit.fields] == [
        ("environment.A", "1", "2"),
        ("schedule", "0 0 3 * * * *", "0 30 4 * * * *"),
    ]
    assert edit.schedule_changed
    assert [s.section for s in p.sections] == ["web"]
    assert p.summary() == {
        "added": 1,
        "removed": 1,
        "changed": 1,
        "unchanged": 1,
        "sections": ["web"],
    }


def test_plan_of_identical_states_is_empty_whatever_the_spelling() -> None:
    a = state('jobs: [{name: x, command: "true", schedule: "*/5 * * * *", captureStdout: yes}]')
    b = state(
        """\
        # reordered keys, other spellings, same meaning
        jobs:
          - captureStdout: true
            schedule: {minute: "*/5"}
            command: "true"
            name: x
        """
    )
    assert plan(b, a).empty


def test_plan_from_nothing_adds_everything() -> None:
    p = plan(state(BASE), None)
    assert [c.kind for c in p.jobs] == ["added"] * 3
    assert p.old_job_set_id is None


def test_env_file_change_shows_as_environment_change() -> None:
    text = 'jobs: [{name: x, command: "true", schedule: "@daily", env_file: e.env}]'
    old = state(text, **{"e.env": b"TOKEN=a\n"})
    new = state(text, **{"e.env": b"TOKEN=b\n"})
    (change,) = plan(new, old).jobs
    assert [(f.path, f.old, f.new) for f in change.fields] == [("environment.TOKEN", "a", "b")]
    assert not change.schedule_changed


def test_text_rendering() -> None:
    text = to_text(plan(state(NEW), state(BASE)), AT)
    assert text.splitlines()[0] == (
        "jobs: 1 added, 1 removed, 1 changed, 1 unchanged; sections changed: web"
    )
    assert "- job drop (@daily)" in text
    assert "+ job fresh (*/10 * * * *)" in text
    assert "    schedule: '0 0 3 * * * *' -> '0 30 4 * * * *'" in text
    assert (
        "    next before: 2026-03-08T03:00:00+00:00, 2026-03-09T03:00:00+00:00, "
        "2026-03-10T03:00:00+00:00"
    ) in text
    assert "    next after:  2026-03-08T04:30:00+00:00" in text
    assert "\033[" not in text
    assert "\033[32m" in to_text(plan(state(NEW), state(BASE)), AT, colour=True)


def test_json_rendering() -> None:
    body = json.loads(to_json(plan(state(NEW), state(BASE), revision="r2"), AT))
    assert body["changed"] is True
    assert body["to"]["revision"] == "r2"
    edit = next(j for j in body["jobs"] if j["name"] == "edit")
    assert edit["nextFires"]["after"][0] == "2026-03-08T04:30:00+00:00"
    assert {"path": "environment.A", "old": "1", "new": "2"} in edit["fields"]
    assert body["sections"][0]["new"] == {"listen": ["http://127.0.0.1:9090"]}


def test_markdown_rendering_is_a_table_with_details() -> None:
    md = to_markdown(plan(state(NEW), state(BASE)), AT)
    assert md.startswith("### cronstable diff\n")
    assert "| + | `fresh` | `*/10 * * * *` |" in md
    assert "<details><summary><code>edit</code>: 2 settings changed</summary>" in md
    assert "| `environment.A` | `'1'` | `'2'` |" in md
    assert to_markdown(plan(state(BASE), state(BASE)), AT).endswith(
        "No changes (jobs: 0 added, 0 removed, 0 changed, 3 unchanged).\n"
    )


def test_section_changes_show_the_settings_that_differ() -> None:
    logging_a = "logging:\n  version: 1\n  root: {level: INFO, handlers: [h]}\n"
    logging_b = "logging:\n  version: 1\n  root: {level: WARNING, handlers: [h]}\n"
    p = plan(state(GOOD_JOB + logging_b), state(GOOD_JOB + logging_a))
    (section,) = p.sections
    assert [(f.path, f.old, f.new) for f in section.fields] == [("root.level", "INFO", "WARNING")]
    assert "    root.level: 'INFO' -> 'WARNING'" in to_text(p, AT)
    assert "| `root.level` | `'INFO'` | `'WARNING'` |" in to_markdown(p, AT)


GOOD_JOB = 'jobs: [{name: x, command: "true", schedule: "@daily"}]\n'


def test_inline_secrets_are_shown_as_digests() -> None:
    # a diff is posted on pull requests and kept in CI logs: a token or a mail password
    # written inline shows as its digest, so a change is still visible
    old = """\
    web: {listen: [http://127.0.0.1:8080], authToken: {value: old-web-token}}
    jobs:
      - name: j
        command: "false"
        schedule: "@daily"
        onFailure: {report: {mail: {password: {value: old-mail-pass}}}}
    """
    new = old.replace("old-", "new-")
    rendered = [
        render(plan(state(new), state(old)), AT) for render in (to_text, to_json, to_markdown)
    ]
    for text in rendered:
        for secret in ("old-web-token", "new-web-token", "old-mail-pass", "new-mail-pass"):
            assert secret not in text
    body = json.loads(rendered[1])
    [job] = body["jobs"]
    [field] = job["fields"]
    assert field["path"] == "onFailure.report.mail.password.value"
    assert field["old"].startswith("sha256:") and field["new"].startswith("sha256:")
    assert body["sections"][0]["new"]["authToken"]["value"].startswith("sha256:")
