"""A real asyncio line server for emelex.aio's tests, run on the trio-asyncio loop."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import trio

from emelex.agent import AgentSession, AgentTool
from emelex.aio import from_asyncio
from emelex.testing import ApproveAll, Call, Say, ScriptedModel


@attrs.define
class LineServer:
    """Answers each line upper-cased, or (``reply=False``) never answers and records
    when the client goes away. Its Trio events are set from the asyncio side."""

    reply: bool = True
    port: int = 0
    waiting: trio.Event = attrs.field(factory=trio.Event)
    client_gone: trio.Event = attrs.field(factory=trio.Event)
    server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            if self.reply:
                writer.write(line.upper())
                await writer.drain()
            else:
                self.waiting.set()
                await reader.read()  # b"" once the client closes its end
                self.client_gone.set()
        finally:
            writer.close()

    @from_asyncio
    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    @from_asyncio
    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@contextmanager
def one_call_session(tool: AgentTool, arguments: dict[str, object]) -> Iterator[AgentSession]:
    """A session whose scripted model calls ``tool`` once, then answers "done"."""
    model = ScriptedModel([[Call(tool.definition.name, arguments)], [Say("done")]])
    with tempfile.TemporaryDirectory() as workspace:
        builder = (
            AgentSession.builder(model, workspace)
            .include_file_tools(False)
            .include_shell_tool(False)
            .tool(tool)
            .approval_policy(ApproveAll())
        )
        with builder.build() as session:
            yield session
