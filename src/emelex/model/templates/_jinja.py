"""Compiling and rendering chat templates in a sandboxed Jinja2 environment.

Chat templates (the ``tokenizer.chat_template`` of a GGUF or Hugging Face model) are
written for the environment Hugging Face ``transformers`` renders them in, which
llama.cpp reproduces: an immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``,
the ``loopcontrols`` extension, a ``tojson`` filter that does not HTML-escape, and the
globals ``raise_exception`` and ``strftime_now``. This module sets up the same
environment, so a template renders here exactly as it does for the model's authors.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox

from emelex.model.templates._errors import ChatTemplateError


class _TemplateRaised(Exception):
    """Carries a template's own ``raise_exception`` message out of Jinja."""


def _raise_exception(message: object) -> NoReturn:
    raise _TemplateRaised(str(message))


def _strftime_now(format_: str) -> str:
    return datetime.datetime.now().strftime(format_)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes <, >, & and '; chat templates expect plain JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _GenerationTag(jinja2.ext.Extension):
    """Accepts ``{% generation %}...{% endgeneration %}`` (used by some training
    templates to mark assistant spans) and renders its body unchanged."""

    tags = {"generation"}  # noqa: RUF012 - the attribute jinja2 reads

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _GenerationTag],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENVIRONMENT = _environment()


class ChatTemplate:
    """A compiled chat template.

    Build it from the template's Jinja source; compiling raises
    :class:`ChatTemplateError` for a syntax error. :meth:`render` is pure and
    thread-safe (a template holds no state between renders).
    """

    __slots__ = ("_compiled", "bos_token", "eos_token", "source")

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("a chat template must be non-empty Jinja text")
        try:
            self._compiled = _ENVIRONMENT.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"chat template does not compile (line {exc.lineno}): {exc.message}"
            ) from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """Render ``messages`` (OpenAI-style dicts) and ``tools`` (``{"type":
        "function", "function": {...}}`` dicts, or ``None`` for no tools).

        Extra ``variables`` (e.g. ``enable_thinking=False``) are passed to the template.
        Raises :class:`ChatTemplateError` when the template fails or refuses the
        conversation (``raised_by_template`` tells which).
        """
        context: dict[str, Any] = {
            "messages": [dict(message) for message in messages],
            "tools": [dict(tool) for tool in tools] if tools else None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        context.update(variables)
        try:
            return self._compiled.render(context)
        except _TemplateRaised as exc:
            raise ChatTemplateError(
                f"the chat template refused the conversation: {exc}", raised_by_template=True
            ) from None
        except Exception as exc:  # a template is foreign code: any failure is its failure
            raise ChatTemplateError(
                f"the chat template failed: {type(exc).__name__}: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"<ChatTemplate {len(self.source)} chars>"
