"""Retrying a backend's transient failures: one policy, built on tenacity, each retry logged.

A source's own loop handles outages (it keeps the running revision and backs
off for minutes); this is the short, bounded retry *inside* one operation, so
that a dropped connection or a remote restarting under a fetch costs a second
instead of a whole poll interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import tenacity

logger = logging.getLogger(__name__)

ATTEMPTS = 3
FIRST_WAIT = 0.2
MAX_WAIT = 2.0


def transient(
    what: str,
    is_transient: Callable[[BaseException], bool],
    describe: Callable[[BaseException], str] = str,
    *,
    attempts: int = ATTEMPTS,
) -> tenacity.Retrying:
    """A blocking retry loop (``for attempt in transient(...): with attempt: ...``).

    Retries only what ``is_transient`` accepts, at most ``attempts`` tries in all,
    waiting 0.2 s, 0.4 s … (capped at 2 s, with jitter); the last error is raised
    as itself.  ``describe`` renders an error for the log: it must not reveal
    secrets (a URL's credentials).
    """

    def log_retry(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        logger.info(
            "%s: attempt %d failed (%s); retrying in %.1f s",
            what,
            state.attempt_number,
            describe(error) if error is not None else "no error",
            state.next_action.sleep if state.next_action is not None else 0.0,
        )

    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=FIRST_WAIT, max=MAX_WAIT)
        + tenacity.wait_random(0, FIRST_WAIT / 2),
        retry=tenacity.retry_if_exception(is_transient),
        before_sleep=log_retry,
        reraise=True,
    )
