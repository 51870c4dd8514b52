"""``cronstable next``: when will each job fire?"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from cronstable.cli.exits import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from cronstable.cli.untrusted import escape
from cronstable.cli.validate import load_or_report
from cronstable.config import DesiredState, Job
from cronstable.config.desired import Workflow
from cronstable.config.models import JobConfig, WorkflowSettings
from cronstable.schedule import uses_h


def parse_after(text: str | None) -> datetime:
    """ISO 8601 → aware datetime; a time without offset is UTC; None is now."""
    if text is None:
        return datetime.now(UTC)
    value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def next_fires(state: DesiredState, after: datetime, count: int) -> list[tuple[str, str]]:
    """(job or workflow name, ISO time) pairs, soonest first; @reboot ones show ``@reboot``
    (a workflow's tasks start with its runs, so they have no fires of their own)."""
    timed: list[tuple[datetime, int, str]] = []
    reboot: list[tuple[str, str]] = []
    fired: list[Job | Workflow] = [*state.jobs.values(), *state.workflows.values()]
    for order, job in enumerate(fired):
        if not job.config.enabled:
            continue
        if job.schedule.is_reboot:
            reboot.append((job.name, "@reboot"))
            continue
        for fire in job.schedule.fires(after, job.timezone, count):
            timed.append((fire, order, job.name))
    # by instant, not wall time: two fires in one zone compare by wall clock, fold ignored
    timed.sort(key=lambda item: (item[0].timestamp(), item[1]))
    return reboot + [(name, fire.isoformat()) for fire, _, name in timed]


def cmd_next(path: str, count: int, after_text: str | None) -> int:
    try:
        after = parse_after(after_text)
    except ValueError:
        print(f"cronstable next: --after {after_text!r} is not an ISO 8601 time", file=sys.stderr)
        return EXIT_USAGE
    if not 1970 <= after.astimezone(UTC).year <= 2099:
        # schedules cover 1970-2099: an --after outside would be silently moved
        print(
            f"cronstable next: --after {after_text!r} is outside 1970-2099, "
            "the years schedules cover",
            file=sys.stderr,
        )
        return EXIT_USAGE
    loaded = load_or_report(path, "next")
    if loaded is None:
        return EXIT_INVALID
    shown: list[Job | Workflow] = [*loaded[1].jobs.values(), *loaded[1].workflows.values()]
    for job in shown:
        written = (
            job.config.schedule if isinstance(job.config, JobConfig | WorkflowSettings) else None
        )
        if isinstance(written, str) and uses_h(written):
            # on stderr: stdout stays one `name<TAB>time` line per fire
            # escaped: a daemon's URL is a configuration too, and its names are its own
            line = f"# {job.name}: {written} resolves to {job.schedule.text}"
            print(escape(line), file=sys.stderr)
    for name, when in next_fires(loaded[1], after, count):
        print(f"{escape(name)}\t{when}")
    return EXIT_OK
