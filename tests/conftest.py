"""Suite-wide fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

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
