"""``env_file``: one ``KEY=VALUE`` per line, as yacron reads it.

Blank lines and lines starting with ``#`` are skipped; spaces around the key
and the value are stripped; the value is taken as written (quotes included),
which is yacron's behaviour.  A later line for the same key wins.  A leading
``export`` (shell-style files) is ignored; a name with spaces is an error.
"""

from __future__ import annotations


class EnvFileError(ValueError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def parse_env_file(data: bytes) -> dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(
            f"not valid UTF-8 ({exc.reason})", data[: exc.start].count(b"\n") + 1
        ) from exc
    environ: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise EnvFileError(f"expected KEY=VALUE, got {line!r}", number)
        key, value = line.split("=", 1)
        key = key.strip(" \t")
        if key.startswith("export ") or key.startswith("export\t"):
            key = key[len("export") :].strip(" \t")  # shell-style files
        if not key or any(c.isspace() for c in key) or "\0" in key or "\0" in value:
            raise EnvFileError(f"invalid variable name {key!r}", number)
        environ[key] = value.strip(" \t")
    return environ
