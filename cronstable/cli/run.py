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

        from cronstable.cli.sides import source_error

        logging.getLogger("cronstable").error("%s", source_error(spec, exc))
        return 2

    async def main() -> int:
        return await Daemon(source).run()

    return asyncio.run(main())
