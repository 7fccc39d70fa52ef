"""``--host ROOT|URL``: which running Host a command talks to, and its token."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio
import uuid_utils

from emelex.cli._errors import HostSpecError

if TYPE_CHECKING:
    from emelex.service import HostClient

#: The environment variable a remote Host's token may come from (never a command-line
#: argument: those are visible to every user through ``ps``).
TOKEN_ENV = "EMELEX_HOST_TOKEN"
MAX_TOKEN_BYTES = 4096

HOST_HELP = (
    "drive a session on a running Host: its root directory (Unix socket) or its "
    f"http(s):// URL (token from --token-file or ${TOKEN_ENV})"
)


def is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def read_token(token_file: str | None) -> str | None:
    """The bearer token for a URL Host: ``--token-file``, else the environment."""
    if token_file is not None:
        try:
            with open(token_file, "rb") as handle:
                raw = handle.read(MAX_TOKEN_BYTES + 1)
        except OSError as exc:
            raise HostSpecError(f"cannot read the token file {token_file!r}: {exc}") from exc
        if len(raw) > MAX_TOKEN_BYTES:
            raise HostSpecError(f"the token file {token_file!r} is too long to be a token")
        token = raw.decode("utf-8", "replace").strip()
        if not token:
            raise HostSpecError(f"the token file {token_file!r} is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


@asynccontextmanager
async def host_client(spec: str, token_file: str | None = None) -> AsyncIterator[HostClient]:
    """A connected client of the Host at ``spec`` (a root directory or a URL)."""
    from emelex.service import HostClient

    if is_url(spec):
        async with HostClient.connect(spec, token=read_token(token_file)) as client:
            yield client
        return
    if token_file is not None:
        raise HostSpecError("--token-file is for a Host URL; a root directory needs no token")
    root = await trio.Path(spec).expanduser()
    if not await root.is_dir():
        raise HostSpecError(f"--host {spec!r}: no such directory (and not an http(s) URL)")
    socket = root / ".emelex" / "host.sock"
    if not await socket.exists():
        raise HostSpecError(
            f"no Host serves {str(root)!r} (no {socket}): start one with emelex serve --root {root}"
        )
    async with HostClient.connect(root=root) as client:
        yield client


def operation_ref() -> str:
    """A fresh operation reference; a retry of the same request reuses it."""
    return f"cli-{uuid_utils.uuid7()}"
