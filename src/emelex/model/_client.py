"""The user-facing handle on a model."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import attrs

from emelex.model._capabilities import Capabilities
from emelex.model._errors import InvalidRequest
from emelex.model._protocol import AgentModel, GenerationStream
from emelex.model._request import GenerationRequest


def _check_model(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, AgentModel):
        raise InvalidRequest(
            f"Client needs an AgentModel (capabilities + generate), got {type(value).__name__}"
        )


@attrs.frozen(eq=False)
class Client:
    """A handle on one model, shared by everything that generates with it.

    ``Client(model)`` wraps any :class:`AgentModel`; a ``Client`` is itself an
    ``AgentModel`` and forwards to it. Clients compare by identity. Passing something
    that is not an ``AgentModel`` raises :class:`InvalidRequest`.
    """

    model: AgentModel = attrs.field(validator=_check_model)

    @classmethod
    def openai(
        cls, *, base_url: str, model: str, api_key: str | None = None, **options: Any
    ) -> Client:
        """A client for any OpenAI-compatible ``/chat/completions`` server (httpx, Trio).

        ``base_url`` includes the version prefix (``"https://api.openai.com/v1"``,
        ``"http://127.0.0.1:8080/v1"``); ``api_key`` is sent as a bearer token and never
        shown. Other keyword options go to :class:`~emelex.model.openai.OpenAIModel`
        (``capabilities``, ``http_client``, ``headers``, ``extra_body``, limits and
        timeouts). No I/O happens here; close the model's own HTTP client with
        ``await client.model.aclose()``. Raises :class:`InvalidRequest` for bad arguments.
        """
        from emelex.model.openai import OpenAIModel

        return cls(OpenAIModel(base_url, model, api_key=api_key, **options))

    @classmethod
    def llama(
        cls,
        model_path: str | os.PathLike[str],
        *,
        chat_template: str | os.PathLike[str] | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        **more: Any,
    ) -> Client:
        """A client for a GGUF model run in-process by llama.cpp (extra ``local``).

        Reads the file's metadata and probes its chat template now; no weights are
        loaded until ``async with client:``. ``chat_template`` overrides the embedded
        template (Jinja text, or an ``os.PathLike`` naming a file). ``more`` goes to
        :class:`emelex.model.llama.LlamaModel`, which documents the options and the
        errors raised (``ModelLoadError``, ``ChatTemplateMissing``, ...).
        """
        from emelex.model.llama import LlamaModel

        return cls(
            LlamaModel(
                model_path, chat_template=chat_template, n_ctx=n_ctx, n_threads=n_threads, **more
            )
        )

    async def __aenter__(self) -> Client:
        """Open the wrapped model when it has a lifetime (the native backend loads its
        weights on a dedicated worker thread); otherwise do nothing. Checkpoints and
        raises as the model's own ``__aenter__`` does."""
        enter = getattr(self.model, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the wrapped model when it has a lifetime (for the native backend: stop
        its generations and wait, shielded, until its worker thread has exited)."""
        exit_ = getattr(self.model, "__aexit__", None)
        if exit_ is not None:
            await exit_(exc_type, exc, traceback)

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped model's capabilities."""
        return self.model.capabilities

    def generate(self, request: GenerationRequest) -> AbstractAsyncContextManager[GenerationStream]:
        """Prepare one generation; see :class:`AgentModel` for the stream contract.

        This call does not checkpoint and starts no work. It raises
        :class:`InvalidRequest` when ``request`` is not a :class:`GenerationRequest`.
        Checkpoints, errors and cancellation of the returned context and stream are
        those of the wrapped model.
        """
        if not isinstance(request, GenerationRequest):
            raise InvalidRequest(f"expected a GenerationRequest, got {type(request).__name__}")
        return self.model.generate(request)
