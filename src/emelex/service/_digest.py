"""The digest that binds an operation reference to the exact request it named."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def operation_digest(action: str, body: dict[str, Any]) -> str:
    """``sha256:`` of the canonical JSON of ``action`` and ``body`` (sorted keys, no
    whitespace): equal requests give equal digests whatever their key order."""
    canonical = json.dumps(
        {"action": action, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
