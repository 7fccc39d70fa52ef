"""``emelex run --trace FILE``: record the run's spans and write them as OTLP-JSON.

The file is one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding (what an
OpenTelemetry collector's OTLP/HTTP receiver accepts and its file exporter writes):
``resourceSpans`` → ``scopeSpans`` → ``spans``, trace and span ids as lowercase hex,
64-bit integers and timestamps as decimal strings, enums as integers. The encoder is
written here because the OTLP exporter packages encode protobuf (and their JSON form
would need protobuf too, with base64 ids rather than OTLP's hex).

Recording needs the OpenTelemetry SDK (``pip install 'emelex[tracing]'``); the SDK is
imported only when ``--trace`` is given.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from emelex._version import __version__
from emelex.runtime import Supervisor, open_supervisor

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: Most spans one run records; later spans are counted and left out.
MAX_SPANS = 100_000


def trace_problem(path: str) -> str | None:
    """Why ``--trace path`` cannot work (None when it can), checked before the run."""
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return "--trace needs the OpenTelemetry SDK: pip install 'emelex[tracing]'"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"--trace: directory {directory} does not exist"
    if os.path.isdir(path):
        return f"--trace: {path} is a directory"
    return None


def _value(value: object) -> dict[str, Any]:
    # bool before int: a bool is an int to Python, a boolValue to OTLP.
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"stringValue": value.hex()}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Mapping[str, object] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in (attributes or {}).items()]


def _span(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None  # every SDK span has one
    data: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "flags": int(context.trace_flags),
        "name": span.name,
        # OTLP numbers span kinds from 1 (0 is "unspecified"); the API numbers from 0.
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or span.start_time or 0),
        "attributes": _attributes(span.attributes),
        "droppedAttributesCount": span.dropped_attributes,
        "events": [
            {
                "timeUnixNano": str(event.timestamp),
                "name": event.name,
                "attributes": _attributes(event.attributes),
            }
            for event in span.events
        ],
        "droppedEventsCount": span.dropped_events,
        "links": [
            {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
                "attributes": _attributes(link.attributes),
            }
            for link in span.links
        ],
        "droppedLinksCount": span.dropped_links,
        "status": {"code": span.status.status_code.value},
    }
    if span.parent is not None:
        data["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.status.description:
        data["status"]["message"] = span.status.description
    return data


def encode_otlp_json(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as one OTLP/JSON ``ExportTraceServiceRequest``, grouped by resource and
    instrumentation scope (first-seen order)."""
    resources: dict[int, tuple[Any, dict[tuple[str, str | None], list[dict[str, Any]]]]] = {}
    scopes: dict[tuple[str, str | None], Any] = {}
    for span in spans:
        resource = span.resource
        _, by_scope = resources.setdefault(id(resource), (resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version) if scope is not None else ("", None)
        scopes.setdefault(key, scope)
        by_scope.setdefault(key, []).append(_span(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource.attributes if resource else {})},
                "scopeSpans": [
                    {
                        "scope": {"name": name, **({"version": version} if version else {})},
                        "spans": encoded,
                    }
                    for (name, version), encoded in by_scope.items()
                ],
            }
            for resource, by_scope in resources.values()
        ]
    }


def _recorder() -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Recorder(SpanExporter):
        """Keeps finished spans in memory, at most MAX_SPANS of them."""

        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []
            self.dropped = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            room = MAX_SPANS - len(self.spans)
            self.spans.extend(spans[:room])
            self.dropped += max(0, len(spans) - room)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None

    return Recorder()


@asynccontextmanager
async def open_traced_supervisor(name: str, path: str | None) -> AsyncIterator[Supervisor]:
    """``open_supervisor(name)``, recording its actors' spans into ``path`` (written when
    the block ends, however it ends) when ``path`` is given."""
    if not path:
        async with open_supervisor(name) as supervisor:
            yield supervisor
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    recorder = _recorder()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "emelex", "service.version": __version__}),
        shutdown_on_exit=False,  # shut down below, once, before the file is written
    )
    provider.add_span_processor(SimpleSpanProcessor(recorder))
    try:
        async with open_supervisor(name, tracer_provider=provider) as supervisor:
            yield supervisor
    finally:
        provider.shutdown()
        document = encode_otlp_json(recorder.spans)
        if recorder.dropped:
            print(
                f"emelex: --trace kept the first {MAX_SPANS} spans ({recorder.dropped} left out)",
                file=sys.stderr,
            )
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
        with trio.CancelScope(shield=True):
            await trio.Path(path).write_text(text, encoding="utf-8")
