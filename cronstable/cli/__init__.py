"""Command-line interface.

Each subcommand lives in its own module and is imported only when chosen, so
``--version``, ``validate``, ``schema``, ``job-set-id`` and ``next`` never
import asyncio or aiohttp; ``run`` (the daemon) and ``state`` (the store's
clients are asynchronous) do.

Exit codes: 0 success (valid), 1 invalid configuration, 2 usage error; the
commands that ask a daemon (status, start, cancel, runs, reload, pause, resume,
backfill, audit) add 3 (the daemon cannot be reached or failed) and 4 (unauthorized), see
``cli/client.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from cronstable import __version__
from cronstable.cli.exits import EXIT_USAGE
from cronstable.platform import DEFAULT_CONFIG_PATH

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
_FORMS = (
    "PATH is a file or directory, git:REPO@REF[:SUBDIR] (a local repository at a ref), "
    "a source spec (git+https://…, git://…, etcd://HOST:PORT/PREFIX/), or - (standard "
    "input; also /dev/stdin or a FIFO), read once as one file without include or env_file."
)

if TYPE_CHECKING:
    from cronstable.config.limits import Limits


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors go through :func:`redact`: argparse quotes
    the argument it could not place, and that argument may be a spec with a password."""

    def error(self, message: str) -> NoReturn:
        from cronstable.redact import redact

        super().error(redact(message))


def _size(text: str) -> int:
    from cronstable.config.limits import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    from cronstable.config.limits import parse_count

    try:
        return parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit_options() -> _Parser:
    """--max-file-bytes, --max-revision-bytes, --max-yaml-nodes (run, validate, diff)."""
    options = _Parser(add_help=False)
    group = options.add_argument_group("input limits (a revision past one is refused)")
    group.add_argument(
        "--max-file-bytes",
        type=_size,
        default=None,
        metavar="SIZE",
        help="largest configuration or env file read (default 4M; K, M, G suffixes)",
    )
    group.add_argument(
        "--max-revision-bytes",
        type=_size,
        default=None,
        metavar="SIZE",
        help="all the files of a revision together (default 64M)",
    )
    group.add_argument(
        "--max-yaml-nodes",
        type=_count,
        default=None,
        metavar="N",
        help="YAML values in a revision, each alias use counted as a copy (default 250000)",
    )
    return options


def limits_from(args: argparse.Namespace) -> Limits:
    """The Limits the command line asks for (defaults for the options not given)."""
    from cronstable.config.limits import Limits

    given = {
        name: value
        for name in ("max_file_bytes", "max_revision_bytes", "max_yaml_nodes")
        if (value := getattr(args, name, None)) is not None
    }
    return Limits(**given)


NODE_NAME_ENV = "CRONSTABLE_NODE_NAME"
_NODE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _node_name(text: str) -> str:
    if not text or len(text) > 253 or not set(text) <= _NODE_NAME_CHARS or text[0] in ".-":
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a node name (letters, digits, '.', '_', '-'; at most 253)"
        )
    return text


def _seconds(what: str, most: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds above 0 and at most ``most``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 < value <= most:
            raise argparse.ArgumentTypeError(
                f"the {what} must be more than 0 and at most {most:g} s"
            )
        return value

    return parse


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of threads") from None
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError("the executor workers must be from 1 to 1024")
    return value


def _moment(text: str) -> str:
    """An argparse type: an ISO 8601 time (UTC without an offset), as ISO text with one."""
    from datetime import UTC, datetime

    given = text.strip()
    try:
        moment = datetime.fromisoformat(given[:-1] + "+00:00" if given[-1:] in "zZ" else given)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (like 2026-05-01T09:00:00+02:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


_settle_seconds = _seconds("settle time", 60)
_timeout = _seconds("timeout", 3600)


def _client_options() -> _Parser:
    """--url, --token-file, --json, --timeout, --cacert (the commands that ask a daemon)."""
    options = _Parser(add_help=False)
    group = options.add_argument_group("daemon")
    group.add_argument(
        "--url",
        default=None,
        help="the daemon's API: http://HOST:PORT, https://HOST:PORT or unix:///PATH "
        "(default $CRONSTABLE_URL, else the local socket: /run/cronstable/api.sock as root, "
        "$XDG_RUNTIME_DIR/cronstable.sock)",
    )
    group.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="file holding the API token (default: $CRONSTABLE_TOKEN)",
    )
    group.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
    group.add_argument(
        "--timeout",
        type=_timeout,
        default=10.0,
        metavar="SECONDS",
        help="the longest the whole request may take, connecting to the last byte of the "
        "answer (default 10)",
    )
    group.add_argument(
        "--cacert",
        metavar="FILE",
        default=None,
        help="CA certificates (PEM) that sign an https:// daemon's certificate "
        "(default: the system's)",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cronstable",
        description="A GitOps cron daemon: schedules from a watched repository.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument(
        "--third-party-licenses",
        action="store_true",
        help="print the name, version and license of every installed dependency, and exit",
    )
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
        default=None,
        choices=LOG_LEVELS,
        type=str.upper,
        help="log level (default INFO); given, it wins over the configuration's logging section",
    )
    parser.add_argument(
        "--log-format",
        default=None,
        choices=["text", "json"],
        help="daemon log format: text, or one JSON object per line (default text); "
        "given, it wins over the configuration's logging section",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # the daemon's options are also accepted after "run" (cronstable run -c PATH -l DEBUG)
    daemon_options = _Parser(add_help=False)
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
    limit_options = _limit_options()
    p = sub.add_parser(
        "run", parents=[daemon_options, limit_options], help="run the daemon in the foreground"
    )
    p.add_argument("path", nargs="?", default=None, metavar="PATH", help="same as -c PATH")
    p.add_argument(
        "--source",
        metavar="SPEC",
        default=None,
        help="where the configuration comes from: a path, git+https://…, git://…, "
        "git+ssh://…, git+file://… (?ref=&path=&interval=&timeout=), etcd://HOST:PORT/PREFIX/, "
        "etcds://HOST:PORT/PREFIX/ (?ca=&cert=&key=), or - / a FIFO (read at start and on "
        "each SIGHUP)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="where remote sources keep their last applied revision "
        "(default /var/cache/cronstable as root, else $XDG_CACHE_HOME/cronstable)",
    )

    p.add_argument(
        "--node-name",
        type=_node_name,
        default=None,
        metavar="NAME",
        help=f"this node's name in a cluster (default ${NODE_NAME_ENV}, else the hostname); "
        "unique among the daemons that follow one configuration",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        default=None,
        help="where a state section with backend filesystem keeps this node's records "
        "(default /var/lib/cronstable as root, else $XDG_STATE_HOME/cronstable)",
    )
    p.add_argument(
        "--runtime-dir",
        metavar="DIR",
        default=None,
        help="the daemon's runtime directory, where each run gets its socket (in DIR/runs) "
        "for cronstable state get and lock (default $RUNTIME_DIRECTORY, else /run/cronstable "
        "as root, else $XDG_RUNTIME_DIR/cronstable-runs)",
    )
    p.add_argument(
        "--settle",
        type=_settle_seconds,
        default=None,
        metavar="SECONDS",
        help="a directory source uses a tree once two reads this far apart agree; "
        "raise it above the longest pause of a writer that saves files in place (default 0.2)",
    )
    p.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="the event loop: uvloop when installed (pip install 'cronstable[speedups]'), "
        "else asyncio's (auto, the default); uvloop insists on it, asyncio declines it",
    )
    p.add_argument(
        "--executor-workers",
        type=_workers,
        default=None,
        metavar="N",
        help="threads of the pool that runs the daemon's blocking work (configuration "
        "loads, secrets, metrics), named cronstable-worker (default: the usable CPUs + 4, "
        "at most 32)",
    )

    p = sub.add_parser(
        "validate",
        parents=[limit_options],
        help="validate configurations; exit 1 if any is invalid",
        description=_FORMS,
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="each path is its own configuration")

    p = sub.add_parser(
        "job-set-id", help="print the job-set id of a configuration", description=_FORMS
    )
    p.add_argument("path", nargs="?", default=None, metavar="PATH")

    sub.add_parser("schema", help="print the JSON Schema of configuration files")

    p = sub.add_parser("import", help="convert another cron's file to cronstable YAML")
    p.add_argument("kind", choices=["crontab"], metavar="KIND", help="crontab")
    p.add_argument("file", metavar="FILE", help="the crontab to convert")
    p.add_argument(
        "--schema",
        default="cronstable.schema.json",
        metavar="PATH",
        help="the $schema of the modeline written first (default cronstable.schema.json)",
    )

    p = sub.add_parser(
        "diff",
        parents=[limit_options],
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

    client = _client_options()
    exits = "exit 0 done, 1 refused, 2 usage, 3 unreachable, 4 unauthorized"
    p = sub.add_parser(
        "status",
        parents=[client],
        help=f"show a running daemon's revision and jobs ({exits})",
    )
    p.add_argument(
        "--fleet",
        action="store_true",
        help="the whole cluster as the daemon sees it in its stores (GET /fleet): every "
        "member, and per job its next fire, the node that will run it and where it last ran",
    )
    p = sub.add_parser("start", parents=[client], help="start a job now, even a disabled one")
    p.add_argument("job", metavar="JOB")
    p = sub.add_parser("cancel", parents=[client], help="stop a job's running runs")
    p.add_argument("job", metavar="JOB")
    p.add_argument("--run", metavar="ID", default=None, help="stop only this run")
    p = sub.add_parser(
        "pause",
        parents=[client],
        help="pause a job: its fires are skipped until resumed (or --until)",
        description="Pause JOB through the daemon's API (POST /jobs/{name}/pause, scope "
        "trigger): its scheduled fires are skipped and counted as paused, never caught up; "
        "a start on request still runs. The pause is kept in the state store (every node "
        "sharing it holds it) and is apart from the repository's suspend.",
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument("--reason", required=True, help="why (shown in /status and reports)")
    p.add_argument(
        "--until",
        type=_moment,
        default=None,
        metavar="TIME",
        help="ISO 8601 time the pause ends by itself (UTC without an offset)",
    )
    p = sub.add_parser(
        "resume",
        parents=[client],
        help="lift a job's pause asked through the API (not the repository's suspend)",
    )
    p.add_argument("job", metavar="JOB")
    p = sub.add_parser(
        "backfill",
        parents=[client],
        help="run every past fire of a job in a range, one after another",
        description="Run every fire of JOB's schedule at or after --from and before --to "
        "(POST /jobs/{name}/backfill, scope trigger), one after another, each with "
        "CRONSTABLE_SCHEDULED_TIME set to its fire, then follow the progress. A range of "
        "more than --max fires is refused; a paused job is refused without --ignore-pause. "
        "Exit 1 also when a run did not succeed or the backfill stopped early.",
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument(
        "--from",
        dest="start",
        type=_moment,
        required=True,
        metavar="T1",
        help="the first fire at or after this ISO 8601 time (UTC without an offset)",
    )
    p.add_argument(
        "--to",
        dest="end",
        type=_moment,
        required=True,
        metavar="T2",
        help="fires before this time, at the latest now (UTC without an offset)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the fires, run nothing")
    p.add_argument(
        "--max",
        type=int,
        default=100,
        metavar="N",
        help="refuse a range holding more than N fires (default 100)",
    )
    p.add_argument("--ignore-pause", action="store_true", help="backfill a paused job all the same")
    p.add_argument("--no-wait", action="store_true", help="start it and exit, without following it")
    p = sub.add_parser("runs", parents=[client], help="list a job's recent runs")
    p.add_argument("job", metavar="JOB")
    p.add_argument("--output", action="store_true", help="also print each run's captured output")
    sub.add_parser("reload", parents=[client], help="ask the daemon to look for a new revision now")
    p = sub.add_parser(
        "audit",
        parents=[client],
        help="list the revisions the daemon applied or rejected, and what triggered each",
        description="The daemon's audit trail (GET /audit, scope read), newest first, page "
        "after page: each revision applied or rejected, when, its job-set id, and its "
        "trigger (start, poll, watch, sighup, a GitHub webhook's delivery and sender, an API "
        "reload and its token's name). The daemon keeps the last 1,000 (in the state store "
        f"when it has one). {exits}.",
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the newest N entries")

    _state_parser(sub)

    _lock_parser(sub)
    _xcom_parser(sub)

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


_STATE_HELP = (
    "The records a daemon keeps with a state section: its pending retries, last fires, "
    "running runs, @reboot markers and run histories. The store is the one the "
    "configuration's state section names (and its cluster section's etcd, for backend "
    "etcd), in --state-dir for backend filesystem. A running daemon keeps its own copy "
    "in memory and writes it again: remove records of a stopped daemon, or stale ones. "
    "Exit 0 done, 1 no such record or an invalid configuration, 2 usage, no state "
    "section, a store that cannot be used, or rm refused without --yes."
)
_RM_HELP = (
    "Remove records: each KEY, or with --job every record of that job on this node. "
    "More than one record, or the record of a run whose process is still alive here, "
    "needs --yes. Removing the running/ record of a live run makes a daemon started "
    "later blind to it: a Forbid job may then start a second copy."
)


def _state_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``state ls|get|rm`` and the options that say where the records are."""
    where = _Parser(add_help=False)
    group = where.add_argument_group("where the records are")
    group.add_argument(
        "-c",
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the configuration the daemon runs, for its state and cluster sections "
        f"(any form validate takes; default {DEFAULT_CONFIG_PATH})",
    )
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the daemon's --state-dir, for backend filesystem "
        "(default /var/lib/cronstable as root, else $XDG_STATE_HOME/cronstable)",
    )
    group.add_argument(
        "--node-name",
        type=_node_name,
        default=argparse.SUPPRESS,
        metavar="NAME",
        help=f"the daemon's --node-name (default ${NODE_NAME_ENV}, else the hostname)",
    )
    state = sub.add_parser(
        "state",
        parents=[where],
        help="list, show or remove the durable records of a daemon",
        description=_STATE_HELP,
    )
    actions = state.add_subparsers(dest="state_action", metavar="ACTION", required=True)
    p = actions.add_parser(
        "ls",
        parents=[where],
        help="list this node's records (KEY KIND JOB SUMMARY)",
        description="List this node's records, or with --all-nodes every node's and the "
        "cluster's. Keys are decoded: KIND/NAME for this node's, nodes/NODE/KIND/NAME and "
        "cluster/KIND/NAME for the others.",
    )
    p.add_argument("prefix", nargs="?", default=None, metavar="PREFIX", help="keys starting so")
    p.add_argument(
        "--all-nodes", action="store_true", help="every node's records and the cluster's"
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p = actions.add_parser(
        "get",
        parents=[where],
        help="print one record as JSON; exit 1 when there is none (in a job: its state)",
        description="Print the record at KEY (KIND/NAME, nodes/NODE/KIND/NAME or "
        "cluster/KIND/NAME) as JSON; --format json prints {key, record}, as ls does. "
        "In a job cronstable runs ($CRONSTABLE_RUN_SOCKET and $CRONSTABLE_RUN_TOKEN set) "
        "and without -c, --state-dir or --node-name, KEY is a JOB instead (default: the "
        "job's own), and its daemon answers with the job's last run, last success, pending "
        "retry and runs going; exit 0, 1 no such job, 2 usage, 3 the daemon does not answer, "
        "4 the run's token is refused.",
    )
    p.add_argument("key", nargs="?", default=None, metavar="KEY|JOB")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument(
        "--timeout",
        type=_timeout,
        default=10.0,
        metavar="SECONDS",
        help="in a job: the longest the daemon may take to answer (default 10)",
    )
    p = actions.add_parser("rm", parents=[where], help="remove records", description=_RM_HELP)
    p.add_argument("keys", nargs="*", metavar="KEY", help="a key as ls shows it")
    p.add_argument("--job", metavar="NAME", default=None, help="every record of this job here")
    p.add_argument(
        "--yes", action="store_true", help="remove more than one record, or a live run's"
    )


_LOCK_HELP = (
    "In a job cronstable runs: hold the lock NAME while CMD runs, on this node or, with a "
    "cluster section, across the cluster (through its store, renewed while CMD runs, freed "
    "when it ends or its node dies); takers wait first come, first served. Exit: CMD's "
    "status (128+N when signal N killed it); before CMD starts 2 usage, 3 the daemon does "
    "not answer, 4 the run's token is refused, 75 not held within --wait, 126/127 CMD "
    "cannot be run; 69 when the lock was lost while CMD ran (CMD is sent SIGTERM, then "
    "SIGKILL 10 s later). Signals the command receives are passed on to CMD."
)


def _lock_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``lock NAME [--wait D] -- CMD...`` (the command after ``--`` is split off first)."""
    p = sub.add_parser(
        "lock",
        help="in a job: run CMD while holding the named lock NAME (cronstable lock NAME -- CMD)",
        description=_LOCK_HELP,
        usage="cronstable lock [-h] [--wait D] [--timeout SECONDS] NAME -- CMD [ARG ...]",
    )
    p.add_argument("name", metavar="NAME", help="the lock: 1-128 of A-Z a-z 0-9 . _ : @ + / -")
    p.add_argument("stray", nargs="*", help=argparse.SUPPRESS)  # a CMD without the --
    p.add_argument(
        "--wait",
        type=_wait,
        default=None,
        metavar="D",
        help="give up (exit 75) when the lock is not held within D: seconds, or 30s, 5m, 1h "
        "(default: wait as long as the run lives; 0: do not wait)",
    )
    p.add_argument(
        "--timeout",
        type=_timeout,
        default=10.0,
        metavar="SECONDS",
        help="the longest the daemon may take to take the request (default 10)",
    )


_XCOM_HELP = (
    "In a workflow's task cronstable runs: leave a value for the tasks that depend on this "
    "one (push), or read one an earlier task of the same workflow run left (pull). A value "
    "is UTF-8 text, at most 64 KiB; a workflow run's values together at most 1 MiB. A task "
    "may also write files into $CRONSTABLE_XCOM_DIR, one a key. push exits 0, 1 refused "
    "(a bad key or value, over a limit), 2 usage (not a workflow's task), 3 the daemon "
    "does not answer, 4 the token is refused; pull prints the value as it was left and "
    "exits 0, 1 no such value, 2, 3, 4 alike."
)


def _xcom_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``xcom push KEY VALUE``, ``xcom pull TASK KEY``."""
    xcom = sub.add_parser(
        "xcom", help="in a workflow's task: pass values between tasks", description=_XCOM_HELP
    )
    actions = xcom.add_subparsers(dest="xcom_action", metavar="ACTION", required=True)
    timeout = _Parser(add_help=False)
    timeout.add_argument(
        "--timeout",
        type=_timeout,
        default=10.0,
        metavar="SECONDS",
        help="the longest the daemon may take to answer (default 10)",
    )
    p = actions.add_parser(
        "push", parents=[timeout], help="leave VALUE under KEY (VALUE - : standard input)"
    )
    p.add_argument("key", metavar="KEY", help="1-128 of A-Z a-z 0-9 _ . -")
    p.add_argument("value", metavar="VALUE")
    p = actions.add_parser(
        "pull", parents=[timeout], help="print the value task TASK left under KEY"
    )
    p.add_argument(
        "task", metavar="TASK", help="a task of the same workflow (TASK or WORKFLOW.TASK)"
    )
    p.add_argument("key", metavar="KEY")


def _wait(text: str) -> float:
    from cronstable.channel.commands import parse_wait

    try:
        return parse_wait(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``lock``'s arguments and its CMD (what follows the first ``--``); None: no ``--``."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    if "lock" not in argv[:cut]:
        return argv, None
    return argv[:cut], argv[cut + 1 :]


def _in_run(args: argparse.Namespace) -> bool:
    """Whether ``state get`` is the job-side one: in a run, without the store's options."""
    from cronstable.channel.commands import in_run

    if not in_run():
        return False
    return all(
        getattr(args, option, None) is None for option in ("config", "state_dir", "node_name")
    )


def run_cli(argv: list[str]) -> int:
    parser = build_parser()
    argv, lock_command = _split_command(argv)
    args = parser.parse_args(argv)
    command: str | None = args.command
    if args.third_party_licenses:
        from cronstable.cli.licenses import cmd_third_party_licenses

        return cmd_third_party_licenses()
    if command == "validate" or (command is None and args.validate_config):
        from cronstable.cli.validate import cmd_validate

        paths = getattr(args, "paths", None) or [args.config or DEFAULT_CONFIG_PATH]
        return cmd_validate(paths, limits_from(args))
    if command == "job-set-id":
        from cronstable.cli.validate import cmd_job_set_id

        return cmd_job_set_id(args.path or args.config or DEFAULT_CONFIG_PATH)
    if command == "schema":
        from cronstable.cli.schema import cmd_schema

        return cmd_schema()
    if command == "import":
        from cronstable.cli.import_crontab import cmd_import_crontab

        return cmd_import_crontab(args.file, args.schema)
    if command == "diff":
        from cronstable.cli.diff import cmd_diff

        return cmd_diff(args.old, args.new, args.format, args.at, limits_from(args))
    if command == "status" and args.fleet:
        from cronstable.cli.fleet import cmd_fleet

        return cmd_fleet(
            url=args.url,
            token_file=args.token_file,
            as_json=args.json,
            timeout=args.timeout,
            cafile=args.cacert,
        )
    if command == "audit":
        from cronstable.cli.audit import cmd_audit

        return cmd_audit(
            url=args.url,
            token_file=args.token_file,
            as_json=args.json or args.format == "json",
            limit=args.limit,
            timeout=args.timeout,
            cafile=args.cacert,
        )
    if command in ("status", "start", "cancel", "runs", "reload", "pause", "resume"):
        from cronstable.cli.client import cmd_client

        body = None
        if command == "pause":
            body = {"reason": args.reason}
            if args.until is not None:
                body["until"] = args.until
        return cmd_client(
            command,
            url=args.url,
            token_file=args.token_file,
            as_json=args.json,
            timeout=args.timeout,
            cafile=args.cacert,
            job=getattr(args, "job", None),
            run=getattr(args, "run", None),
            show_output=getattr(args, "output", False),
            body=body,
        )
    if command == "backfill":
        from cronstable.cli.backfill import cmd_backfill

        request: dict[str, object] = {"from": args.start, "to": args.end, "max": args.max}
        if args.dry_run:
            request["dryRun"] = True
        if args.ignore_pause:
            request["ignorePause"] = True
        return cmd_backfill(
            args.job,
            request,
            url=args.url,
            token_file=args.token_file,
            as_json=args.json,
            timeout=args.timeout,
            cafile=args.cacert,
            wait=not args.no_wait,
        )
    if command == "lock":
        from cronstable.channel.commands import cmd_lock

        if lock_command is None or args.stray:
            parser.error("lock: give the command after --: cronstable lock NAME -- CMD ...")
        return cmd_lock(args.name, args.wait, lock_command, args.timeout)
    if command == "xcom":
        from cronstable.channel.commands import cmd_xcom_pull, cmd_xcom_push

        if args.xcom_action == "push":
            return cmd_xcom_push(args.key, args.value, args.timeout)
        return cmd_xcom_pull(args.task, args.key, args.timeout)
    if command == "state" and args.state_action == "get" and _in_run(args):
        from cronstable.channel.commands import cmd_state_get

        return cmd_state_get(args.key, args.timeout)
    if command == "state":
        from cronstable.cli.state import cmd_state
        from cronstable.platform import default_state_dir

        action: str = args.state_action
        if action == "get" and args.key is None:
            parser.error("state get: give the KEY (in a job cronstable runs: JOB, or nothing)")
        if action == "rm" and bool(args.keys) == (args.job is not None):
            print("cronstable state rm: give KEY... or --job NAME, not both", file=sys.stderr)
            return EXIT_USAGE
        return cmd_state(
            action,
            config=args.config or DEFAULT_CONFIG_PATH,
            node=_node_name_of(args, parser),
            state_dir=getattr(args, "state_dir", None) or default_state_dir(),
            prefix=getattr(args, "prefix", None),
            all_nodes=getattr(args, "all_nodes", False),
            fmt=getattr(args, "format", "text"),
            keys=[args.key] if action == "get" else getattr(args, "keys", None),
            job=getattr(args, "job", None),
            yes=getattr(args, "yes", False),
        )
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
    return cmd_run(
        spec,
        args.log_level,
        args.log_format,
        getattr(args, "cache_dir", None),
        limits_from(args),
        settle=getattr(args, "settle", None),
        node_name=_node_name_of(args, parser),
        state_dir=getattr(args, "state_dir", None),
        loop=getattr(args, "loop", "auto"),
        executor_workers=getattr(args, "executor_workers", None),
        runtime_dir=getattr(args, "runtime_dir", None),
    )


def _node_name_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    given: str | None = getattr(args, "node_name", None)
    if given is not None:
        return given
    name = os.environ.get(NODE_NAME_ENV)
    if name:
        try:
            return _node_name(name)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"{NODE_NAME_ENV}: {exc}")
    # a hostname with other characters still names the node (a cluster needs it unique)
    import socket

    host = "".join(c if c in _NODE_NAME_CHARS else "-" for c in socket.gethostname())
    return host.lstrip(".-") or "localhost"
