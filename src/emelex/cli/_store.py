"""Where the command line's session store lives, opened with one-line errors.

``--store PATH`` names a SQLite file, or a directory that holds ``sessions.db``. Without
it the store is ``sessions.db`` in ``$EMELEX_HOME`` (or ``$XDG_DATA_HOME/emelex``, or
``~/.local/share/emelex``), a directory created 0700.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio

from emelex.store import (
    SqliteStore,
    StoreError,
    directory_looser_than_private,
    make_private_directory,
    open_sqlite_store,
)

STORE_FILE = "sessions.db"
_logger = logging.getLogger("emelex.store")


@attrs.frozen
class StoreLocation:
    path: str
    #: The directory emelex keeps the store in (checked for privacy), or None when the
    #: user named a file somewhere of their choosing.
    directory: str | None
    explicit: bool


def default_store_directory() -> str:
    return os.environ.get("EMELEX_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "emelex"
    )


def store_location(given: str | None) -> StoreLocation:
    if not given:
        directory = default_store_directory()
        return StoreLocation(os.path.join(directory, STORE_FILE), directory, explicit=False)
    if os.path.isdir(given):
        return StoreLocation(os.path.join(given, STORE_FILE), given, explicit=True)
    if given.endswith(os.sep):
        raise StoreError(f"store directory {given} does not exist")
    return StoreLocation(given, None, explicit=True)


def _warnings_to_stderr() -> None:
    """The store's logged warnings become one ``emelex: warning:`` line each."""
    if not any(getattr(h, "_emelex_cli", False) for h in _logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("emelex: warning: %(message)s"))
        handler._emelex_cli = True  # type: ignore[attr-defined]
        _logger.addHandler(handler)
        _logger.propagate = False


def _prepare(given: str | None, create: bool) -> StoreLocation | None:
    """The store's location, its directory made (default) and checked; None when a
    default store that does not exist is only to be read."""
    location = store_location(given)
    if not os.path.exists(location.path) and not create:
        if location.explicit:
            raise StoreError(
                f"no session store at {location.path} (emelex chat --store creates one)"
            )
        return None
    if location.directory is not None:
        if not location.explicit:
            try:
                make_private_directory(location.directory)
            except OSError as exc:
                raise StoreError(
                    f"cannot create the store directory {location.directory}: {exc.strerror or exc}"
                ) from exc
        problem = directory_looser_than_private(location.directory)
        if problem is not None:
            _logger.warning(problem)
    return location


@asynccontextmanager
async def open_cli_store(given: str | None, *, create: bool) -> AsyncIterator[SqliteStore | None]:
    """The store ``--store`` names (see the module docs). With ``create`` false a store
    that does not exist yet is ``None`` when it is the default one (nothing stored yet)
    and a :class:`StoreError` when the user named it. Every failure is a StoreError."""
    _warnings_to_stderr()
    location = await trio.to_thread.run_sync(_prepare, given, create)
    if location is None:
        yield None
        return
    async with open_sqlite_store(location.path) as store:
        yield store
