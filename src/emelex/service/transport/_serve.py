"""``emelex serve``: one Host for a root directory, on its Unix socket and optionally TCP.

The root's private state lives in ``ROOT/.emelex/`` (mode 0700): the store, the lock
file naming the serving pid, the socket ``host.sock`` (0600) and, with TCP, the bearer
token file ``token`` (0600). A second ``serve`` of the same root finds the lock held and
says by whom. Draining (SIGTERM) refuses new work, waits up to the grace period for the
queues to empty, then closes the Host (running turns end by the harness rules and are
recorded) and the listeners, and returns.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import ipaddress
import logging
import os
import pathlib
import secrets
import socket
import stat
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Final

import attrs
import trio
from hypercorn.config import Config

from emelex.service._errors import HostLocked, ServeError
from emelex.service.transport._http import HostApp, Limits
from emelex.service.transport._listen import serve_listener

if TYPE_CHECKING:
    from emelex.app import Agent, Harness
    from emelex.service._host import Host

#: The private state directory under a root, and the files in it.
STATE_DIR: Final = ".emelex"
SOCKET_FILE: Final = "host.sock"
TOKEN_FILE: Final = "token"
LOCK_FILE: Final = "host.lock"
#: How long draining waits for queued and running work before closing the Host.
DEFAULT_GRACE: Final = 30.0

_log = logging.getLogger("emelex.service")


@attrs.frozen
class Listen:
    """A TCP address to serve; anything but loopback needs ``public`` and TLS."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listen:
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ServeError(f"--listen takes HOST:PORT, got {text!r}")
        return cls(host, int(port))

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@attrs.frozen
class ServeOptions:
    root: pathlib.Path
    listen: Listen | None = None
    public: bool = False
    cert: pathlib.Path | None = None
    key: pathlib.Path | None = None
    grace: float = DEFAULT_GRACE
    limits: Limits = attrs.field(factory=Limits)
    #: A PostgreSQL connection string (never logged), or None for the root's SQLite file.
    store: str | None = attrs.field(default=None, repr=False)
    #: Serve AG-UI runs (``POST /ag-ui/run``) on every listener (docs/service/ag-ui.md).
    ag_ui: bool = False

    def check(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ServeError("TLS needs both --cert and --key")
        if self.listen is None:
            if self.public or self.cert is not None:
                raise ServeError("--public, --cert and --key apply to --listen")
            return
        if not self.listen.loopback:
            if not self.public:
                raise ServeError(
                    f"{self.listen.host} is not a loopback address: binding it needs --public"
                )
            if self.cert is None:
                raise ServeError("a --public listener needs TLS: pass --cert and --key")


@attrs.frozen
class Serving:
    """What a started ``serve`` reports: where it listens and its token file."""

    socket_path: pathlib.Path
    url: str | None
    token_path: pathlib.Path | None


def state_dir(root: pathlib.Path) -> pathlib.Path:
    """Create ``root/.emelex`` (0700), tightening an existing directory's mode."""
    path = root / STATE_DIR
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


@contextlib.contextmanager
def hold_lock(state: pathlib.Path) -> Iterator[None]:
    """Hold the root's lock for the block; :class:`HostLocked` names the holder's pid.
    The kernel releases an flock when its process dies, so a killed Host never leaves
    its root locked."""
    path = state / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise HostLocked(f"another Host (pid {holder}) serves {state.parent}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def ensure_token(state: pathlib.Path) -> pathlib.Path:
    """The root's token file (0600), generated once and kept across restarts."""
    path = state / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        if len(path.read_text().strip()) < 32:
            raise ServeError(f"the token file {path} holds no usable token") from None
        return path
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_urlsafe(32) + "\n")
    return path


def _unix_socket(path: pathlib.Path) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket of a Host that died (we hold the root's lock)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)  # before listen: no connection is accepted with a wider mode
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {path}: {exc.strerror}") from exc
    return sock


def _tcp_socket(listen: Listen) -> socket.socket:
    try:
        infos = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeError(f"cannot resolve {listen.host}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {listen.host}:{listen.port}: {exc.strerror}") from exc
    return sock


def _config(options: ServeOptions, *, tls: bool) -> Config:
    config = Config()
    config.accesslog = None  # an access log line would carry nothing secret, but says little
    config.errorlog = logging.getLogger("emelex.service.http")
    config.websocket_max_message_size = options.limits.max_ws_message
    config.graceful_timeout = 5.0
    config.keep_alive_timeout = options.limits.idle_seconds
    config.include_server_header = False
    if tls:
        assert options.cert is not None
        assert options.key is not None
        config.certfile = str(options.cert)
        config.keyfile = str(options.key)
    return config


async def _busy(host: Host) -> bool:
    for info in await host.sessions():
        if info.state == "running" or (await host.queue(info.id)).entries:
            return True
    return False


async def _drain(host: Host, apps: list[HostApp], grace: float) -> None:
    for app in apps:
        app.draining = True
    with trio.move_on_after(grace):
        while await _busy(host):  # noqa: ASYNC110 (the Host announces no "all idle" event)
            await trio.sleep(0.05)
    host.begin_close()  # ends watches ("closed") and settles running turns


async def serve(
    options: ServeOptions,
    agents: Mapping[str, Agent],
    *,
    stop: trio.Event,
    ready: Callable[[Serving], None] = lambda serving: None,
    harnesses: Mapping[str, Harness] | None = None,
) -> None:
    """Serve the root until ``stop`` is set, then drain and return. ``ready`` is called
    once every listener accepts connections; ``harnesses`` as for :meth:`Host.open`.
    Raises :class:`HostLocked` or :class:`ServeError` before serving when the root or
    an address is unavailable."""
    from emelex.service._host import Host

    options.check()
    root = options.root.resolve()
    if not root.is_dir():
        raise ServeError(f"the root {root} is not a directory")
    state = state_dir(root)
    with hold_lock(state):
        token_path = ensure_token(state) if options.listen is not None else None
        token = None if token_path is None else token_path.read_text().strip()
        if options.cert is not None and options.key is not None:
            for path in (options.cert, options.key):
                if not path.is_file():
                    raise ServeError(f"cannot read {path}")
        listeners: list[tuple[HostApp, socket.socket, Config, bool]] = []
        socket_path = state / SOCKET_FILE
        async with Host.open(
            state, agents=agents, harnesses=harnesses, store=options.store
        ) as host:
            unix = _unix_socket(socket_path)
            unix_app = HostApp(host, token=None, limits=options.limits, ag_ui=options.ag_ui)
            listeners.append((unix_app, unix, _config(options, tls=False), False))
            url = None
            if options.listen is not None:
                tcp = _tcp_socket(options.listen)
                tls = options.cert is not None
                tcp_app = HostApp(host, token=token, limits=options.limits, ag_ui=options.ag_ui)
                listeners.append((tcp_app, tcp, _config(options, tls=tls), tls))
                bound_host, bound_port = tcp.getsockname()[:2]
                shown = f"[{bound_host}]" if ":" in bound_host else bound_host
                url = f"{'https' if tls else 'http'}://{shown}:{bound_port}"
            shutdown = trio.Event()
            try:
                async with trio.open_nursery() as nursery:
                    for app, sock, config, tls in listeners:
                        listen = functools.partial(
                            serve_listener,
                            app,
                            config,
                            sock,
                            tls=tls,
                            max_connections=options.limits.max_connections,
                            shutdown=shutdown,
                        )
                        await nursery.start(listen)
                    ready(Serving(socket_path, url, token_path))
                    await stop.wait()
                    await _drain(host, [entry[0] for entry in listeners], options.grace)
                    shutdown.set()
            finally:
                with contextlib.suppress(FileNotFoundError):
                    socket_path.unlink()
