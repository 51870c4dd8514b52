"""Shell reports: run a command with the run's details in its environment.

The environment is the job's (the daemon's, then the job's variables), plus
``CRONSTABLE_*`` and yacron's ``YACRON_*`` names: FAIL_REASON, FAILED, JOB_NAME,
JOB_COMMAND, JOB_SCHEDULE (the canonical 7-field text), RETCODE, STDOUT,
STDERR (the last :data:`STREAM_LIMIT` bytes, with a marker when cut: Linux
refuses one environment string over 128 KiB), and ours: OUTCOME, MOMENT,
SCHEDULED_TIME, ATTEMPT, RUN_ID (a missed fire: REASON, MISSED_COUNT; a pause that
lasted onPaused.alertAfter: PAUSE_SOURCE, PAUSE_REASON, PAUSED_BY, PAUSED_SINCE,
PAUSED_UNTIL).  The
command's output is logged; a non-zero exit is a failed report.  It runs in a
session of its own and is killed (the whole group) when the timeout ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from typing import Any

from cronstable.config.models import ShellReport
from cronstable.ports import tail_text
from cronstable.reporting.base import Message, Reporter, ReportError, job_environment

logger = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 1024
"""Bytes of stdout/stderr passed in one variable (the end of the stream)."""
OUTPUT_LOGGED = 4096


def _stream(text: str | None) -> str:
    kept, dropped = tail_text(text, STREAM_LIMIT)
    if not kept:
        return ""
    return f"[{dropped} bytes discarded]\n{kept}" if dropped else kept


def report_environment(message: Message) -> dict[str, str]:
    job = message.job
    v = message.variables
    command = job.config.command
    fields = {
        "JOB_NAME": job.name,
        "JOB_COMMAND": command if isinstance(command, str) else shlex.join(command),
        "JOB_SCHEDULE": job.schedule.text,
        "FAILED": "0" if message.success else "1",
        "FAIL_REASON": str(v.get("fail_reason") or v.get("reason") or ""),
        "RETCODE": "" if v.get("exit_code") is None else str(v["exit_code"]),
        "STDOUT": _stream(v.get("stdout")),
        "STDERR": _stream(v.get("stderr")),
    }
    ours = {
        "OUTCOME": str(
            v.get("outcome", message.moment if message.moment == "paused" else "missed")
        ),
        "MOMENT": message.moment,
        "SCHEDULED_TIME": str(v.get("scheduled_time", "")),
        "ATTEMPT": str(v.get("attempt", "")),
        "RUN_ID": str(v.get("run_id", "")),
        "REASON": str(v.get("reason", "")),
        "MISSED_COUNT": str(v.get("missed_count", "")),
        "PAUSE_SOURCE": str(v.get("pause_source") or ""),
        "PAUSE_REASON": str(v.get("pause_reason") or ""),
        "PAUSED_BY": str(v.get("paused_by") or ""),
        "PAUSED_SINCE": str(v.get("paused_since") or ""),
        "PAUSED_UNTIL": str(v.get("paused_until") or ""),
        "SUPPRESSED_COUNT": str(v.get("suppressed_count", 0)),
    }
    env = job_environment(job)
    for key, value in fields.items():
        env[f"YACRON_{key}"] = value
        env[f"CRONSTABLE_{key}"] = value
    for key, value in ours.items():
        env[f"CRONSTABLE_{key}"] = value
    return {k: v.replace("\0", "") for k, v in env.items()}


class ShellReporter(Reporter):
    key = "shell"

    async def send(self, settings: Any, message: Message) -> None:
        shell: ShellReport = settings
        assert shell.command is not None
        argv = (
            [shell.shell, "-c", shell.command]
            if isinstance(shell.command, str)
            else list(shell.command)
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=report_environment(message),
                start_new_session=True,
            )
        except OSError as exc:
            raise ReportError(f"cannot start the report command: {exc}") from None
        try:
            output, _ = await process.communicate()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(process.wait())
            raise
        text = output.decode("utf-8", "replace").strip()
        if text:
            logger.info(
                "Job %s: the shell report said: %s",
                message.job.name,
                text[-OUTPUT_LOGGED:],
                extra={"job": message.job.name},
            )
        if process.returncode != 0:
            raise ReportError(f"the report command exited with code {process.returncode}")
