"""The session store on PostgreSQL (needs the ``postgres`` extra: psycopg 3).

Kept out of :mod:`emelex.store` so that importing the store never needs psycopg.
"""

from emelex._facade import fix_module_names
from emelex.store.postgres._connection import (
    DEFAULT_POOL_SIZE,
    DEFAULT_STATEMENT_SECONDS,
    redact_dsn,
)
from emelex.store.postgres._store import PostgresStore, open_postgres_store

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_STATEMENT_SECONDS",
    "PostgresStore",
    "open_postgres_store",
    "redact_dsn",
]

fix_module_names(__name__, globals())
