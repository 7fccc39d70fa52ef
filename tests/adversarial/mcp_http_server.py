"""The test FastMCP server over Streamable HTTP in its own process, so a test can kill it.

Run as ``python -m tests.adversarial.mcp_http_server`` from the repository root; it
prints ``port <n>`` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import sys
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from tests.tools.mcp.mcp_test_server import build_server


async def main() -> None:
    asgi: Any = build_server("emelex-http-child").streamable_http_app()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(asgi, config, task_status=task_status)
        )
        sys.stdout.write(f"port {binds[0].rsplit(':', 1)[1]}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    trio.run(main)
