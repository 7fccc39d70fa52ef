"""One rule for fences: a fence past the newest event is clamped, and the clamped value
is what the read answers, so a "fixed" fence never takes in rows committed later."""

from __future__ import annotations

from pathlib import Path

from emelex.contracts import Position
from emelex.testing import Say
from tests.service.conftest import OpenHost
from tests.service.test_host import agent, until_idle


async def test_a_fence_past_the_newest_event_is_clamped_everywhere(
    tmp_path: Path, open_host: OpenHost
) -> None:
    helper = agent([Say("first answer")], [Say("second answer")])
    async with open_host(tmp_path / "root", agents={"helper": helper}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "one", operation="s1")
        await until_idle(host, session.id)
        newest = (await host.history(session.id)).through
        future = newest + 1000
        page = await host.history(session.id, through=future)
        assert page.through == newest
        rows = [r.position for r in page.rows]
        found = await host.search(session.id, "answer", through=future)
        assert found.through == newest
        assert (await host.context(session.id, through=future)).through == newest
        assert (await host.diagnostics(session.id, through=future)).through <= newest

        await host.send(session.id, "two", operation="s2")
        await until_idle(host, session.id)
        # The same (clamped) fence still names the same rows; the future one would not.
        again = await host.history(session.id, through=page.through)
        assert [r.position for r in again.rows] == rows
        later = await host.search(session.id, "answer", through=found.through)
        assert [h.position for h in later.hits] == [h.position for h in found.hits]
        beyond = Position(source_sequence=newest + 1, item_index=0)
        assert await host.read_row(session.id, beyond, through=future) is None
