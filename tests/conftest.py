"""Suite-wide fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.postgres_server import (
    REQUIRE_ENV,
    PostgresServer,
    PostgresUnavailable,
    running_postgres,
)

# Property tests assert behaviour, never speed: on a loaded two-core CI machine one
# example can take longer than hypothesis's default 200 ms deadline, which would fail a
# correct test. Benchmarks (benchmarks/) measure time instead.
settings.register_profile("emelex", deadline=None)
settings.load_profile("emelex")


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """emelex's cache (the llama.cpp buffer-type verdict) in a fresh directory: the suite
    never reads or writes the user's cache, and a fresh machine's first run is what is
    tested. Subprocesses (the CLI tests) inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMELEX_CACHE_DIR", str(tmp_path_factory.mktemp("emelex-cache")))
        patch.delenv("EMELEX_LLAMA_EXTRA_BUFFERS", raising=False)
        yield


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL for the whole run (skipped without binaries, unless
    EMELEX_REQUIRE_POSTGRES=1 makes that a failure, as in CI)."""
    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailable as exc:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1): {exc}")
        pytest.skip(f"no PostgreSQL: {exc}")


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """A fresh, empty database of the session's server."""
    return postgres_server.create_database()
