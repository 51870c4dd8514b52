"""Every OS-specific decision lives here (leaf module: imports nothing of cronstable)."""

from __future__ import annotations

import os
from datetime import UTC, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_CONFIG_PATH = "/etc/cronstable.d"
DEFAULT_SHELL = "/bin/sh"


@lru_cache(maxsize=1)
def local_timezone() -> tzinfo:
    """The daemon's local zone, with its DST rules (not just today's offset).

    ``TZ`` wins, then ``/etc/localtime``; UTC when neither names a zone.
    """
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "/zoneinfo/"
        if marker in target:
            return ZoneInfo(target.split(marker, 1)[1])
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ZoneInfoNotFoundError, ValueError):
        return UTC
