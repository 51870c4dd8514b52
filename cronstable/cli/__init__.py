"""Command-line interface.

Each subcommand lives in its own module and is imported only when chosen, so
``--version``, ``validate``, ``schema``, ``job-set-id`` and ``next`` never
import asyncio or aiohttp; only ``run`` (the daemon) does.

Exit codes: 0 success (valid), 1 invalid configuration, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

from cronstable import __version__
from cronstable.platform import DEFAULT_CONFIG_PATH

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
_FORMS = (
    "PATH is a file or directory, git:REPO@REF[:SUBDIR] (a local repository at a ref), "
    "a source spec (git+https://…, git://…, etcd://HOST:PORT/PREFIX/), or - (standard "
    "input; also /dev/stdin or a FIFO), read once as one file without include or env_file."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cronstable",
        description="A GitOps cron daemon: schedules from a watched repository.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    # yacron's flags, kept so existing deployments and scripts work unchanged
    parser.add_argument(
        "-c",
        "--config",
        metavar="PATH",
        default=None,
        help=f"configuration file or directory (default {DEFAULT_CONFIG_PATH})",
    )
    parser.add_argument(
        "-v",
        "--validate-config",
        action="store_true",
        help="with -c: validate the configuration and exit (yacron's spelling of 'validate')",
    )
    parser.add_argument(
        "-l",
        "--log-level",
        default="INFO",
        choices=LOG_LEVELS,
        type=str.upper,
        help="log level (default INFO)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="daemon log format: text, or one JSON object per line (default text)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # the daemon's options are also accepted after "run" (cronstable run -c PATH -l DEBUG)
    daemon_options = argparse.ArgumentParser(add_help=False)
    daemon_options.add_argument(
        "-c", "--config", metavar="PATH", default=argparse.SUPPRESS, help="configuration path"
    )
    daemon_options.add_argument(
        "-l",
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help="log level",
    )
    daemon_options.add_argument(
        "--log-format", choices=["text", "json"], default=argparse.SUPPRESS, help="log format"
    )
    p = sub.add_parser("run", parents=[daemon_options], help="run the daemon in the foreground")
    p.add_argument("path", nargs="?", default=None, metavar="PATH", help="same as -c PATH")
    p.add_argument(
        "--source",
        metavar="SPEC",
        default=None,
        help="where the configuration comes from: a path, git+https://…, git://…, "
        "git+ssh://…, git+file://… (?ref=&path=&interval=), etcd://HOST:PORT/PREFIX/, "
        "or - / a FIFO (read at start and on each SIGHUP)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="where remote sources keep their last applied revision "
        "(default /var/cache/cronstable as root, else $XDG_CACHE_HOME/cronstable)",
    )

    p = sub.add_parser(
        "validate",
        help="validate configurations; exit 1 if any is invalid",
        description=_FORMS,
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="each path is its own configuration")

    p = sub.add_parser(
        "job-set-id", help="print the job-set id of a configuration", description=_FORMS
    )
    p.add_argument("path", nargs="?", default=None, metavar="PATH")

    sub.add_parser("schema", help="print the JSON Schema of configuration files")

    p = sub.add_parser(
        "diff",
        help="show what applying NEW over OLD changes; exit 0 same, 1 changed, 2 error",
        description="Each side is a path, a source spec (git+https://…, git://…, "
        "etcd://HOST:PORT/PREFIX/), or git:REPO@REF[:SUBDIR] for a local repository at a ref "
        "(a pull-request check: cronstable diff git:.@origin/main git:.@HEAD).",
    )
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    p.add_argument(
        "--at",
        metavar="TIME",
        default=None,
        help="show next fires from this ISO 8601 time (default now; UTC without an offset)",
    )

    p = sub.add_parser(
        "next", help="print the next fires of every job (JOB<TAB>TIME)", description=_FORMS
    )
    p.add_argument("path", nargs="?", default=None, metavar="PATH")
    p.add_argument(
        "-n", "--count", type=int, default=1, metavar="N", help="fires per job (default 1)"
    )
    p.add_argument(
        "--after",
        metavar="TIME",
        default=None,
        help="ISO 8601 time to start from (default now; UTC when it has no offset)",
    )
    return parser


def run_cli(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command: str | None = args.command
    if command == "validate" or (command is None and args.validate_config):
        from cronstable.cli.validate import cmd_validate

        paths = getattr(args, "paths", None) or [args.config or DEFAULT_CONFIG_PATH]
        return cmd_validate(paths)
    if command == "job-set-id":
        from cronstable.cli.validate import cmd_job_set_id

        return cmd_job_set_id(args.path or args.config or DEFAULT_CONFIG_PATH)
    if command == "schema":
        from cronstable.cli.schema import cmd_schema

        return cmd_schema()
    if command == "diff":
        from cronstable.cli.diff import cmd_diff

        return cmd_diff(args.old, args.new, args.format, args.at)
    if command == "next":
        from cronstable.cli.next import cmd_next

        if args.count < 1:
            parser.error("-n must be at least 1")
        return cmd_next(args.path or args.config or DEFAULT_CONFIG_PATH, args.count, args.after)
    # "run", or yacron's plain `cronstable -c PATH`
    if command is None and args.config is None and not os.path.exists(DEFAULT_CONFIG_PATH):
        print(
            f"cronstable: no configuration at {DEFAULT_CONFIG_PATH}, the default.\n"
            "Start the daemon with `cronstable run PATH` (a configuration file or directory, "
            "or a source spec such as git+https://HOST/REPO.git); check one with "
            "`cronstable validate PATH`; see `cronstable --help` for every command.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from cronstable.cli.run import cmd_run

    spec = (
        getattr(args, "source", None)
        or getattr(args, "path", None)
        or args.config
        or DEFAULT_CONFIG_PATH
    )
    return cmd_run(spec, args.log_level, args.log_format, getattr(args, "cache_dir", None))
