"""Git-format patches built from complete file images (pure functions over bytes).

The output follows ``git diff --full-index --binary``: ``diff --git`` headers with C-quoted
non-ASCII names, full object names on ``index`` lines, unified hunks with three lines
of context split on ``\\n`` only (a CRLF line keeps its ``\\r``), and ``GIT binary patch``
literals in both directions, so ``git apply`` accepts and can reverse every patch.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import zlib
from collections.abc import Iterator
from typing import Final

import attrs

#: Git's binary test: a NUL byte in the first 8000 bytes.
BINARY_PROBE: Final = 8000
CONTEXT_LINES: Final = 3
MODE_FILE: Final = 0o100644
MODE_EXECUTABLE: Final = 0o100755
MODE_SYMLINK: Final = 0o120000
MODE_GITLINK: Final = 0o160000
_NULL_ID: Final = "0" * 40
_NO_NEWLINE: Final = b"\\ No newline at end of file\n"


@attrs.frozen
class Side:
    """One complete side of a comparison: Git mode, blob name and content."""

    mode: int
    oid: str
    data: bytes


def blob_id(data: bytes) -> str:
    """The SHA-1 blob name Git gives ``data``."""
    digest = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_PROBE]


def same_kind(old: int, new: int) -> bool:
    """Whether two modes are both regular files or both symlinks (else a type change)."""
    return (old == MODE_SYMLINK) == (new == MODE_SYMLINK)


_PLAIN = frozenset(range(0x20, 0x7F)) - {ord('"'), ord("\\")}
_ESCAPES = {0x07: b"\\a", 0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0B: b"\\v"}
_ESCAPES |= {0x0C: b"\\f", 0x0D: b"\\r", ord('"'): b'\\"', ord("\\"): b"\\\\"}


def quote_path(prefix: bytes, path: bytes) -> bytes:
    """``prefix + path`` as Git writes it in headers (``core.quotePath`` on): quoted with
    C escapes and octal bytes when it holds a control, quote, backslash or non-ASCII."""
    whole = prefix + path
    if all(byte in _PLAIN for byte in whole):
        return whole
    out = bytearray(b'"')
    for byte in whole:
        if byte in _PLAIN:
            out.append(byte)
        else:
            out += _ESCAPES.get(byte, b"\\%03o" % byte)
    out += b'"'
    return bytes(out)


def split_lines(data: bytes) -> list[bytes]:
    """Lines ending in ``\\n`` (the last may have none); ``\\r`` is ordinary content."""
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


def _range(start: int, stop: int) -> bytes:
    # Git's and difflib's unified range: "l" for one line, "l-1,0" for none.
    length = stop - start
    beginning = start + 1
    if length == 1:
        return b"%d" % beginning
    if length == 0:
        beginning -= 1
    return b"%d,%d" % (beginning, length)


def _line(mark: bytes, line: bytes) -> bytes:
    if line.endswith(b"\n"):
        return mark + line
    return mark + line + b"\n" + _NO_NEWLINE


def hunks(old: bytes, new: bytes) -> Iterator[bytes]:
    """The unified hunks turning ``old`` into ``new`` (nothing when they are equal)."""
    a, b = split_lines(old), split_lines(new)
    matcher = difflib.SequenceMatcher(None, a, b)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        yield b"@@ -%s +%s @@\n" % (_range(first[1], last[2]), _range(first[3], last[4]))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    yield _line(b" ", line)
                continue
            for line in a[i1:i2]:
                yield _line(b"-", line)
            for line in b[j1:j2]:
                yield _line(b"+", line)


def _base85_lines(data: bytes) -> Iterator[bytes]:
    # Git's binary literal: zlib-deflated, 52 bytes per line, a length letter first.
    packed = zlib.compress(data, 9)
    for start in range(0, len(packed), 52):
        chunk = packed[start : start + 52]
        size = len(chunk)
        letter = ord("A") + size - 1 if size <= 26 else ord("a") + size - 27
        yield bytes([letter]) + base64.b85encode(chunk, pad=True) + b"\n"


def _literal(data: bytes) -> bytes:
    return b"literal %d\n" % len(data) + b"".join(_base85_lines(data)) + b"\n"


def file_patch(path: bytes, old: Side | None, new: Side | None, *, binary: bool) -> bytes:
    """The ``git diff`` block(s) of one path, empty when both sides are equal.

    A change between a regular file and a symlink is a deletion followed by an
    addition, as Git writes it. ``binary`` says how a binary change is written: a
    ``GIT binary patch`` (both literals) when true, else ``Binary files ... differ``.
    """
    if old is not None and new is not None and not same_kind(old.mode, new.mode):
        return file_patch(path, old, None, binary=binary) + file_patch(
            path, None, new, binary=binary
        )
    if old is None and new is None:
        return b""
    if old is not None and new is not None and old.mode == new.mode and old.data == new.data:
        return b""
    a_name, b_name = quote_path(b"a/", path), quote_path(b"b/", path)
    head = [b"diff --git %s %s\n" % (a_name, b_name)]
    if old is None:
        assert new is not None
        head.append(b"new file mode %o\n" % new.mode)
    elif new is None:
        head.append(b"deleted file mode %o\n" % old.mode)
    elif old.mode != new.mode:
        head.append(b"old mode %o\nnew mode %o\n" % (old.mode, new.mode))
    old_data = b"" if old is None else old.data
    new_data = b"" if new is None else new.data
    if old_data == new_data and old is not None and new is not None:
        return b"".join(head)  # a mode change only
    old_id = _NULL_ID if old is None else old.oid
    new_id = _NULL_ID if new is None else new.oid
    same_mode = old is not None and new is not None and old.mode == new.mode
    suffix = b" %o" % new.mode if same_mode and new is not None else b""
    head.append(b"index %s..%s%s\n" % (old_id.encode(), new_id.encode(), suffix))
    if is_binary(old_data) or is_binary(new_data):
        if not binary:
            shown_a = b"/dev/null" if old is None else a_name
            shown_b = b"/dev/null" if new is None else b_name
            head.append(b"Binary files %s and %s differ\n" % (shown_a, shown_b))
            return b"".join(head)
        head.append(b"GIT binary patch\n" + _literal(new_data) + _literal(old_data))
        return b"".join(head)
    if not old_data and not new_data:
        return b"".join(head)  # an empty file added or deleted
    head.append(b"--- %s\n" % (b"/dev/null" if old is None else a_name))
    head.append(b"+++ %s\n" % (b"/dev/null" if new is None else b_name))
    head.extend(hunks(old_data, new_data))
    return b"".join(head)
