"""The shared retry policy for transient backend failures."""

from __future__ import annotations

import logging

import pytest

from cronstable.retrying import transient


def flaky(failures: list[BaseException]) -> object:
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if failures:
            raise failures.pop(0)
        return "ok"

    call.calls = calls  # type: ignore[attr-defined]
    return call


def run(call: object, is_transient: object = lambda e: isinstance(e, OSError)) -> str:
    for attempt in transient("test source", is_transient, lambda e: f"<{e}>"):  # type: ignore[arg-type]
        with attempt:
            return call()  # type: ignore[operator,no-any-return]
    raise AssertionError("unreachable")


def test_transient_failures_are_retried_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "cronstable.retrying")
    call = flaky([ConnectionResetError("reset"), TimeoutError("slow")])
    assert run(call) == "ok"
    assert call.calls["n"] == 3  # type: ignore[attr-defined]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("test source: attempt 1 failed (<reset>); retrying in ")


def test_gives_up_after_three_attempts_with_the_last_error() -> None:
    call = flaky([OSError("a"), OSError("b"), OSError("c"), OSError("d")])
    with pytest.raises(OSError, match="c"):
        run(call)
    assert call.calls["n"] == 3  # type: ignore[attr-defined]


def test_a_non_transient_error_is_raised_at_once() -> None:
    call = flaky([PermissionError("no")])
    with pytest.raises(PermissionError):
        run(call, lambda e: isinstance(e, ConnectionError))
    assert call.calls["n"] == 1  # type: ignore[attr-defined]
