"""Exact bytes on the wire: standard base64 with padding (``bytesBase64``).

Paths and file contents are bytes on POSIX; a JSON string cannot carry arbitrary bytes
losslessly, so the wire carries their base64 form and clients decode it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, NewType

from emelex.contracts._errors import ContractError
from emelex.contracts._wire import wire_string

#: Standard base64 (RFC 4648 alphabet) with ``=`` padding, nothing else.
BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: Bytes in one relative path (Linux ``PATH_MAX``) and its base64 length.
MAX_PATH_BYTES: Final = 4096
MAX_PATH_BASE64: Final = (MAX_PATH_BYTES + 2) // 3 * 4

BytesBase64 = NewType("BytesBase64", str)
wire_string(
    BytesBase64,
    "BytesBase64",
    pattern=BASE64_PATTERN,
    max_len=MAX_PATH_BASE64,
    description=(
        "Exact pathname bytes (at most 4096) as standard base64 with padding; never a "
        "lossy text conversion."
    ),
)


def to_base64(data: bytes) -> str:
    """The wire form of exact bytes."""
    return base64.b64encode(data).decode("ascii")


def from_base64(text: str) -> bytes:
    """The exact bytes of a wire ``bytesBase64`` value; anything else is a ContractError."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise ContractError(f"not standard base64: {exc}") from exc
