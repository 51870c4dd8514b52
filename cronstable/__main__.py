"""``python -m cronstable`` and the ``cronstable`` console script."""

from __future__ import annotations

import sys

ONE_SHOT = frozenset({"validate", "job-set-id", "diff", "next", "schema", "import"})
"""Commands that load a configuration, print and exit."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:  # the fastest path of all: no argparse
        from cronstable import __version__

        print(__version__)
        return 0
    if args[:1] in (["lock"], ["state"], ["xcom"]):  # a job's thin clients: no parser
        from cronstable.channel.commands import fast

        code = fast(args)
        if code is not None:
            return code
    if argv is None and args and args[0] in ONE_SHOT:
        # the process ends right after one load: the cyclic collector would only walk
        # every object the load made (a second at 100,000 jobs) and free nothing
        import gc

        gc.disable()
    import os

    from cronstable.cli import run_cli

    try:
        status = run_cli(args)
        if argv is None and args and args[0] in ONE_SHOT:
            # nothing is left to do but free what the load made, object by object (a
            # tenth of the load's time at 100,000 jobs): the process ends here instead
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status
    except BrokenPipeError:
        # `cronstable next … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
