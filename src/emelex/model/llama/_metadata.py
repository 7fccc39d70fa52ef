"""Reading the few GGUF metadata values needed before a model is loaded.

A GGUF file starts with a key/value section. The chat template, the special token ids
and the training context length live there, so they can be read in milliseconds without
loading weights or building llama.cpp's vocabulary. Array values are skipped by seeking;
the token texts needed (BOS, EOS) are looked up by walking the token array once.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any, Final

import attrs

from emelex.model.llama._errors import ModelLoadError

_MAGIC: Final = b"GGUF"
_STRING: Final = 8
_ARRAY: Final = 9
# Fixed-size value types: type id -> struct format.
_SCALARS: Final = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


@attrs.frozen(kw_only=True)
class GgufMetadata:
    """What emelex reads from a GGUF header before loading the model."""

    architecture: str | None
    name: str | None
    chat_template: str | None
    bos_token: str
    eos_token: str
    context_length: int | None
    token_count: int


class _Reader:
    def __init__(self, data: mmap.mmap | bytes, path: Path) -> None:
        self.data = data
        self.offset = 0
        self.path = path

    def fail(self, what: str) -> ModelLoadError:
        return ModelLoadError(f"{self.path} is not a readable GGUF file: {what}")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise self.fail("truncated header")
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        end = self.offset + length
        if end > len(self.data):
            raise self.fail("truncated string")
        raw = bytes(self.data[self.offset : end])
        self.offset = end
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length = self.unpack("<Q")
        self.offset += length

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise self.fail(f"unknown value type {kind}")
        return self.unpack(fmt)

    def skip_array(self) -> tuple[int, int, int]:
        """Skip an array value; return (element type, count, offset of the elements)."""
        kind = self.unpack("<I")
        count = self.unpack("<Q")
        start = self.offset
        if kind == _STRING:
            # The hot loop of a 262k-token vocabulary: keep it to one unpack per string.
            unpack_from, data, offset = struct.unpack_from, self.data, self.offset
            for _ in range(count):
                offset += 8 + unpack_from("<Q", data, offset)[0]
            self.offset = offset
        elif kind in _SCALARS:
            self.offset += struct.calcsize(_SCALARS[kind]) * count
        else:
            raise self.fail(f"unsupported array element type {kind}")
        if self.offset > len(self.data):
            raise self.fail("truncated array")
        return kind, count, start


def read_gguf_metadata(path: str | os.PathLike[str]) -> GgufMetadata:
    """Read the chat template, special tokens and context length of a GGUF file.

    Blocking (memory-maps the file, reads only its header). Raises
    :class:`ModelLoadError` when the file is missing, unreadable or not GGUF.
    """
    target = Path(path)
    try:
        with (
            target.open("rb") as file,
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            return _parse(_Reader(data, target))
    except FileNotFoundError:
        raise ModelLoadError(f"model file not found: {target}") from None
    except (OSError, ValueError, struct.error) as exc:  # ValueError: mmap of an empty file
        raise ModelLoadError(f"cannot read model file {target}: {exc}") from exc


def _parse(reader: _Reader) -> GgufMetadata:
    if bytes(reader.data[:4]) != _MAGIC:
        raise reader.fail("bad magic (expected GGUF)")
    reader.offset = 4
    version = reader.unpack("<I")
    if version < 2:
        raise reader.fail(f"GGUF version {version} is too old")
    reader.unpack("<Q")  # tensor count
    kv_count = reader.unpack("<Q")
    values: dict[str, Any] = {}
    tokens: tuple[int, int] | None = None  # (count, offset of elements)
    for _ in range(kv_count):
        key = reader.string()
        kind = reader.unpack("<I")
        if kind == _ARRAY:
            element, count, start = reader.skip_array()
            if key == "tokenizer.ggml.tokens" and element == _STRING:
                tokens = (count, start)
        else:
            values[key] = reader.value(kind)

    wanted: dict[int, str] = {}
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        token_id = values.get(key)
        if isinstance(token_id, int) and tokens is not None and 0 <= token_id < tokens[0]:
            wanted[token_id] = ""
    if tokens is not None and wanted:
        reader.offset = tokens[1]
        last = max(wanted)
        for index in range(last + 1):
            if index in wanted:
                wanted[index] = reader.string()
            else:
                reader.skip_string()

    def token_text(key: str) -> str:
        token_id = values.get(key)
        return wanted.get(token_id, "") if isinstance(token_id, int) else ""

    architecture = _str_or_none(values.get("general.architecture"))
    context = values.get(f"{architecture}.context_length") if architecture else None
    return GgufMetadata(
        architecture=architecture,
        name=_str_or_none(values.get("general.name")),
        chat_template=_str_or_none(values.get("tokenizer.chat_template")),
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"),
        context_length=context if isinstance(context, int) else None,
        token_count=tokens[0] if tokens is not None else 0,
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
