"""A served Host in a process of its own, for the CLI's ``--host`` tests: the code path
of ``emelex serve`` (``emelex.service.transport._serve.serve``) with an agent the tests script.

``python -m tests.cli.host_child ROOT SCRIPT OUT [--tcp]`` serves the agent ``helper``:
a ScriptedModel replaying SCRIPT (the ``scripted:FILE`` format) and one tool, ``save``,
that needs approval and writes a file into OUT. SIGTERM drains and stops it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.cli._models import _scripted
from emelex.service.transport._serve import Listen, ServeOptions, Serving, serve
from emelex.tools import tool


def _agent(script: Path, out: Path) -> Agent:
    @tool(needs_approval=True)
    async def save(name: str, content: str) -> str:
        """Save a file.

        Args:
            name: The file's name.
            content: What it holds.
        """
        await trio.Path(out / name).write_text(content)
        return f"saved {name}"

    model = _scripted(str(script)).model
    builder = Agent.builder().name("helper").instructions("Help.").model(model).tool(save)
    return builder.approver(DenyAll()).build()


def _announce(serving: Serving) -> None:
    print(f"listening on unix:{serving.socket_path}", flush=True)
    if serving.url is not None:
        print(f"listening on {serving.url}", flush=True)


async def main(root: Path, script: Path, out: Path, tcp: bool) -> None:
    stop = trio.Event()
    options = ServeOptions(root=root, listen=Listen("127.0.0.1", 0) if tcp else None, grace=1)
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    stop.set()
                    return

        nursery.start_soon(on_signal)
        await serve(options, {"helper": _agent(script, out)}, stop=stop, ready=_announce)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    root, script, out = (Path(arg) for arg in sys.argv[1:4])
    trio.run(main, root, script, out, "--tcp" in sys.argv[4:])
