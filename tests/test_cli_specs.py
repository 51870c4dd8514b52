"""The same spec everywhere: validate, next and job-set-id read every side diff reads
(``git:REPO@REF[:SUBDIR]``, source specs), and ``-`` / a FIFO / ``/dev/stdin`` as one
file read once, with include and env_file refused."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from git_server import WorkRepo

REPO = Path(__file__).resolve().parent.parent

DAILY = "jobs:\n  - {name: a, command: 'true', schedule: '@daily'}\n"
HOURLY = "jobs:\n  - {name: a, command: 'true', schedule: '@hourly'}\n"
WITH_INCLUDE = "include: [other.yaml]\njobs: []\n"
WITH_ENV_FILE = "jobs:\n  - {name: a, command: 'true', schedule: '@daily', env_file: a.env}\n"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def job_set_id_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "reference" / "c.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    result = cli("job-set-id", str(path))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> WorkRepo:
    work = WorkRepo.create(tmp_path / "git")
    work.commit({"ops/cron/c.yaml": DAILY}, "daily")
    work.git("branch", "daily")
    work.commit({"ops/cron/c.yaml": HOURLY}, "hourly")
    return work


# --------------------------------------------------------------------------- git sides


def test_validate_next_and_job_set_id_read_a_local_repository_at_a_ref(
    repo: WorkRepo, tmp_path: Path
) -> None:
    side = f"git:{repo.work}@daily:ops/cron"
    validated = cli("validate", side)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith(f"{side}: valid, 1 job")
    expected = job_set_id_of(tmp_path, DAILY)
    assert cli("job-set-id", side).stdout.strip() == expected
    fires = cli("next", side, "--after", "2026-01-01T12:00:00")
    assert fires.returncode == 0, fires.stderr
    assert fires.stdout == "a\t2026-01-02T00:00:00+00:00\n"
    # the work tree (HEAD) is hourly: the ref was read, not the files on disk
    assert cli("job-set-id", f"git:{repo.work}@HEAD:ops/cron").stdout.strip() != expected


def test_validate_next_and_job_set_id_read_a_source_spec(repo: WorkRepo, tmp_path: Path) -> None:
    repo.push("main", "daily")
    spec = f"git+file://{repo.bare}?ref=daily&path=ops/cron"
    validated = cli("validate", spec)
    assert validated.returncode == 0, validated.stderr
    assert "valid, 1 job" in validated.stdout
    assert cli("job-set-id", spec).stdout.strip() == job_set_id_of(tmp_path, DAILY)
    assert cli("next", spec, "--after", "2026-01-01T12:00:00").stdout == (
        "a\t2026-01-02T00:00:00+00:00\n"
    )


def test_an_unreadable_side_is_one_clear_line_and_exit_1(repo: WorkRepo) -> None:
    for command in ("validate", "next", "job-set-id"):
        result = cli(command, f"git:{repo.work}@no-such-branch")
        assert result.returncode == 1
        assert result.stderr.startswith(f"cronstable {command}: git:{repo.work}@no-such-branch: ")
        assert "unknown revision 'no-such-branch'" in result.stderr
        unknown = cli(command, "https://example.invalid/x.git")
        assert unknown.returncode == 1
        assert "unknown source scheme 'https'" in unknown.stderr
        assert "git+https://example.invalid/x.git" in unknown.stderr
        assert "Traceback" not in result.stderr + unknown.stderr


def _heavy_modules_imported(*args: str) -> tuple[object, list[str]]:
    """(the exit code, the heavy modules imported) of a command run in-process."""
    probe = (
        "import contextlib, io, sys\n"
        "from cronstable.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        code = main({list(args)!r})\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        "heavy = [m for m in ('asyncio', 'aiohttp', 'dulwich') if m in sys.modules]\n"
        "print(repr((code, heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    code, heavy = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    return code, heavy


def test_diff_and_validate_import_only_what_their_sides_need(
    repo: WorkRepo, tmp_path: Path
) -> None:
    """A path needs neither an event loop nor git; a local repository at a ref needs dulwich,
    still no event loop (only a remote source spec runs one)."""
    path = tmp_path / "hourly" / "c.yaml"
    path.parent.mkdir()
    path.write_text(HOURLY)
    at_ref = f"git:{repo.work}@daily:ops/cron"
    assert _heavy_modules_imported("diff", str(path.parent), str(path.parent)) == (0, [])
    assert _heavy_modules_imported("diff", at_ref, str(path.parent)) == (1, ["dulwich"])
    assert _heavy_modules_imported("validate", at_ref) == (0, ["dulwich"])


# --------------------------------------------------------------------------- read once


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_standard_input_is_one_configuration_file(name: str, tmp_path: Path) -> None:
    expected = job_set_id_of(tmp_path, DAILY)
    shown = "<stdin>" if name == "-" else name
    validated = cli("validate", name, stdin=DAILY)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout == f"{shown}: valid, 1 job, job-set id {expected}\n"
    assert cli("job-set-id", name, stdin=DAILY).stdout.strip() == expected
    fires = cli("next", name, "--after", "2026-01-01T12:00:00", stdin=DAILY)
    assert fires.stdout == "a\t2026-01-02T00:00:00+00:00\n"


def test_diff_reads_either_side_from_standard_input(tmp_path: Path) -> None:
    other = tmp_path / "new" / "c.yaml"
    other.parent.mkdir()
    other.write_text(HOURLY)
    forward = cli("diff", "-", str(other.parent), "--at", "2026-01-01T00:30:00", stdin=DAILY)
    assert forward.returncode == 1, forward.stderr
    assert "~ job a (@hourly)" in forward.stdout
    backward = cli("diff", str(other.parent), "-", "--at", "2026-01-01T00:30:00", stdin=DAILY)
    assert backward.returncode == 1, backward.stderr
    assert "~ job a (@daily)" in backward.stdout


@pytest.mark.parametrize(
    ("text", "key"),
    [(WITH_INCLUDE, "include[0]"), (WITH_ENV_FILE, "jobs[0].env_file")],
    ids=["include", "env_file"],
)
def test_include_and_env_file_are_refused_on_standard_input(
    text: str, key: str, tmp_path: Path
) -> None:
    # the files exist beside the working directory: they must still not be read
    (tmp_path / "other.yaml").write_text(DAILY)
    (tmp_path / "a.env").write_text("A=1\n")
    for command in ("validate", "next", "job-set-id"):
        result = subprocess.run(
            [sys.executable, "-m", "cronstable", command, "-"],
            cwd=tmp_path,
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert result.returncode == 1
        assert "<stdin>: invalid (1 problem)" in result.stderr
        assert f": {key}: cannot " in result.stderr
        assert "read once, as one file on its own" in result.stderr


def test_empty_standard_input_is_refused() -> None:
    result = cli("validate", "-", stdin="")
    assert result.returncode == 1
    assert "read no configuration" in result.stderr


def _write_fifo_later(path: Path, text: str) -> threading.Thread:
    def writer() -> None:
        with open(path, "w") as fifo:  # blocks until the reader opens it
            fifo.write(text)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_one_configuration_file_read_once(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    expected = job_set_id_of(tmp_path, DAILY)
    for args in (["validate", str(fifo)], ["job-set-id", str(fifo)]):
        writer = _write_fifo_later(fifo, DAILY)
        result = cli(*args)
        writer.join(timeout=10)
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout
    writer = _write_fifo_later(fifo, WITH_INCLUDE)
    refused = cli("next", str(fifo))
    writer.join(timeout=10)
    assert refused.returncode == 1
    assert "read once, as one file on its own" in refused.stderr
    writer = _write_fifo_later(fifo, HOURLY)
    diffed = cli("diff", "-", str(fifo), "--at", "2026-01-01T00:30:00", stdin=DAILY)
    writer.join(timeout=10)
    assert diffed.returncode == 1, diffed.stderr
    assert "~ job a (@hourly)" in diffed.stdout
