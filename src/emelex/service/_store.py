"""Which store a Host opens: its SQLite file under the root, or a PostgreSQL database.

``emelex serve --store postgresql://...`` passes the connection string; without the flag
it may come from ``EMELEX_STORE`` (:func:`store_from_environment`). A bare
``postgresql://`` lets libpq take every part from the PG* variables (PGHOST, PGUSER,
PGPASSWORD, ...), so a password need never appear on a command line.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final

from emelex.service._errors import ServiceError
from emelex.store import Store, open_sqlite_store

#: The environment variable naming the Host's store when no option does.
STORE_ENV: Final = "EMELEX_STORE"
_SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres_dsn(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL database (a URL, or libpq key=value form)."""
    return value.startswith(_SCHEMES) or ("=" in value and "://" not in value)


def store_from_environment(
    given: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The store a Host should open: ``given`` (a command-line option), else
    ``EMELEX_STORE``, else None (the SQLite file under the Host's root)."""
    if given:
        return given
    value = (os.environ if environ is None else environ).get(STORE_ENV, "").strip()
    return value or None


@asynccontextmanager
async def open_host_store(root: pathlib.Path, store: str | None) -> AsyncIterator[Store]:
    """Open the Host's store: ``root/host.db`` when ``store`` is None, else the
    PostgreSQL database it names (psycopg is imported only then)."""
    if store is None:
        async with open_sqlite_store(str(root / "host.db")) as sqlite:
            yield sqlite
        return
    if not is_postgres_dsn(store):
        raise ServiceError(
            "a Host store is a PostgreSQL connection string (postgresql://...);"
            " leave it unset for the SQLite file under the Host's root"
        )
    try:
        from emelex.store.postgres import open_postgres_store
    except ImportError as exc:
        raise ServiceError(
            "a PostgreSQL store needs psycopg: pip install 'emelex[postgres]'"
        ) from exc
    async with open_postgres_store(store) as postgres:
        yield postgres
