"""Temporal's errors arrive as emelex's: an unreachable server is TemporalUnavailable."""

from __future__ import annotations

import pytest
import trio

from emelex.temporal import TemporalEngine, TemporalUnavailable, free_port


async def test_an_unreachable_server_is_temporal_unavailable() -> None:
    with trio.fail_after(30):
        async with TemporalEngine(f"127.0.0.1:{free_port()}") as engine:
            with pytest.raises(TemporalUnavailable, match="cannot reach Temporal"):
                await engine.start()
