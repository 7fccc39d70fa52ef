"""Call asyncio-only libraries from tools, through trio-asyncio.

emelex runs on Trio; a library written for asyncio (an asyncio database driver, an
SDK built on asyncio streams or subprocesses) needs an asyncio loop. Open one around
your engine or session with :func:`open_asyncio_loop` and adapt the asyncio functions
with :func:`from_asyncio` (under ``@tool``) or :func:`asyncio_tool`. Cancellation
reaches the asyncio side. Needs the ``asyncio`` extra (``pip install
'emelex[asyncio]'``); importing this module installs trio-asyncio's asyncio hooks.
"""

try:
    import trio_asyncio as _trio_asyncio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("emelex.aio needs trio-asyncio: pip install 'emelex[asyncio]'") from exc

from emelex._facade import fix_module_names
from emelex.aio._adapter import asyncio_tool, from_asyncio, runs_on_asyncio
from emelex.aio._loop import (
    AsyncioLoopMissing,
    AsyncioTaskCancelled,
    current_asyncio_loop,
    open_asyncio_loop,
)

__all__ = [
    "AsyncioLoopMissing",
    "AsyncioTaskCancelled",
    "asyncio_tool",
    "current_asyncio_loop",
    "from_asyncio",
    "open_asyncio_loop",
    "runs_on_asyncio",
]

fix_module_names(__name__, globals())
