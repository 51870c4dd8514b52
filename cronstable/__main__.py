"""``python -m cronstable`` and the ``cronstable`` console script."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:  # the fastest path of all: no argparse
        from cronstable import __version__

        print(__version__)
        return 0
    from cronstable.cli import run_cli

    return run_cli(args)


if __name__ == "__main__":
    sys.exit(main())
