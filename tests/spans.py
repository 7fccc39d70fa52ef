"""Collecting emelex's spans with the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from emelex.runtime import ActorInfo, ActorTree


@attrs.define
class Recorder:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    @classmethod
    def open(cls) -> Recorder:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, exporter)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def of_kind(self, kind: str) -> list[ReadableSpan]:
        return [span for span in self.spans if attr(span, "emelex.actor.kind") == kind]


def attr(span: ReadableSpan, key: str) -> object:
    return (span.attributes or {}).get(key)


def span_edges(spans: Iterable[ReadableSpan]) -> set[tuple[int, str, int | None]]:
    """(actor id, kind, parent actor id) for every actor span, from span parentage alone."""
    spans = list(spans)
    actor_of = {
        span.context.span_id: attr(span, "emelex.actor.id") for span in spans if span.context
    }
    edges: set[tuple[int, str, int | None]] = set()
    for span in spans:
        actor = attr(span, "emelex.actor.id")
        assert isinstance(actor, int)
        parent = actor_of.get(span.parent.span_id) if span.parent is not None else None
        assert parent is None or isinstance(parent, int)
        edges.add((actor, str(attr(span, "emelex.actor.kind")), parent))
    return edges


def tree_edges(trees: Iterable[ActorTree]) -> set[tuple[int, str, int | None]]:
    """(actor id, kind, parent actor id) for every actor seen in ``trees``."""
    seen: set[tuple[int, str, int | None]] = set()
    for tree in trees:
        info: ActorInfo
        for info in tree.walk():
            seen.add((info.id, info.kind, info.parent))
    return seen
