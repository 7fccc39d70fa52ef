"""grep's fast paths (one bounded read per file, literal regexes searched with
``bytes.find``, the tight per-match loop) give what the general paths give."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.tools.workspace import OperationAborted, Workspace, find_files, grep
from emelex.tools.workspace._search import (
    _FIRST_READ,
    LiteralProgram,
    Re2Program,
    compile_search,
    pure_literal,
)


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("RARE_NEEDLE", "RARE_NEEDLE"),
        ("foo\\.bar", "foo.bar"),
        ("a b-c:d=e", "a b-c:d=e"),
        ("\\(x\\)", "(x)"),
        ("foo.bar", None),
        ("ab*", None),
        ("a|b", None),
        ("^abc", None),
        ("abc$", None),
        ("\\d", None),
        ("", None),
        ("naïve", None),
    ],
)
def test_pure_literal_cases(pattern: str, literal: str | None) -> None:
    assert pure_literal(pattern) == literal
    if pattern:
        program = compile_search(pattern, literal=False, case_insensitive=False)
        assert isinstance(program, LiteralProgram) == (literal is not None)


def test_a_case_insensitive_literal_regex_still_uses_re2() -> None:
    assert isinstance(compile_search("Needle", literal=False, case_insensitive=True), Re2Program)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "b", "_", " ", "\\.", ".", "\\(", "x"]), min_size=1, max_size=5
    ).map("".join),
    st.lists(st.sampled_from(["a", "b", "_", " ", ".", "(", "\n", "ab"]), max_size=40)
    .map("".join)
    .map(str.encode),
)
def test_a_pure_literal_finds_what_re2_finds(pattern: str, data: bytes) -> None:
    text = pure_literal(pattern)
    if text is None:
        return
    program = re2.compile("(?m)" + pattern)
    expected = [m.start() for m in program.finditer(data)]
    needle = text.encode()
    found: list[int] = []
    position = data.find(needle)
    while position >= 0:
        found.append(position)
        position = data.find(needle, position + len(needle))
    assert found == expected


def _reference(data: bytes, pattern: str) -> list[tuple[int, str]]:
    """(line number, text) of every line of ``data`` with a match of ``pattern``."""
    program = re2.compile(pattern.encode())
    return [
        (number, line.decode("utf-8", "replace"))
        for number, line in enumerate(data.split(b"\n"), 1)
        if program.search(line)
    ]


@pytest.mark.parametrize("pattern", ["needle", "ne+dle", "def \\w+\\(", "é"])
@pytest.mark.parametrize(
    "size", [10, _FIRST_READ - 1, _FIRST_READ, _FIRST_READ + 1, 3 * _FIRST_READ + 17]
)
def test_files_around_the_first_read_are_searched_whole(
    tmp_path: Path, pattern: str, size: int
) -> None:
    lines = [f"def f{i}(x): needle é {i}" if i % 7 == 3 else f"x = {i}" for i in range(size)]
    data = "\n".join(lines).encode()[:size]
    (tmp_path / "f.py").write_bytes(data)
    with Workspace.open(tmp_path) as ws:
        result = grep(ws, pattern, max_matches=100_000, max_bytes=64 * 1024 * 1024)
    assert [(line.line_number, line.text) for line in result.lines] == _reference(data, pattern)
    assert result.files_searched == 1


@pytest.mark.parametrize("limit", [1, 100, _FIRST_READ - 1, _FIRST_READ, _FIRST_READ + 5])
def test_max_file_bytes_is_exact_around_the_first_read(tmp_path: Path, limit: int) -> None:
    for size in {limit - 1, limit, limit + 1} - {0}:
        (tmp_path / f"s{size}.txt").write_bytes(b"n" * size)
    with Workspace.open(tmp_path) as ws:
        result = grep(ws, "n", max_file_bytes=limit, max_matches=10)
    searched = sorted(line.path for line in result.lines)
    assert searched == sorted(f"s{size}.txt" for size in {limit - 1, limit} - {0})
    assert result.skipped_large == 1


def test_a_fifo_swapped_in_is_not_searched_or_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.txt").write_text("needle\n")
    with Workspace.open(tmp_path) as ws:
        result = grep(ws, "needle")
    assert [line.path for line in result.lines] == ["a.txt"]


def test_a_set_abort_stops_grep_and_find_without_leaking_descriptors(tmp_path: Path) -> None:
    for index in range(600):
        (tmp_path / "d" / f"s{index % 3}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / f"s{index % 3}" / f"f{index:03d}.txt").write_text("needle\n")
    abort = threading.Event()
    abort.set()
    with Workspace.open(tmp_path) as ws:
        before = len(os.listdir("/proc/self/fd"))
        for path in (".", "d", "d/s1"):
            with pytest.raises(OperationAborted):
                grep(ws, "needle", path, abort=abort)
            with pytest.raises(OperationAborted):
                find_files(ws, "**/*.txt", path, abort=abort)
        assert len(os.listdir("/proc/self/fd")) == before


def test_many_matches_keep_numbers_text_and_bounds(tmp_path: Path) -> None:
    lines = [("hit é" if i % 3 == 0 else "miss") + f" {i}" for i in range(3000)]
    (tmp_path / "m.txt").write_text("\n".join(lines) + "\n")
    with Workspace.open(tmp_path) as ws:
        full = grep(ws, "hit", max_matches=100_000, max_bytes=64 * 1024 * 1024)
        capped = grep(ws, "h[i]t", max_matches=10)
        small = grep(ws, "hit", max_bytes=100)
    assert [(line.line_number, line.text) for line in full.lines] == [
        (i + 1, text) for i, text in enumerate(lines) if text.startswith("hit")
    ]
    assert capped.match_count == 10 and capped.truncation == "max_matches"
    assert small.truncation == "max_bytes"
    assert sum(len(line.text.encode()) + 1 for line in small.lines) <= 100


class _AbortAfter(threading.Event):
    """An abort flag that turns set on its ``calls``-th check."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    def is_set(self) -> bool:
        self.calls -= 1
        return self.calls <= 0


def test_an_abort_at_any_check_leaks_no_descriptor(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "big.txt").write_bytes(b"x" * 200_000 + b"\nneedle\n")  # windowed
    for index in range(300):
        (tmp_path / "a" / "b" / f"f{index:03d}.txt").write_text("needle\n")
    with Workspace.open(tmp_path) as ws:
        before = len(os.listdir("/proc/self/fd"))
        outcomes = set()
        for calls in range(1, 40):
            try:
                grep(ws, "ne+dle", abort=_AbortAfter(calls), max_matches=1000)
                outcomes.add("done")
            except OperationAborted:
                outcomes.add("aborted")
            assert len(os.listdir("/proc/self/fd")) == before, calls
    assert outcomes == {"aborted", "done"}
