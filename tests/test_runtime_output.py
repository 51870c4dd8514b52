"""Tests of cronstable.runtime.output: line splitting, head/tail retention, mirroring."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import threading
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronstable.runtime.output import OutputMirror, StreamCapture, discarded_marker

pytestmark = pytest.mark.timeout(20)

LOGGER = "cronstable.runtime.output"


def capture(save_limit: int = 100, max_line_length: int = 1000, **kwargs: object) -> StreamCapture:
    return StreamCapture(
        "stdout",
        save_limit=save_limit,
        max_line_length=max_line_length,
        job_name="job",
        **kwargs,  # type: ignore[arg-type]
    )


def fed(data: bytes, *, chunks: list[int] | None = None, **kwargs: object) -> StreamCapture:
    cap = capture(**kwargs)  # type: ignore[arg-type]
    pos = 0
    for size in chunks or []:
        cap.feed(data[pos : pos + size])
        pos += size
    cap.feed(data[pos:])
    cap.feed_eof()
    return cap


def numbered(count: int) -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, count + 1))


# ------------------------------------------------------------------ lines


def test_lines_and_final_newline() -> None:
    assert fed(b"a\nb\n").text() == "a\nb"
    assert fed(b"a\nb").text() == "a\nb"
    assert fed(b"a\n\nb\n").text() == "a\n\nb"
    assert fed(b"\n").text() == ""
    assert fed(b"a\r\n").text() == "a\r"


def test_empty_stream() -> None:
    cap = fed(b"")
    assert cap.text() == ""
    assert cap.discarded == 0
    assert not cap.produced


def test_produced_counts_any_byte() -> None:
    assert fed(b"\n").produced
    assert fed(b"x", save_limit=0).produced
    assert fed(b"x" * 50, max_line_length=10).produced


def test_invalid_utf8_is_replaced() -> None:
    cap = fed(b"\xff\xfeabc\nok \xe2\x82\n\xe2\x82\xac\n")
    assert cap.text() == "\ufffd\ufffdabc\nok \ufffd\n\u20ac"


def test_multibyte_character_split_across_chunks() -> None:
    data = "h\u00e9llo \u20ac\n".encode()
    for cut in range(1, len(data)):
        assert fed(data, chunks=[cut]).text() == "h\u00e9llo \u20ac"


# ------------------------------------------------------------- retention


def test_head_and_tail_kept_with_marker() -> None:
    cap = fed(numbered(10), save_limit=4)
    assert cap.text() == "1\n2\n" + discarded_marker(6) + "\n9\n10"
    assert cap.text() == "1\n2\n[.... 6 lines discarded ...]\n9\n10"
    assert cap.discarded == 6


def test_odd_save_limit_keeps_more_at_the_bottom() -> None:
    cap = fed(numbered(10), save_limit=5)
    assert cap.text() == "1\n2\n[.... 5 lines discarded ...]\n8\n9\n10"


def test_exactly_save_limit_lines_has_no_marker() -> None:
    cap = fed(numbered(4), save_limit=4)
    assert cap.text() == "1\n2\n3\n4"
    assert cap.discarded == 0


def test_fewer_lines_than_the_head() -> None:
    assert fed(b"1\n", save_limit=10).text() == "1"


def test_save_limit_zero_keeps_only_the_marker() -> None:
    cap = fed(numbered(3), save_limit=0)
    assert cap.text() == "[.... 3 lines discarded ...]"
    assert cap.discarded == 3


def test_save_limit_one() -> None:
    cap = fed(numbered(3), save_limit=1)
    assert cap.text() == "[.... 2 lines discarded ...]\n3"


def test_many_chunks_retention() -> None:
    data = numbered(10_000)
    cap = fed(data, chunks=[7] * 1000 + [4096] * 5, save_limit=6)
    assert cap.text() == "1\n2\n3\n[.... 9994 lines discarded ...]\n9998\n9999\n10000"


# --------------------------------------------------------------- long lines


def test_line_at_the_limit_is_kept_one_over_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    cap = fed(b"x" * 10 + b"\n" + b"y" * 11 + b"\nz\n", max_line_length=10)
    # the marker sits between head and tail: here everything kept is in the head
    assert cap.text() == "x" * 10 + "\nz\n[.... 1 lines discarded ...]"
    assert cap.discarded == 1
    assert len(caplog.records) == 1


def test_long_lines_warn_once_per_stream(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    data = b"a\n" + b"x" * 100 + b"\nb\n" + b"y" * 100 + b"\nc"
    for chunks in ([], [5] * 60):
        caplog.clear()
        cap = fed(data, chunks=chunks, max_line_length=10)
        assert cap.discarded == 2
        assert cap.text() == "a\nb\nc\n[.... 2 lines discarded ...]"
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert "job job" in message and "stdout" in message and "longer than 10 bytes" in message
        assert warnings[0].args  # %-style arguments, not a pre-formatted string


def test_long_line_split_over_chunks_is_dropped_as_it_streams() -> None:
    cap = capture(max_line_length=100)
    cap.feed(b"start\n" + b"x" * 60)
    cap.feed(b"x" * 60)  # now 120 bytes of one line: dropped
    for _ in range(100):
        cap.feed(b"x" * 1000)
    cap.feed(b"x\nafter\n")
    cap.feed_eof()
    assert cap.text() == "start\nafter\n[.... 1 lines discarded ...]"
    assert cap.discarded == 1


def test_partial_line_at_eof_over_the_limit_is_dropped() -> None:
    cap = fed(b"ok\n" + b"x" * 20, max_line_length=10)
    assert cap.text() == "ok\n[.... 1 lines discarded ...]"


def test_a_gigantic_line_keeps_memory_bounded() -> None:
    cap = capture(max_line_length=64 * 1024)
    chunk = b"x" * (64 * 1024)
    tracemalloc.start()
    try:
        for _ in range(400):  # 25 MiB without a newline
            cap.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cap.feed(b"\nend\n")
    cap.feed_eof()
    assert peak < 1024 * 1024
    assert cap.text() == "end\n[.... 1 lines discarded ...]"


# --------------------------------------------------- property: chunking is invisible


def reference(data: bytes, save_limit: int, max_line: int) -> tuple[str, int]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    kept = [line for line in lines if len(line) <= max_line]
    discarded = len(lines) - len(kept)
    top_n = save_limit // 2
    bottom_n = save_limit - top_n
    top, rest = kept[:top_n], kept[top_n:]
    bottom = rest[max(0, len(rest) - bottom_n) :] if bottom_n else []
    discarded += len(rest) - len(bottom)
    parts = [line.decode("utf-8", "replace") for line in top]
    if discarded:
        parts.append(discarded_marker(discarded))
    parts += [line.decode("utf-8", "replace") for line in bottom]
    return "\n".join(parts), discarded


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\xff", b"cccccccc", b"\xc3\xa9"])).map(
        b"".join
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    save_limit=st.integers(min_value=0, max_value=7),
    max_line=st.integers(min_value=1, max_value=12),
)
def test_matches_reference_whatever_the_chunking(
    data: bytes, cuts: list[int], save_limit: int, max_line: int
) -> None:
    out = io.BytesIO()
    mirror = OutputMirror(out, io.BytesIO())
    try:
        cap = fed(data, chunks=cuts, save_limit=save_limit, max_line_length=max_line, mirror=mirror)
    finally:
        mirror.close()
    text, discarded = reference(data, save_limit, max_line)
    assert cap.text() == text
    assert cap.discarded == discarded
    assert cap.produced == bool(data)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    assert out.getvalue() == b"".join(line + b"\n" for line in lines if len(line) <= max_line)


# ------------------------------------------------------------------ the pipe's protocol


@pytest.mark.asyncio
async def test_the_protocol_survives_a_broken_stream(caplog: pytest.LogCaptureFixture) -> None:
    cap = capture()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    protocol = cap.protocol(done)
    protocol.data_received(b"one\ntwo")
    protocol.connection_lost(ConnectionResetError("gone"))
    assert done.done() and cap.ended
    assert cap.text() == "one\ntwo"
    assert "reading stdout failed: gone" in caplog.text


@pytest.mark.asyncio
async def test_the_protocol_feeds_a_real_pipe_to_its_end() -> None:
    # how runs capture: the pipe's protocol feeds the capture, no reader and no task
    loop = asyncio.get_running_loop()
    read_end, write_end = os.pipe()
    cap = capture(save_limit=4)
    done: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.connect_read_pipe(
        lambda: cap.protocol(done), os.fdopen(read_end, "rb", buffering=0)
    )
    for i in range(1, 11):
        os.write(write_end, b"%d\n" % i)
        await asyncio.sleep(0.01)
    assert not done.done() and not cap.ended
    os.write(write_end, b"tail without newline")
    os.close(write_end)
    await asyncio.wait_for(done, 5)
    assert cap.ended
    assert cap.text() == "1\n2\n[.... 7 lines discarded ...]\n10\ntail without newline"
    assert transport.is_closing()


@pytest.mark.asyncio
async def test_the_protocol_ends_when_the_daemon_closes_the_pipe() -> None:
    # a descendant holding the pipe past the grace: the run closes it, the stream ends
    loop = asyncio.get_running_loop()
    read_end, write_end = os.pipe()
    cap = capture()
    done: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.connect_read_pipe(
        lambda: cap.protocol(done), os.fdopen(read_end, "rb", buffering=0)
    )
    os.write(write_end, b"one\ntwo")
    await asyncio.sleep(0.05)
    transport.close()
    await asyncio.wait_for(done, 5)
    os.close(write_end)
    assert cap.text() == "one\ntwo" and cap.ended


# ------------------------------------------------------------------ mirror


def test_mirror_prefixes_lines_and_keeps_streams_apart() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    mirror = OutputMirror(out, err)
    a = capture(mirror=mirror, prefix="[a stdout] ")
    b = StreamCapture(
        "stderr", save_limit=0, max_line_length=100, mirror=mirror, prefix="[b stderr] "
    )
    a.feed(b"one\ntw")
    b.feed(b"x\n")
    a.feed(b"o\nthree")
    a.feed_eof()
    b.feed_eof()
    mirror.close()
    assert out.getvalue() == b"[a stdout] one\n[a stdout] two\n[a stdout] three\n"
    assert err.getvalue() == b"[b stderr] x\n"


def test_mirror_writes_raw_bytes_and_skips_long_lines() -> None:
    out = io.BytesIO()
    mirror = OutputMirror(out, io.BytesIO())
    cap = capture(mirror=mirror, max_line_length=5, prefix="\u00bb ")
    cap.feed(b"\xff\n123456\nok\n")
    cap.feed_eof()
    mirror.close()
    assert out.getvalue() == "\u00bb ".encode() + b"\xff\n" + "\u00bb ok\n".encode()


def test_mirror_close_is_idempotent_and_later_writes_are_ignored() -> None:
    out = io.BytesIO()
    mirror = OutputMirror(out, io.BytesIO())
    mirror.write("stdout", b"a\n")
    mirror.close()
    mirror.close()
    mirror.write("stdout", b"b\n")
    assert out.getvalue() == b"a\n"


class Blocking(io.BytesIO):
    """A target whose writes block until released: a terminal nobody reads."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.release.wait(10)
        return super().write(data)


def test_slow_output_never_blocks_and_drops_beyond_the_bound() -> None:
    out = Blocking()
    mirror = OutputMirror(out, io.BytesIO(), max_pending=1000)
    line = b"x" * 99 + b"\n"
    for _ in range(100):  # 10 kB into a 1 kB budget; write() must not block
        mirror.write("stdout", line)
    out.release.set()
    mirror.close()
    written = out.getvalue()
    kept = written.count(line)
    assert 1 <= kept <= 11
    assert (
        b"[cronstable: %d lines of job output not mirrored: output too slow]\n" % (100 - kept)
        in written
    )


class Broken(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


def test_broken_target_warns_once_and_the_other_stream_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    err = io.BytesIO()
    mirror = OutputMirror(Broken(), err)
    for _ in range(5):
        mirror.write("stdout", b"lost\n")
        mirror.write("stderr", b"kept\n")
    mirror.close()
    assert err.getvalue() == b"kept\n" * 5
    assert [r.getMessage() for r in caplog.records] == [
        "output mirror: cannot write to the daemon's stdout: [Errno 32] Broken pipe"
    ]


def test_mirror_defaults_to_the_daemons_stdout_and_stderr(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    mirror = OutputMirror()
    mirror.write("stdout", b"[j stdout] hello\n")
    mirror.write("stderr", b"[j stderr] oops\n")
    mirror.close()
    captured = capsysbinary.readouterr()
    assert captured.out == b"[j stdout] hello\n"
    assert captured.err == b"[j stderr] oops\n"
