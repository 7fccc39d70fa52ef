"""Incremental UTF-8 decoding that agrees with llama.cpp's grammar engine.

Generated text arrives token by token, and a character may be split across tokens, so
bytes of an unfinished character are carried over to the next call. Valid UTF-8 decodes
exactly as Python decodes it. Malformed input is decoded the way llama.cpp's grammar
reads it (it checks lead and continuation bits but not overlong forms), so a grammar
that counted N characters yields a string of N characters here: an overlong spelling
becomes the character it spells, a value no string can hold (a surrogate, or past
U+10FFFF) and a sequence llama.cpp rejects become U+FFFD.
"""

from __future__ import annotations

from typing import Final

# Sequence length by the high nibble of the first byte; 0 marks a continuation byte.
_LENGTH: Final = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)
_REPLACEMENT: Final = "\ufffd"


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


class Utf8Decoder:
    """Decodes a byte stream piece by piece (see the module docstring)."""

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = b""

    def decode(self, data: bytes, *, final: bool = False) -> str:
        """Decode ``data`` after what was carried over; with ``final``, an unfinished
        character at the end becomes U+FFFD instead of being carried."""
        if self._carry:
            data, self._carry = self._carry + data, b""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return self._decode_slowly(data, final)

    def _decode_slowly(self, data: bytes, final: bool) -> str:
        out: list[str] = []
        index, size = 0, len(data)
        while index < size:
            byte = data[index]
            if byte < 0x80:
                end = index + 1
                while end < size and data[end] < 0x80:
                    end += 1
                out.append(data[index:end].decode("ascii"))
                index = end
                continue
            length = _LENGTH[byte >> 4]
            if length == 0:
                out.append(_REPLACEMENT)
                index += 1
                continue
            tail = data[index + 1 : index + length]
            if not all(_is_continuation(each) for each in tail):
                out.append(_REPLACEMENT)
                index += 1
                continue
            if len(tail) < length - 1:  # the character continues in the next piece
                if not final:
                    self._carry = data[index:]
                    break
                out.append(_REPLACEMENT)
                break
            value = byte & ((1 << (8 - length)) - 1) if length > 1 else byte
            for each in tail:
                value = (value << 6) | (each & 0x3F)
            valid = value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF
            out.append(chr(value) if valid else _REPLACEMENT)
            index += length
        return "".join(out)

    def reset(self) -> None:
        self._carry = b""
