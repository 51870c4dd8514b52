"""A real daemon and a real headless Chromium: the dashboard loads, starts a job, shows it,
and shows a stuck run and a stale job."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiohttp
import pytest
from cdp import browser, chromium_binary
from daemon_proc import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {name: dashboard, fromEnvVar: DASH_TOKEN, scopes: [read, trigger]}
jobs:
  - name: greet
    command: echo hello from the dashboard
    schedule: "@yearly"
    enabled: false
  - name: broken
    command: exit 3
    schedule: "*/30 * * * *"
  - name: every minute
    command: "true"
    schedule: "* * * * *"
    suspend: {reason: on hold for the audit}
  - name: long
    command: sleep 30
    schedule: "@yearly"
    onStuck: {expectedDuration: 1s}
  - name: stale one
    command: "true"
    schedule: "@yearly"
    onStale: {maxSuccessAge: 1s}
"""
TOKEN = "d4shb0ard-token"


def _start_daemon(tmp_path: Path) -> DaemonProcess:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "cronstable.yaml").write_text(CONFIG)
    daemon = DaemonProcess(
        None,
        tmp_path / "daemon.log",
        args=["-c", str(tmp_path / "conf")],
        env=os.environ | {"DASH_TOKEN": TOKEN},
    )
    return daemon.start()


@pytest.mark.asyncio
async def test_the_dashboard_starts_a_job_and_shows_its_outcome(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium; make deps)")
    daemon = _start_daemon(tmp_path)
    daemon_procs.append(daemon)
    log = daemon.log
    url = await asyncio.to_thread(daemon.url, 30)
    try:
        async with browser(binary, tmp_path / "profile") as page:
            await page.send("Page.enable")
            await page.send("Log.enable")
            await page.send("Runtime.enable")
            await page.send("Page.navigate", url=f"{url}/")
            await page.wait_for("document.readyState === 'complete'")
            # the token is asked for, then kept in the browser session
            message = await page.wait_for("document.getElementById('message').textContent")
            assert "token" in message
            await page.evaluate(
                f"document.getElementById('token').value = {json.dumps(TOKEN)};"
                "document.getElementById('token-save').click()"
            )
            assert await page.evaluate("sessionStorage.getItem('cronstable-token')") == TOKEN
            await page.wait_for("document.querySelectorAll('#jobs tbody tr').length === 5")
            await page.wait_for("document.getElementById('live').textContent === 'live'")
            # a pause shows who paused and why (the repository's suspend here)
            held = await page.evaluate(
                'document.querySelector(\'tr[data-job="every minute"] [data-pause="config"]\')'
                ".textContent"
            )
            assert held.startswith("paused by the repository (suspend) since ")
            assert held.endswith(": on hold for the audit")
            revision = await page.evaluate("document.getElementById('revision').textContent")
            assert revision.startswith("revision sha256:")
            for job in ("greet", "broken"):
                await page.evaluate(f"document.querySelector('[data-start=\"{job}\"]').click()")
                outcome = "succeeded" if job == "greet" else "failed"
                await page.wait_for(
                    f"document.querySelector('tr[data-job=\"{job}\"] [data-outcome]')"
                    f".dataset.outcome === '{outcome}'"
                )
            assert (
                await page.evaluate("document.getElementById('message').textContent")
            ).startswith("Started broken: broken@")
            # a run past its expectedDuration gets a stuck badge and a line saying which;
            # a job without a success for maxSuccessAge a stale one (/status is read
            # again every 10 s while the event stream is live)
            await page.evaluate("document.querySelector('[data-start=\"long\"]').click()")
            stuck = await page.wait_for(
                'document.querySelector(\'tr[data-job="long"] [data-alert="stuck"]\')?.textContent',
                timeout=30,
            )
            assert stuck.startswith("stuck: run long@") and "(expectedDuration)" in stuck
            assert (
                await page.evaluate(
                    "document.querySelector('tr[data-job=\"long\"] [data-alert-badge]').textContent"
                )
                == "stuck"
            )
            stale = await page.evaluate(
                'document.querySelector(\'tr[data-job="stale one"] [data-alert="stale"]\')'
                ".textContent"
            )
            assert stale.startswith("stale: no success yet, over maxSuccessAge 1.0 s")
            assert (
                await page.evaluate(
                    "document.querySelectorAll('tr[data-job=\"greet\"] [data-alert]').length"
                )
                == 0
            )
            # the timeline: a bar per run coloured by outcome, ticks for the next fires
            await page.wait_for("document.querySelectorAll('#timeline rect.run.succeeded').length")
            assert await page.evaluate(
                "document.querySelectorAll('#timeline rect.run.failed').length"
            )
            ticks = await page.evaluate("document.querySelectorAll('#timeline line.tick').length")
            assert 48 <= ticks <= 50  # "broken" fires every 30 minutes
            assert await page.evaluate("document.querySelectorAll('#timeline rect.band').length")
            await page.screenshot(tmp_path / "dashboard.png")
            # the fleet tab: GET /fleet, each job's next node and where it last ran
            await page.evaluate("document.getElementById('tab-fleet').click()")
            await page.wait_for("document.querySelectorAll('#fleet-jobs tbody tr').length === 5")
            assert await page.evaluate("document.getElementById('overview').hidden")
            where = await page.evaluate(
                "document.querySelector('tr[data-fleet-job=\"broken\"]').dataset.runsNext"
            )
            assert where == "every node"
            await page.wait_for(
                "document.querySelector('tr[data-fleet-job=\"broken\"]').textContent"
                ".includes('failed')"
            )
            notes = await page.evaluate("document.getElementById('fleet-notes').textContent")
            assert "no leader election" in notes
            await page.screenshot(tmp_path / "fleet.png")
            # the audit tab: GET /audit's newest entries (here the revision the daemon started on)
            await page.evaluate("document.getElementById('tab-audit').click()")
            await page.wait_for("document.querySelector('#audit-entries tr[data-audit]') !== null")
            assert await page.evaluate("document.getElementById('fleet').hidden")
            first = await page.evaluate(
                "(() => { const row = document.querySelector('#audit-entries tr[data-audit]');"
                " return [row.dataset.outcome, row.dataset.trigger, row.textContent]; })()"
            )
            assert first[:2] == ["applied", "start"] and "v1:" in first[2]
            await page.screenshot(tmp_path / "audit.png")
            violations = [
                event["params"]["entry"]["text"]
                for event in page.events
                if event["method"] == "Log.entryAdded"
                and "Content Security Policy" in event["params"]["entry"].get("text", "")
            ]
            assert violations == []
            print(f"screenshot: {tmp_path / 'dashboard.png'}")
        assert "POST /jobs/{name}/start (job greet) by dashboard from 127.0.0.1" in log.read_text()
    finally:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            cancel = f"{url}/jobs/long/cancel"  # the stuck run, so that the daemon stops now
            async with http.post(cancel, headers={"Authorization": f"Bearer {TOKEN}"}) as answer:
                assert answer.status == 200
        assert await asyncio.to_thread(daemon.stop, 20) == 0
