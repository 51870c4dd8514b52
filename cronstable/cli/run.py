"""``cronstable run``: the daemon in the foreground."""

from __future__ import annotations

import asyncio
from pathlib import Path


def cmd_run(spec: str, log_level: str, log_format: str, cache_dir: str | None) -> int:
    from cronstable.logs import setup_logging
    from cronstable.runtime.daemon import Daemon
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import open_source

    setup_logging(log_level, log_format)
    try:
        source = open_source(spec, cache_dir=Path(cache_dir) if cache_dir else None)
    except SourceError as exc:
        import logging

        logging.getLogger("cronstable").error("%s", exc)
        return 2

    async def main() -> int:
        from cronstable.web.section import WebSection

        daemon = Daemon(source)
        daemon.add_section(WebSection(daemon.control))
        return await daemon.run()

    return asyncio.run(main())
