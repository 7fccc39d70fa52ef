"""The Host over its wire transport against the anchors it is judged by, in the same run.

- round trip: one ``queue`` request through ``HostClient`` over the Unix socket against a
  bare hypercorn hello-world route answering the same kind of POST over a Unix socket,
  through the same httpx client setup (goal ≤ 1.5x time);
- watch rows/s: one watcher catching up through a session's history from a served Host
  (``emelex serve`` in its own process) against ``Host.watch`` in process (goal ≥ 0.5x);
- 200 remote watchers of one busy session: p99 from each send to each watcher receiving
  the update that shows it (goal ≤ 100 ms).

How the busy session is measured: the Host runs as ``emelex serve`` in its own process,
so its CPU is not shared with the 200 watchers' decoding; the watchers and the sender
share one client process (one ``HostClient``, 200 WebSockets), as one busy client would.
The session gets one ``send`` at a time, the next 100 ms after the previous one was
admitted; each runs a short scripted turn, which publishes about five updates (queued,
running, the rows, the emptied queue, the pending interactions) to every watcher. A
sample is taken from just before the client issues the ``send`` to the moment a watcher's
iterator yields the first update naming it (its queue entry, or its row): an upper bound
of commit-to-receipt, since it also holds the request and its admission. All watchers are
connected and have received their first update before the first send. The same
measurement runs against ``Host.watch`` in process for the ratio. The processes share the
machine's cores with whatever else runs, so compare ratios of one run.

Is it sound? The round trip runs both ends in this one process and Trio loop (the served
Host and its HostClient; the hello route and its httpx client), so it measures the CPU
of a request end to end, not any wait: on a Unix socket there is no Nagle or delayed
ACK, and the wall time per request tracks its CPU time (about 4,700 Python calls per
request, hypercorn's HTTP/1.1 path about half of them, httpx the rest; both sides pay
them alike). The watch rate's anchor runs alone, while the remote figure needs the
served Host and the client to work at once on two cores: on a loaded machine it falls
towards the sum of their CPU, so the row notes the CPU each side spent. The 200 watchers
live in one client process, which decodes and iterates every watcher's frames; the row
notes the CPU the client and the served Host spent while the sends ran, so a saturated
process shows (neither is, since the sender-side wake-ups were cut: each takes about
40-50 ms of CPU per send on the shared machine). The single-process figure is the one
the goal is judged by.

    .venv/bin/python benchmarks/transport.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from emelex.app import export_agent
from emelex.contracts import QueueChanged, RowsPublished
from emelex.service import Host, HostClient
from emelex.service.transport._serve import ServeOptions, serve

try:
    from benchmarks._table import Row, met, number, ratio
    from benchmarks.service import fill, idle_agent
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from benchmarks._table import Row, met, number, ratio
    from benchmarks.service import fill, idle_agent


async def hello_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The anchor: read the body, answer a small JSON object."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    body = b'{"hello":"world"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"17")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def round_trips(base: Path, count: int) -> list[Row]:
    root = base / "rt"
    root.mkdir()
    # The Host in this process, served on its socket (what `emelex serve` runs).
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        ready = trio.Event()
        options = ServeOptions(root=root, grace=0.0)
        agents = {"bench": idle_agent()}
        nursery.start_soon(lambda: serve(options, agents, stop=stop, ready=lambda _: ready.set()))
        await ready.wait()
        async with HostClient.connect(root=root) as client:
            session_id = (await client.create_session("bench", base, operation="c")).session.id
            for _ in range(50):
                await client.queue(session_id)
            began = time.perf_counter()
            for _ in range(count):
                await client.queue(session_id)
            ours = (time.perf_counter() - began) / count
        stop.set()
    path = base / "hello.sock"
    config = Config()
    config.bind = [f"unix:{path}"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    body = json.dumps({"sessionId": session_id}).encode()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hypercorn_serve(
                hello_app,  # type: ignore[arg-type]
                config,
                shutdown_trigger=shutdown.wait,
                task_status=task_status,
            )
        )
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        async with httpx.AsyncClient(transport=transport, base_url="http://hello") as http:
            for _ in range(50):
                (await http.post("/", content=body)).raise_for_status()
            began = time.perf_counter()
            for _ in range(count):
                response = await http.post(
                    "/", content=body, headers={"content-type": "application/json"}
                )
                json.loads(await response.aread())
            theirs = (time.perf_counter() - began) / count
        shutdown.set()
    times = ours / theirs
    print(f"round trip: HostClient {ours * 1e6:.0f} us, bare hypercorn {theirs * 1e6:.0f} us")
    return [
        Row(
            f"request round trip over the Unix socket (queue, mean of {count:,})",
            f"{ours * 1e6:.0f} us",
            f"{theirs * 1e6:.0f} us bare hypercorn route + httpx",
            ratio(times),
            "≤ 1.5x",
            met(times <= 1.5),
        )
    ]


@contextlib.asynccontextmanager
async def serve_process(root: Path, model: Path) -> AsyncIterator[trio.Process]:
    """``emelex serve`` of ``root`` as its own process, until the block exits."""
    command = [sys.executable, "-m", "emelex.cli", "serve", "--root", str(root)]
    command += ["--model", f"scripted:{model}", "--grace", "0"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(120):
            while b"listening on unix:" not in seen:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    raise RuntimeError(f"emelex serve exited early: {seen!r}")
                seen += chunk
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


def _package(root: Path, base: Path) -> Path:
    export_agent(idle_agent(), root / "agents" / "bench")
    model = base / "idle.json"
    model.write_text(json.dumps({"rounds": [[{"wait": 3600}]] * 1000}))
    return model


async def _watch_all(host: Any, session_id: str, rows: int) -> float:
    got = 0
    began = time.perf_counter()
    async with host.watch(session_id) as updates:
        async for update in updates:
            if isinstance(update, RowsPublished):
                got += len(update.rows)
                if got >= rows:
                    break
    return rows / (time.perf_counter() - began)


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of process ``pid`` so far (Linux; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def watch_rate(base: Path, rows: int) -> list[Row]:
    root = base / "watch"
    workspace = base / "work"
    workspace.mkdir(exist_ok=True)
    session_id, _ = await fill(root / ".emelex", workspace, rows, 200)
    model = _package(root, base)
    async with Host.open(root / ".emelex", agents={"bench": idle_agent()}) as host:
        began = time.process_time()
        local = await _watch_all(host, session_id, rows)
        local_cpu = time.process_time() - began
    async with serve_process(root, model) as process, HostClient.connect(root=root) as client:
        host_before = _cpu_seconds(process.pid)
        began = time.process_time()
        remote = await _watch_all(client, session_id, rows)
        client_cpu = time.process_time() - began
        host_after = _cpu_seconds(process.pid)
    speed = remote / local
    print(f"watch: remote {remote:,.0f} rows/s, in process {local:,.0f} rows/s")
    # The wall-clock ratio needs two free cores (the Host and the client work at once);
    # on a loaded machine the CPU each side spent is the steadier figure.
    note = ""
    if host_before is not None and host_after is not None:
        host_cpu = host_after - host_before
        note = (
            f"CPU: in process {local_cpu:.2f} s; served Host {host_cpu:.2f} s and client "
            f"{client_cpu:.2f} s, working at once: {local_cpu / max(host_cpu, client_cpu):.2f}x"
        )
        print(f"watch {note}")
    return [
        Row(
            f"watch rows/s, one remote watcher catching up {rows:,} rows",
            f"{number(remote, 0)}/s",
            f"{number(local, 0)}/s Host.watch in process",
            ratio(speed, unit="speed"),
            "≥ 0.5x",
            met(speed >= 0.5),
            note,
        )
    ]


async def _busy_latencies(
    host: Any,
    session_id: str,
    watchers: int,
    sends: int,
    interval: float,
    phase: list[float] | None = None,
    host_pid: int | None = None,
) -> list[float]:
    """Latencies from each send to each watcher's first update showing it (its queue
    entry, or its row), ``watchers`` watches of ``host`` (a Host or a HostClient).
    ``phase`` receives the sending phase's wall time, this process's CPU time and the
    CPU time of process ``host_pid`` (when given and readable), all watchers connected."""
    latencies: list[float] = []
    sent_at: dict[str, float] = {}
    ready = 0
    all_ready = trio.Event()

    async def watcher() -> None:
        nonlocal ready
        seen: set[str] = set()
        async with host.watch(session_id) as updates:
            async for update in updates:
                now = time.perf_counter()
                if not sent_at and not seen:
                    seen.add("ready")
                    ready += 1
                    if ready == watchers:
                        all_ready.set()
                    continue
                names: list[str] = []
                if isinstance(update, QueueChanged):
                    names = [entry.operation for entry in update.queue.entries]
                elif isinstance(update, RowsPublished):
                    names = [f"send-{r.body[5:]}" for r in update.rows if r.role == "user"]
                for name in names:
                    if name in sent_at and name not in seen:
                        seen.add(name)
                        latencies.append(now - sent_at[name])
                if f"send-{sends - 1}" in seen:
                    return

    async with trio.open_nursery() as nursery:
        for _ in range(watchers):
            nursery.start_soon(watcher)
        with trio.fail_after(300):
            await all_ready.wait()
        began = (time.perf_counter(), time.process_time())
        host_began = None if host_pid is None else _cpu_seconds(host_pid)
        for n in range(sends):
            operation = f"send-{n}"
            sent_at[operation] = time.perf_counter()
            await host.send(session_id, f"task {n}", operation=operation)
            await trio.sleep(interval)
    if phase is not None:
        phase += [time.perf_counter() - began[0], time.process_time() - began[1]]
        host_ended = None if host_pid is None else _cpu_seconds(host_pid)
        if host_began is not None and host_ended is not None:
            phase.append(host_ended - host_began)
    return sorted(latencies)


def _p99(latencies: list[float]) -> float:
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


async def busy_watchers(base: Path, watchers: int, sends: int, interval: float) -> list[Row]:
    """``watchers`` remote watches (HostClient, `emelex serve` in its own process) of one
    session running a short turn for each of ``sends`` messages sent ``interval`` apart,
    beside the same in process."""
    rounds = {"rounds": [[{"say": f"answer {n}"}] for n in range(sends)]}
    model = base / "busy.json"
    model.write_text(json.dumps(rounds))
    local_root = base / "busy-local"
    local_root.mkdir()
    agent = load_package_agent(base, model)
    async with Host.open(local_root / ".emelex", agents={"bench": agent}) as host:
        session_id = (await host.create_session("bench", base, operation="c")).session.id
        local = await _busy_latencies(host, session_id, watchers, sends, interval)
    root = base / "busy"
    root.mkdir()
    export_agent(idle_agent(), root / "agents" / "bench")
    async with serve_process(root, model) as process, HostClient.connect(root=root) as client:
        session_id = (await client.create_session("bench", base, operation="c")).session.id
        phase: list[float] = []
        remote = await _busy_latencies(
            client, session_id, watchers, sends, interval, phase, process.pid
        )
    p50, p99, local_p99 = statistics.median(remote), _p99(remote), _p99(local)
    print(
        f"{watchers} remote watchers: p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms;"
        f" in process p99 {local_p99 * 1e3:.1f} ms"
    )
    # Which process is saturated: the CPU each spent while the sends ran (from the
    # first send until every watcher saw the last), over that wall time.
    wall, client_cpu = phase[0], phase[1]
    note = f"CPU over the {wall:.1f} s of sends: client {client_cpu:.2f} s"
    note += f" ({client_cpu / wall:.0%})"
    if len(phase) > 2:
        note += f", served Host {phase[2]:.2f} s ({phase[2] / wall:.0%})"
    print(f"busy {note}")
    return [
        Row(
            f"{watchers} remote watchers of a busy session (a turn every "
            f"{interval * 1e3:.0f} ms), send to update p99 (p50 {p50 * 1e3:.1f} ms)",
            f"{p99 * 1e3:.1f} ms",
            f"{local_p99 * 1e3:.1f} ms {watchers} watchers in process",
            ratio(p99 / local_p99),
            "≤ 100 ms",
            met(p99 <= 0.100),
            note,
        )
    ]


def load_package_agent(base: Path, model: Path) -> Any:
    """The agent `emelex serve` builds from the package and the scripted model."""
    from emelex.app import load_package
    from emelex.cli._models import _scripted

    package = base / "pkg" / "bench"
    export_agent(idle_agent(), package)
    binding = load_package(package).info.binding
    return load_package(package, bindings={binding: _scripted(str(model))}).agent


async def measure(quick: bool) -> list[Row]:
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as temp:
        base = Path(temp)
        out += await round_trips(base, 500 if quick else 3000)
        out += await watch_rate(base, 20_000 if quick else 100_000)
        out += await busy_watchers(base, 200, 20 if quick else 50, 0.1)
    return out


def rows(quick: bool) -> list[Row]:
    return trio.run(measure, quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer requests and rows")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).parents[1]))
    for row in rows(args.quick):
        print(row)


if __name__ == "__main__":
    main()
