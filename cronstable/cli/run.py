"""``cronstable run``: the daemon in the foreground."""

from __future__ import annotations

import asyncio


def cmd_run(path: str, log_level: str, log_format: str) -> int:
    from cronstable.logs import setup_logging
    from cronstable.runtime.daemon import Daemon

    setup_logging(log_level, log_format)

    async def main() -> int:
        return await Daemon(path).run()

    return asyncio.run(main())
