"""The memory bound on input: bytes per file, bytes per revision, YAML values per revision.

The regression tests run the real command line on a dense file (``big:`` then
millions of ``- x`` lines) in a child process whose address space is capped at
1 GiB: before the limits, loading it needed about 6 GB, so the child died of a
MemoryError instead of refusing the file with a message naming the limit.
"""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from etcd_server import EtcdServer

from cronstable.config import ConfigError, DiskTree, Limits, LoadCache, MemoryTree, load
from cronstable.config.limits import parse_count, parse_size, size_text
from cronstable.config.yamlread import NodeLimitError, parse
from cronstable.etcd import EtcdClient
from cronstable.sources.base import SourceError
from cronstable.sources.etcd.source import EtcdSource
from cronstable.sources.etcd.spec import EtcdSpec
from cronstable.sources.git.files import snapshot_from_local_repo

REPO = Path(__file__).resolve().parent.parent
ONE_GIB = 1 << 30
JOB = "  - name: {name}\n    command: echo {name}\n    schedule: '* * * * *'\n"


def jobs(*names: str) -> bytes:
    return ("jobs:\n" + "".join(JOB.format(name=n) for n in names)).encode()


def problems(files: dict[str, bytes], limits: Limits, cache: LoadCache | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(MemoryTree(files), limits=limits, cache=cache)
    return [str(p) for p in info.value.problems]


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ONE_GIB, ONE_GIB))


def capped_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``cronstable ARGS`` in a child that cannot map more than 1 GiB."""
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_cap_address_space,
    )


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """50 MB of tiny YAML values: 13 million list items."""
    path = tmp_path_factory.mktemp("dense") / "big.yaml"
    with path.open("wb") as fh:
        fh.write(b"big:\n")
        for _ in range(13):
            fh.write(b"- x\n" * 1_000_000)
    return path


# --------------------------------------------------------------------------- regression


def test_a_dense_file_is_refused_by_the_file_cap_under_1_gib(dense: Path) -> None:
    result = capped_cli("validate", str(dense))
    assert result.returncode == 1, result.stderr[-2000:]
    assert "MemoryError" not in result.stderr
    assert f"{dense}: the file is larger than the limit of 4 MiB per file" in result.stderr
    assert "--max-file-bytes" in result.stderr


def test_a_dense_file_is_refused_by_the_node_cap_under_1_gib(dense: Path) -> None:
    result = capped_cli(
        "validate", "--max-file-bytes", "1G", "--max-revision-bytes", "1G", str(dense)
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "MemoryError" not in result.stderr
    # composition stopped at the cap: the line is where, not the end of the file
    assert f"{dense}:249998:" in result.stderr
    assert "more than 250,000 YAML values" in result.stderr
    assert "--max-yaml-nodes" in result.stderr


def test_the_node_cap_is_raised_from_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "cron.yaml"
    config.write_bytes(jobs("a", "b"))
    refused = capped_cli("validate", "--max-yaml-nodes", "10", str(config))
    assert refused.returncode == 1
    assert "more than 10 YAML values" in refused.stderr
    assert capped_cli("validate", "--max-yaml-nodes", "100", str(config)).returncode == 0
    bad = capped_cli("validate", "--max-file-bytes", "lots", str(config))
    assert bad.returncode == 2 and "--max-file-bytes" in bad.stderr


# --------------------------------------------------------------------------- the loader


def test_a_file_over_the_file_cap_is_named() -> None:
    found = problems({"a.yaml": jobs("a"), "b.yaml": jobs("b" * 200)}, Limits(max_file_bytes=100))
    assert found == [
        "b.yaml: the file is larger than the limit of 100 bytes per file "
        "(raise it with --max-file-bytes)"
    ]


def test_an_env_file_over_the_file_cap_is_named() -> None:
    config = b"jobs:\n  - name: a\n    command: c\n    schedule: '* * * * *'\n    env_file: a.env\n"
    found = problems(
        {"cron.yaml": config, "a.env": b"A=" + b"x" * 500 + b"\n"}, Limits(max_file_bytes=200)
    )
    assert len(found) == 1
    assert found[0].startswith("cron.yaml:5:5: jobs[0].env_file: cannot read env_file: the file")
    assert "--max-file-bytes" in found[0]


def test_the_revision_byte_cap_counts_every_file_read() -> None:
    files = {"a.yaml": jobs("a"), "b.yaml": jobs("b"), "c.yaml": jobs("c")}
    size = len(files["a.yaml"])
    load(MemoryTree(files), limits=Limits(max_revision_bytes=3 * size))
    found = problems(files, Limits(max_revision_bytes=2 * size + 1))
    assert found == [
        f"c.yaml: the revision holds more than {2 * size + 1:,} bytes of files "
        "(raise the limit with --max-revision-bytes)"
    ]


def test_the_node_cap_is_for_the_whole_revision() -> None:
    files = {"a.yaml": jobs("a"), "b.yaml": jobs("b")}
    one = parse(files["a.yaml"]).size
    load(MemoryTree(files), limits=Limits(max_yaml_nodes=2 * one))
    found = problems(files, Limits(max_yaml_nodes=2 * one - 1))
    assert len(found) == 1
    assert found[0].startswith("b.yaml:")
    assert f"more than {2 * one - 1} YAML values" in found[0]


def test_aliases_count_as_copies() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(NodeLimitError) as info:
        parse("\n".join(lines).encode(), 10_000)
    assert info.value.line is not None and info.value.line <= 5
    # a long list of aliases stops at the cap, not at its end
    many = b"a: &a x\nb:\n" + b"- *a\n" * 100_000
    with pytest.raises(NodeLimitError) as info:
        parse(many, 1_000)
    assert info.value.line is not None and info.value.line < 1_100


def test_composition_stops_at_the_cap_with_a_position() -> None:
    data = b"big:\n" + b"- x\n" * 10_000
    with pytest.raises(NodeLimitError) as info:
        parse(data, 100)
    assert info.value.line is not None and 90 <= info.value.line <= 102
    assert parse(data, 10_003).size == 10_003  # the mapping, its key, the list, 10,000 items


def test_a_cached_document_still_counts() -> None:
    cache = LoadCache()
    files = {"a.yaml": jobs("a", "b", "c")}
    load(MemoryTree(files), cache=cache)
    assert problems(files, Limits(max_yaml_nodes=5), cache)[0].startswith("a.yaml:")


def test_a_disk_tree_reads_no_more_than_the_cap(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(4 * ONE_GIB)  # sparse: reading it whole would need 4 GiB
    assert len(DiskTree(tmp_path, max_file_bytes=1000).read("big.yaml")) == 1001


def test_sizes_on_the_command_line() -> None:
    assert parse_size("4096") == 4096
    assert parse_size("4k") == parse_size("4KiB") == parse_size("4 KB") == 4096
    assert parse_size("64M") == 64 << 20 and parse_size("1g") == 1 << 30
    assert parse_count("250_000") == parse_count("250,000") == 250_000
    for bad in ("", "0", "-1", "4T", "lots"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_count("0")
    assert size_text(64 << 20) == "64 MiB" and size_text(1000) == "1,000 bytes"


# --------------------------------------------------------------------------- the load cache


def test_rejected_revisions_do_not_grow_the_load_cache() -> None:
    cache = LoadCache()
    good = {f"team-{i}.yaml": jobs(f"job-{i}") for i in range(5)}
    load(MemoryTree(good), cache=cache)
    held = cache.entries()
    for i in range(200):
        bad = {**good, "broken.yaml": f"jobs:\n  - name: x{i}\n    schedule: nope\n".encode()}
        with pytest.raises(ConfigError):
            load(MemoryTree(bad), cache=cache)
        # the good revision's entries, and the last rejected one's new file only
        assert cache.entries() <= held + 1
    # the fix re-uses what the good revision parsed and built
    load(MemoryTree({**good, "broken.yaml": jobs("fixed")}), cache=cache)
    assert cache.entries() == held + 2  # the fixed file's document and its batch


# --------------------------------------------------------------------------- the sources


def test_a_git_commit_over_the_revision_cap_is_refused(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (tmp_path / "a.yaml").write_bytes(jobs("a") * 10)
    (tmp_path / "b.yaml").write_bytes(jobs("b") * 10)
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    total = (tmp_path / "a.yaml").stat().st_size * 2
    snapshot_from_local_repo(str(tmp_path), "main", limits=Limits(max_revision_bytes=total))
    with pytest.raises(SourceError, match="holds more than .* --max-revision-bytes"):
        snapshot_from_local_repo(str(tmp_path), "main", limits=Limits(max_revision_bytes=total - 1))


def test_an_etcd_prefix_over_the_revision_cap_is_refused(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with EtcdClient(etcd_server.endpoint) as etcd:
            await etcd.put("/capped/a.yaml", b"x" * 600)
            await etcd.put("/capped/b.yaml", b"x" * 600)
        spec = EtcdSpec(endpoint=etcd_server.endpoint, prefix="/capped/")
        source = EtcdSource(spec, cache_dir=tmp_path, limits=Limits(max_revision_bytes=1000))
        with pytest.raises(SourceError, match="more than 1,000 bytes.*--max-revision-bytes"):
            await source.start()
        await source.close()

    asyncio.run(scenario())
