"""Result mapping and discovery checks, on SDK values built in memory (no server)."""

from __future__ import annotations

import base64

import mcp.types as types
from pydantic import AnyUrl

from emelex.model import AudioPart, ImagePart, TextPart
from emelex.tools.mcp import McpServer
from emelex.tools.mcp._content import EMPTY_RESULT, cut_marker
from emelex.tools.mcp._sdk import to_output
from emelex.tools.mcp._tool import (
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_BYTES,
    RemoteTool,
    accept_tools,
    schema_problem,
)

URI = AnyUrl("file:///data.bin")


def result(*blocks: types.ContentBlock, **fields: object) -> types.CallToolResult:
    return types.CallToolResult(content=list(blocks), **fields)  # type: ignore[arg-type]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_media_and_errors() -> None:
    output = to_output(
        result(
            types.TextContent(type="text", text="a"),
            types.TextContent(type="text", text="b"),
            types.ImageContent(type="image", data=b64(b"img"), mimeType="IMAGE/PNG"),
            isError=True,
        ),
        4096,
    )
    assert output.is_error
    assert output.content == (TextPart("ab"), ImagePart(b"img", "image/png"))


def test_broken_media_becomes_notes() -> None:
    output = to_output(
        result(
            types.ImageContent(type="image", data="not base64!", mimeType="image/png"),
            types.AudioContent(type="audio", data=b64(b"x"), mimeType="text/plain"),
        ),
        4096,
    )
    assert output.text == (
        "[image omitted: its data is not valid base64]"
        "[audio omitted: unsupported mime type 'text/plain']"
    )


def test_resources_and_links() -> None:
    output = to_output(
        result(
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri=URI, mimeType="application/octet-stream", blob=b64(b"123456")
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(uri=URI, mimeType="audio/wav", blob=b64(b"w")),
            ),
            types.ResourceLink(
                type="resource_link", uri=URI, name="data", description="the data file"
            ),
        ),
        4096,
    )
    assert output.content == (
        TextPart("[binary resource file:///data.bin (application/octet-stream, ~6 bytes)]"),
        AudioPart(b"w", "audio/wav"),
        TextPart("[resource link file:///data.bin: the data file]"),
    )


def test_structured_content_only_and_empty_results() -> None:
    structured = to_output(result(structuredContent={"b": 1, "a": [True]}), 4096)
    assert structured.text == '{"a": [true], "b": 1}'
    assert to_output(result(), 4096).text == EMPTY_RESULT


def test_result_bound_cuts_text_on_characters_and_skips_large_media() -> None:
    limit = 1024
    output = to_output(
        result(
            types.TextContent(type="text", text="é" * 2000),
            types.ImageContent(type="image", data=b64(b"i" * 10), mimeType="image/png"),
        ),
        limit,
    )
    text = output.text
    assert text.endswith(cut_marker(limit))
    assert "image (image/png) omitted: it exceeds the result size limit" in text
    assert len(text.encode()) <= limit
    assert text.startswith("é" * 100)
    assert not any(isinstance(part, ImagePart) for part in output.content)


def test_discovery_checks() -> None:
    server = McpServer.http("srv", "https://h/mcp", max_tools=3)
    object_schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    listed = [
        RemoteTool("ok", "fine", object_schema),
        RemoteTool("ok", "again", object_schema),
        RemoteTool("array", None, {"type": "array"}),
        RemoteTool("x" * 70, None, object_schema),
        RemoteTool("long", "d" * (MAX_DESCRIPTION_CHARS + 10), {}),
        RemoteTool("not_a_schema", None, ["type", "object"]),
        RemoteTool("third", None, object_schema),
        RemoteTool("fourth", None, object_schema),
    ]
    accepted, warnings = accept_tools(server, listed)
    assert [d.name for _, d in accepted] == ["srv__ok", "srv__long", "srv__third"]
    assert accepted[0][1].parameters == object_schema
    long_description = accepted[1][1].description
    assert len(long_description) <= MAX_DESCRIPTION_CHARS
    assert long_description.endswith(" more characters]")  # says how much was cut
    assert warnings == [
        'tool "ok" dropped: the server listed it twice',
        'tool "array" dropped: its input schema does not describe an object',
        f'tool "{"x" * 70}" dropped: "srv__{"x" * 70}" is not 1-64 letters, digits, _ . -',
        f'tool "long": description cut to {MAX_DESCRIPTION_CHARS} characters',
        'tool "not_a_schema" dropped: its input schema is not a JSON object',
        'tool "fourth" dropped: more than 3 tools',
    ]
    only = McpServer.http("srv", "https://h/mcp", allow_tools=["third"], prefix_tools=False)
    accepted, warnings = accept_tools(only, listed)
    assert [d.name for _, d in accepted] == ["third"]
    assert warnings == []


def test_schema_problems() -> None:
    assert schema_problem({"type": "object"}) is None
    assert schema_problem({}) is None
    assert "invalid" in str(schema_problem({"type": "object", "required": "q"}))
    huge = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    assert "larger than" in str(schema_problem(huge))
    assert "not JSON" in str(schema_problem({"type": "object", "default": object()}))
