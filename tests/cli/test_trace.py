"""``emelex run --trace FILE``: the file is OTLP/JSON (checked against the OTLP protobuf
schema itself) and its spans are the run's actor tree, also when the turn is cancelled."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

from emelex.cli._trace import encode_otlp_json
from emelex.model.llama import write_tiny_gguf

from .test_cli import run, script
from .test_cli_llama_log import _interrupt_during_prompt

HEX_TRACE = re.compile(r"^[0-9a-f]{32}$")
HEX_SPAN = re.compile(r"^[0-9a-f]{16}$")


def parse_otlp(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """Parse with protobuf's strict JSON parser (unknown fields, wrong types and bad
    enum values raise). OTLP/JSON writes ids as hex where protobuf's JSON mapping wants
    base64, so the ids are checked as hex and converted first."""
    copy = json.loads(json.dumps(document))
    for resource in copy["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for holder in [span, *span.get("links", [])]:
                    assert HEX_TRACE.match(holder["traceId"]), holder
                    for key in ("spanId", "parentSpanId"):
                        if key in holder:
                            assert HEX_SPAN.match(holder[key]), holder
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            holder[key] = base64.b64encode(bytes.fromhex(holder[key])).decode()
    request = ExportTraceServiceRequest()
    json_format.Parse(json.dumps(copy), request)
    return request


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in document["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for item in span["attributes"]:
        ((kind, value),) = item["value"].items()
        decoded[item["key"]] = int(value) if kind == "intValue" else value
    return decoded


def test_encoder_writes_every_field_the_otlp_schema_knows() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "probe"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("probe.scope", "1.2.3")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        other = tracer.start_span("linked")
        other.end()
        with tracer.start_as_current_span(
            "child",
            links=[Link(other.get_span_context(), {"why": "because"})],
            attributes={
                "text": "ünïcode",
                "count": 2**40,
                "ratio": 0.5,
                "flag": True,
                "names": ("a", "b"),
                "numbers": (1, 2),
            },
        ) as child:
            child.add_event("something", {"n": 1})
            child.set_status(StatusCode.ERROR, "it broke")
    provider.shutdown()
    document = encode_otlp_json(exporter.get_finished_spans())
    request = parse_otlp(document)
    (resource,) = request.resource_spans
    assert {a.key: a.value.string_value for a in resource.resource.attributes}[
        "service.name"
    ] == "probe"
    (scope,) = resource.scope_spans
    assert (scope.scope.name, scope.scope.version) == ("probe.scope", "1.2.3")
    by_name = {span.name: span for span in scope.spans}
    child_span, parent_span = by_name["child"], by_name["parent"]
    assert child_span.parent_span_id == parent_span.span_id
    assert parent_span.parent_span_id == b""
    assert child_span.trace_id == parent.get_span_context().trace_id.to_bytes(16, "big")
    assert parent_span.kind == 2  # SPAN_KIND_SERVER
    assert child_span.kind == 1  # SPAN_KIND_INTERNAL
    assert child_span.status.code == 2 and child_span.status.message == "it broke"
    assert child_span.start_time_unix_nano <= child_span.end_time_unix_nano
    assert child_span.start_time_unix_nano > 1_600_000_000 * 10**9
    values = {a.key: a.value for a in child_span.attributes}
    assert values["text"].string_value == "ünïcode"
    assert values["count"].int_value == 2**40
    assert values["ratio"].double_value == 0.5
    assert values["flag"].bool_value is True
    assert [v.string_value for v in values["names"].array_value.values] == ["a", "b"]
    assert [v.int_value for v in values["numbers"].array_value.values] == [1, 2]
    assert [event.name for event in child_span.events] == ["something"]
    (link,) = child_span.links
    assert link.span_id == other.get_span_context().span_id.to_bytes(8, "big")
    # The 64-bit numbers are JSON strings, as the OTLP/JSON encoding requires.
    raw = next(span for span in spans_of(document) if span["name"] == "child")
    assert isinstance(raw["startTimeUnixNano"], str)
    assert {"key": "count", "value": {"intValue": str(2**40)}} in raw["attributes"]


def test_run_trace_file_holds_the_turn_as_a_span_tree(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello notes\n")
    spec = script(
        tmp_path,
        [[{"call": "read_file", "arguments": {"path": "notes.txt"}}], [{"say": "read it"}]],
    )
    trace = tmp_path / "trace.json"
    result = run(
        "run", "--model", spec, "--allow-workspace-reads", "--trace", str(trace), "x",
        cwd=workspace,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(trace.read_text())
    parse_otlp(document)
    spans = spans_of(document)
    by_id = {span["spanId"]: span for span in spans}
    kinds: dict[str, set[str | None]] = {}
    for span in spans:
        parent = by_id[span["parentSpanId"]] if "parentSpanId" in span else None
        kind = attributes(span)["emelex.actor.kind"]
        parent_kind = attributes(parent)["emelex.actor.kind"] if parent is not None else None
        kinds.setdefault(kind, set()).add(parent_kind)
    # read_file runs on a worker thread: an actor of the tool. Workspace reads are
    # approved by --allow-workspace-reads without an approval actor.
    assert kinds == {
        "session": {None},
        "turn": {"session"},
        "model_job": {"turn"},
        "tool": {"turn"},
        "worker_thread": {"tool"},
    }
    (tool,) = [s for s in spans if attributes(s)["emelex.actor.kind"] == "tool"]
    assert tool["name"] == "execute_tool read_file"
    assert attributes(tool)["gen_ai.tool.name"] == "read_file"
    (turn,) = [s for s in spans if attributes(s)["emelex.actor.kind"] == "turn"]
    assert attributes(turn)["emelex.turn.outcome"] == "committed"
    resource = {
        a["key"]: a["value"] for a in document["resourceSpans"][0]["resource"]["attributes"]
    }
    assert resource["service.name"] == {"stringValue": "emelex"}


def test_run_trace_is_written_for_an_interrupted_native_turn(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf", context_length=8192)
    trace = tmp_path / "trace.json"
    code, stderr = _interrupt_during_prompt(f"llama:{model}", tmp_path, "--trace", str(trace))
    assert code == 130, stderr
    document = json.loads(trace.read_text())
    parse_otlp(document)
    spans = {attributes(s)["emelex.actor.kind"]: s for s in spans_of(document)}
    turn, chat = attributes(spans["turn"]), attributes(spans["model_job"])
    assert turn["emelex.turn.outcome"] == "rolled_back"
    assert turn["emelex.turn.cancelled"] is True
    assert turn["gen_ai.provider.name"] == "llama.cpp"
    assert chat["gen_ai.request.model"] == "tiny.gguf"
    assert chat["gen_ai.request.max_tokens"] == 64
    assert spans["model_job"]["name"] == "chat tiny.gguf"
    assert spans["model_job"]["parentSpanId"] == spans["turn"]["spanId"]
    assert spans["turn"]["parentSpanId"] == spans["session"]["spanId"]


def test_trace_problems_are_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "t.json"
    result = run("run", "--model", "scripted:x", "--trace", str(missing), "x", cwd=tmp_path)
    assert result.returncode == 2
    assert "--trace: directory" in result.stderr and "does not exist" in result.stderr
    assert not missing.exists()
