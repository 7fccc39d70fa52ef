"""OpenTelemetry spans that mirror the actor tree.

Every actor gets a span when it is registered and the span ends when the actor is
deregistered. The parent is always the parent actor's span (never whatever context the
spawning task happens to carry), so the span tree is the actor tree by construction.
While an actor's function runs, its span is also the current OpenTelemetry context, so
spans a tool or library opens itself nest under the actor that ran them.

Whether an actor is traced is decided once per tree, by its root: a child is traced iff
its parent is. So with no tracer provider configured (the API's default proxy) a root
actor costs one provider lookup and every other actor one attribute test.
"""

from __future__ import annotations

from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, StatusCode, Tracer, TracerProvider

from emelex._version import __version__
from emelex.runtime._actor import Actor

#: The instrumentation scope every emelex span is recorded under.
TRACER_NAME = "emelex"

_global_cache: tuple[TracerProvider, Tracer] | None = None
_environment_read = False
_MISSING: Any = object()


def tracer_of(provider: TracerProvider) -> Tracer:
    return provider.get_tracer(TRACER_NAME, __version__)


def _configured_provider() -> TracerProvider | None:
    global _environment_read
    if not _environment_read:
        # The public lookup also loads a provider named by OTEL_PYTHON_TRACER_PROVIDER.
        _environment_read = True
        provider = trace.get_tracer_provider()
    else:
        # The public lookup reads os.environ on every call (about 10 µs on these
        # machines, once per turn); the API's own global says the same for 0.1 µs.
        # (Should a later API drop that name, the public lookup takes over.)
        provider = getattr(trace, "_TRACER_PROVIDER", _MISSING)
        if provider is None:
            return None
        if provider is _MISSING:
            provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def global_tracer() -> Tracer | None:
    """The tracer of the globally configured provider, or None when none is configured."""
    global _global_cache
    if _global_cache is not None:
        # The API never replaces a global provider once set, so this holds for good.
        return _global_cache[1]
    provider = _configured_provider()
    if provider is None:
        return None
    tracer = tracer_of(provider)
    _global_cache = (provider, tracer)
    return tracer


def tracer_for(actor: Actor, own: Tracer | None) -> Tracer | None:
    """The tracer for a newly registered ``actor`` (None: leave it untraced)."""
    parent = actor.parent
    if parent is None:
        return own or global_tracer()
    if parent.span is None:
        return None
    if own is not None:
        return own
    cached = _global_cache
    return cached[1] if cached is not None else global_tracer()


def start_span(tracer: Tracer, actor: Actor, supervisor: str) -> None:
    parent = actor.parent.span if actor.parent is not None else None
    # A root actor nests under the caller's own span, if the caller has one.
    context = trace.set_span_in_context(parent) if parent is not None else None
    prefixed = actor.name.startswith(f"{actor.kind} ")
    name = actor.name if prefixed else f"{actor.kind} {actor.name}"
    actor.span = tracer.start_span(
        name,
        context=context,
        attributes={
            "emelex.actor.kind": actor.kind,
            "emelex.actor.name": actor.name,
            "emelex.actor.id": actor.id,
            "emelex.supervisor": supervisor,
        },
    )


def end_span(actor: Actor) -> None:
    span = actor.span
    if span is None:
        return
    actor.span = None
    span.set_attribute("emelex.actor.state", actor.state.value)
    if actor.cancel_requested:
        span.set_attribute("emelex.actor.cancel_requested", True)
    span.end()


def set_policy(actor: Actor, policy: str) -> None:
    if actor.span is not None:
        actor.span.set_attribute("emelex.cancellation.policy", policy)


def note_cancelled(actor: Actor) -> None:
    if actor.span is not None:
        actor.span.set_attribute("emelex.actor.cancelled", True)


def note_dropped(actor: Actor) -> None:
    if actor.span is not None:
        actor.span.set_attribute("emelex.actor.dropped", True)


def note_failed(actor: Actor, error: BaseException) -> None:
    span = actor.span
    if span is None:
        return
    span.set_attribute("error.type", type(error).__qualname__)
    span.record_exception(error)
    span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])


def enter(actor: Actor) -> Token[otel_context.Context] | None:
    """Make ``actor``'s span the current context of the calling task (None: untraced)."""
    span: Span | None = actor.span
    if span is None:
        return None
    return otel_context.attach(trace.set_span_in_context(span))


def leave(token: Token[otel_context.Context] | None) -> None:
    if token is not None:
        otel_context.detach(token)
