"""``cronstable schema``: print the JSON Schema of configuration files."""

from __future__ import annotations

import sys

from cronstable.cli.exits import EXIT_OK


def cmd_schema() -> int:
    from cronstable.config.jsonschema import schema_text

    sys.stdout.write(schema_text())
    return EXIT_OK
