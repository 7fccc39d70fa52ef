"""Issue 18 item 12: ``web_fetch`` and what a server declares about its body.

Charsets that are not text encodings (``hex``, ``base64``, ``zlib``, ``bz2``, ``uu``,
``rot13``), ``idna``, ``undefined`` and BOM-less UTF-16 of odd length raised unhandled
exceptions; a multi-member gzip body was silently cut after its first member. A real
server on loopback sends each case.
"""

from __future__ import annotations

import gzip
from functools import partial

import pytest
import trio

from emelex.tools.builtin import WebFetchTool
from emelex.tools.builtin._web_fetch import DEFAULT_CHARSET, body_charset, decode_body

from .conftest import invoke


class Server:
    """Answers every request with the ``headers`` and ``body`` set by the test."""

    def __init__(self) -> None:
        self.port = 0
        self.headers: dict[str, str] = {}
        self.body = b""

    async def handle(self, stream: trio.abc.Stream) -> None:
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            headers = {**self.headers, "Content-Length": str(len(self.body))}
            head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            await stream.send_all(head.encode("latin-1") + b"\r\n" + self.body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


@pytest.fixture
async def server(nursery: trio.Nursery) -> Server:
    served = Server()
    listeners = await nursery.start(partial(trio.serve_tcp, served.handle, 0, host="127.0.0.1"))
    served.port = listeners[0].socket.getsockname()[1]
    return served


async def _fetch(server: Server) -> str:
    tool = WebFetchTool(allow_private=True)
    with trio.fail_after(20):
        output = await invoke(tool, {"url": f"http://127.0.0.1:{server.port}/"}, approved=True)
    assert not output.is_error, output.text
    return output.text


@pytest.mark.parametrize(
    "charset", ["hex", "base64", "zlib", "bz2", "uu", "rot13", "idna", "undefined", "nonsense"]
)
async def test_charsets_that_are_not_text_fall_back_with_a_note(
    server: Server, charset: str
) -> None:
    server.headers = {"Content-Type": f"text/plain; charset={charset}"}
    server.body = "plain words é\n".encode()
    text = await _fetch(server)
    assert "decoded as UTF-8 instead]" in text
    assert text.endswith("plain words é\n")


async def test_odd_length_utf16_without_a_bom(server: Server) -> None:
    server.headers = {"Content-Type": "text/plain; charset=utf-16"}
    server.body = "hi!".encode("utf-16-le") + b"\x00"  # 7 bytes, no byte order mark
    text = await _fetch(server)
    assert text.endswith("hi!\ufffd")


async def test_text_charsets_are_still_honoured(server: Server) -> None:
    server.headers = {"Content-Type": "text/plain; charset=utf-16"}
    server.body = "\ufeffcafé".encode("utf-16-be")
    assert (await _fetch(server)).endswith("\ncafé")  # the byte order mark is consumed


async def test_every_gzip_member_is_decoded(server: Server) -> None:
    server.headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    server.body = gzip.compress(b"part one\n") + gzip.compress(b"part two\n") + b"\0" * 8
    text = await _fetch(server)
    assert "[body: 18 bytes]" in text
    assert text.endswith("part one\npart two\n")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (gzip.compress(b"complete\n") + b"garbage", "undecodable data follows the gzip stream"),
        (gzip.compress(b"x" * 5000)[:-12], "the gzip stream ends early"),
    ],
)
async def test_undecodable_gzip_endings_mark_the_body_cut(
    server: Server, body: bytes, problem: str
) -> None:
    server.headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    server.body = body
    text = await _fetch(server)
    assert f"[body cut: {problem}" in text


@pytest.mark.parametrize("name", ["utf-8\x00", "x" * 5000, "mbcs", "base64_codec", "rot-13"])
def test_odd_charset_names_never_raise(name: str) -> None:
    charset, note = body_charset(name)
    assert charset == DEFAULT_CHARSET and note is not None
    assert decode_body(b"ok \xff", charset, final=True) == ("ok \ufffd", None)
