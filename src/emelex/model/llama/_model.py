"""The Trio side of the native backend: :class:`LlamaModel` and its generation stream."""

from __future__ import annotations

import collections
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

import attrs
import trio

from emelex.model._capabilities import Capabilities
from emelex.model._errors import InvalidRequest, ModelError
from emelex.model._events import Completed, GenerationEvent, Progress, Response, Usage
from emelex.model._forced import check_forced_call, requested_choice
from emelex.model._options import ToolChoice
from emelex.model._request import GenerationRequest, ToolDefinition
from emelex.model.llama._buffers import (
    BufferVerdict,
    ExtraBuffers,
    check_mode,
    choose_extra_buffers,
)
from emelex.model.llama._errors import GrammarError, ModelNotOpen
from emelex.model.llama._grammar import ToolGrammar, answer_grammar, tool_call_grammar
from emelex.model.llama._metadata import GgufMetadata, read_gguf_metadata
from emelex.model.llama._native import (
    AbortFlag,
    GenerationPlan,
    GenerationReport,
    LoadedModel,
    LoadSettings,
    Performance,
    PromptProgress,
    Sampling,
    close_model,
    load_model,
    read_performance,
    reset_cache,
    run_generation,
)
from emelex.model.llama._output import OutputParser
from emelex.model.templates import (
    ChatFormat,
    ChatTemplate,
    ChatTemplateMissing,
    ToolCallFamily,
    probe_chat_template,
)
from emelex.runtime import (
    AgentCancellation,
    DedicatedWorker,
    WorkerClosed,
    WorkerJob,
    WorkerJobAborted,
    open_dedicated_worker,
)

logger = logging.getLogger("emelex.model.llama")

_DEFAULT_MAX_CONTEXT: Final = 8192


def _default_threads() -> tuple[int, int]:
    cores = os.cpu_count() or 2
    return max(1, cores // 2), cores


def _template_source(
    chat_template: str | os.PathLike[str] | None, metadata: GgufMetadata, path: Path
) -> str:
    if isinstance(chat_template, os.PathLike):
        try:
            return Path(chat_template).read_text(encoding="utf-8")
        except OSError as exc:
            raise ChatTemplateMissing(
                f"cannot read the chat template file {chat_template}: {exc}"
            ) from exc
    if chat_template is not None:
        return chat_template
    if metadata.chat_template is None:
        raise ChatTemplateMissing(
            f"{path} embeds no chat template (no tokenizer.chat_template in its metadata); "
            "pass one: LlamaModel(path, chat_template=TEXT) with the model family's Jinja "
            "template text, or chat_template=pathlib.Path('template.jinja')"
        )
    return metadata.chat_template


def _context_size(job: WorkerJob[LoadedModel, int]) -> int:
    return job.resource.n_ctx


class LlamaModel:
    """A GGUF model run in-process by llama.cpp, as an :class:`~emelex.model.AgentModel`.

    Building one reads the file's metadata and probes its chat template (the embedded
    ``tokenizer.chat_template``, or ``chat_template``: Jinja text, or a
    :class:`os.PathLike` naming a template file), so :attr:`capabilities` is known
    before any weights are loaded. It raises :class:`ModelLoadError` for a missing or
    non-GGUF file, :class:`ChatTemplateMissing` when there is no template and
    :class:`ChatTemplateError` when the template does not work.

    Weights are loaded by a dedicated worker thread that owns the model for as long as
    the model is open::

        model = LlamaModel("model.gguf")
        async with model:                       # loads; closing joins the thread
            async with model.generate(request) as stream:
                async for event in stream: ...

    Generations queue to that thread (at most ``queue_capacity`` waiting); tokens reach
    Trio in batches, at most one hand-off per ``batch_interval`` seconds (default 1 ms:
    a slow model's tokens arrive one by one, a fast model's a few at a time, which
    spares the event loop a wake-up per token).

    Options: ``n_ctx`` (context window; default the model's, at most 8192),
    ``n_threads``/``n_threads_batch`` (generation and prompt threads; default half the
    cores and all of them), ``n_batch`` (prompt tokens per decode, which is also the
    progress granularity), ``n_gpu_layers``. ``tool_grammar`` (default on) constrains
    proposed tool calls with a grammar built from the tools' schemas;
    ``tool_choice`` is the default for requests whose options leave it unset: ``"auto"``,
    ``"required"`` (every answer is a tool call when tools are offered) or ``"none"``; a
    request's ``GenerationOptions.tool_choice`` (also ``ToolChoice.tool(name)``) wins.
    A request's ``output_schema`` constrains the text answer to that JSON Schema.
    ``extra_buffers`` (``"auto"``, ``"on"``, ``"off"``) says whether weights may use
    llama.cpp's extra CPU buffer types (repacked for faster kernels); ``"auto"`` follows
    ``EMELEX_LLAMA_EXTRA_BUFFERS`` or a cached probe of this machine (see
    :func:`choose_extra_buffers`), and :attr:`buffer_verdict` says what was chosen.
    Sampling options a request leaves unset follow llama.cpp's defaults (temperature
    0.8, top-k 40, top-p 0.95, min-p 0.05, a random seed); temperature 0 is greedy.
    ``load_progress`` is called with the fraction of the weights loaded (0.0 to 1.0, on
    the worker thread, while ``async with model`` loads); an exception it raises stops
    the load with :class:`ModelLoadError`.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        chat_template: str | os.PathLike[str] | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_batch: int = 512,
        n_gpu_layers: int = 0,
        tool_grammar: bool = True,
        tool_choice: ToolChoice | Literal["auto", "required", "none"] = "auto",
        extra_buffers: ExtraBuffers = "auto",
        queue_capacity: int = 8,
        emit_capacity: int = 1024,
        batch_interval: float = 0.001,
        load_progress: Callable[[float], None] | None = None,
    ) -> None:
        path = Path(model_path)
        metadata = read_gguf_metadata(path)
        source = _template_source(chat_template, metadata, path)
        template = ChatTemplate(source, bos_token=metadata.bos_token, eos_token=metadata.eos_token)
        self._format = probe_chat_template(template)
        for name, value in (("n_batch", n_batch), ("queue_capacity", queue_capacity)):
            if type(value) is not int or value < 1:
                raise InvalidRequest(f"{name} must be a positive integer, got {value!r}")
        if n_ctx is not None and (type(n_ctx) is not int or n_ctx < 16):
            raise InvalidRequest(f"n_ctx must be an integer >= 16, got {n_ctx!r}")
        if isinstance(batch_interval, bool) or not isinstance(batch_interval, int | float):
            raise InvalidRequest(f"batch_interval must be a number, got {batch_interval!r}")
        if not 0 <= batch_interval <= 1:
            raise InvalidRequest(f"batch_interval must be in [0, 1] seconds, got {batch_interval}")
        if isinstance(tool_choice, str) and tool_choice in ("auto", "required", "none"):
            tool_choice = ToolChoice(tool_choice)
        if not isinstance(tool_choice, ToolChoice) or tool_choice.name is not None:
            raise InvalidRequest(
                f"tool_choice must be 'auto', 'required' or 'none', got {tool_choice!r} "
                "(force one tool per request with GenerationOptions(tool_choice=...))"
            )
        self._extra_buffers = check_mode(extra_buffers)
        self._verdict: BufferVerdict | None = None
        threads, threads_batch = _default_threads()
        context = n_ctx or min(metadata.context_length or 4096, _DEFAULT_MAX_CONTEXT)
        self._path = path
        self._metadata = metadata
        self._settings = LoadSettings(
            path=str(path),
            n_ctx=context,
            n_batch=min(n_batch, context),
            n_ubatch=min(n_batch, context),
            n_threads=n_threads or threads,
            n_threads_batch=n_threads_batch or threads_batch,
            n_gpu_layers=n_gpu_layers,
        )
        self._tool_grammar = tool_grammar
        self._tool_choice: ToolChoice = tool_choice
        self._queue_capacity = queue_capacity
        self._emit_capacity = emit_capacity
        self._batch_interval = float(batch_interval)
        self._load_progress = load_progress
        self._worker: DedicatedWorker[LoadedModel] | None = None
        self._stack: AsyncExitStack | None = None
        self._opening = False
        self._active: set[AbortFlag] = set()
        self._n_ctx = context

    # -- what is known without loading ------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def metadata(self) -> GgufMetadata:
        """What the GGUF header says (name, architecture, special tokens, template)."""
        return self._metadata

    @property
    def chat_format(self) -> ChatFormat:
        """The probed chat template: capabilities, tool-call family, rendering style."""
        return self._format

    @property
    def capabilities(self) -> Capabilities:
        """What the chat template was proven to preserve (see :class:`Capabilities`)."""
        return self._format.capabilities

    @property
    def context_size(self) -> int:
        """The context window in tokens (as llama.cpp sized it, once open; it may round
        the requested ``n_ctx`` up)."""
        return self._n_ctx

    @property
    def is_open(self) -> bool:
        return self._worker is not None

    @property
    def buffer_verdict(self) -> BufferVerdict | None:
        """Whether the open model's weights may use llama.cpp's extra CPU buffer types,
        who decided and why (None until the model was first opened)."""
        return self._verdict

    # -- lifetime ---------------------------------------------------------------------------
    async def __aenter__(self) -> LlamaModel:
        """Load the model on a new dedicated worker thread.

        Checkpoints. First decides the CPU buffer types (``extra_buffers``; with
        ``"auto"`` the first model opened on a machine runs the probe, seconds, in a
        child process). Raises :class:`ModelLoadError` when llama.cpp cannot load it and
        :class:`ModelError` when the model is already open. Loading cannot be
        interrupted: cancellation waits (shielded) for it to finish, then closes.
        """
        if self._worker is not None or self._opening:
            raise ModelError(f"{self._path.name} is already open")
        self._opening = True
        stack = AsyncExitStack()
        try:
            verdict = await choose_extra_buffers(self._extra_buffers)
            logger.info("%s: %s", self._path.name, verdict.describe())
            self._verdict = verdict
            settings = attrs.evolve(self._settings, extra_buffers=verdict.extra_buffers)
            self._worker = await stack.enter_async_context(
                open_dedicated_worker(
                    f"llama:{self._path.name}",
                    setup=functools.partial(load_model, settings, self._load_progress),
                    teardown=close_model,
                    queue_capacity=self._queue_capacity,
                    emit_capacity=self._emit_capacity,
                )
            )
            self._stack = stack
            self._n_ctx = await self._worker.run(_context_size, name="llama.context_size")
        except BaseException:
            await self.aclose()
            raise
        finally:
            self._opening = False
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop running generations, unload the model and join the worker thread.

        Idempotent. Waits (shielded) until the thread has exited; queued generations
        fail with :class:`ModelNotOpen`, a running one stops at its next token.
        """
        stack, self._stack, self._worker = self._stack, None, None
        for flag in self._active:
            flag.set()
        if stack is not None:
            await stack.aclose()

    def _require_open(self) -> DedicatedWorker[LoadedModel]:
        if self._worker is None:
            raise ModelNotOpen(
                f"{self._path.name} is not loaded: open it first with 'async with model:' "
                "(or 'async with client:')"
            )
        return self._worker

    # -- maintenance ------------------------------------------------------------------------
    async def performance(self, *, reset: bool = False) -> Performance:
        """llama.cpp's own prompt and generation timings since the last reset.

        Runs a short job on the worker (queued behind generations). Checkpoints; raises
        :class:`ModelNotOpen`; cancellation waits for the job to leave the worker.
        """
        return await self._require_open().run(read_performance, reset, name="llama.performance")

    async def clear_cache(self) -> None:
        """Forget the cached prompt, so the next generation processes its whole prompt.

        Checkpoints; raises :class:`ModelNotOpen`.
        """
        await self._require_open().run(reset_cache, name="llama.clear_cache")

    # -- generation -------------------------------------------------------------------------
    def _choice(self, request: GenerationRequest) -> ToolChoice:
        """The request's tool choice, else this model's default; NONE without tools."""
        return requested_choice(request, self._tool_choice)

    def _grammar(
        self, request: GenerationRequest, choice: ToolChoice, opens_reasoning: bool
    ) -> ToolGrammar | None:
        schema = request.options.output_schema
        if schema is not None:
            if choice.mode != "none":
                raise GrammarError(
                    "output_schema with tools needs tool_choice=ToolChoice.NONE on the "
                    "native backend (the answer grammar and the tool-call grammar are "
                    "not combined)"
                )
            return answer_grammar(
                schema, think=self._format.think, starts_in_reasoning=opens_reasoning
            )
        if choice.mode == "none" or not self._tool_grammar:
            return None
        family = self._format.tool_family
        if family is ToolCallFamily.NONE:
            if choice.forces_call:
                raise GrammarError(
                    f"tool_choice {choice!r} needs a chat template with known tool-call markup"
                )
            return None
        tools = request.tools
        if choice.name is not None:
            tools = tuple(
                tool
                if choice.arguments is None
                else ToolDefinition(tool.name, tool.description, choice.arguments)
                for tool in tools
                if tool.name == choice.name
            )
        return tool_call_grammar(
            family,
            tools,
            think=self._format.think,
            starts_in_reasoning=opens_reasoning,
            required=choice.forces_call,
            # A named choice asks for that call, once (as OpenAI-compatible servers do).
            single=choice.name is not None,
        )

    def _prepare(self, request: GenerationRequest) -> tuple[GenerationPlan, OutputParser]:
        options = request.options
        choice = self._choice(request)
        rendered = self._format.render(request.messages, request.tools, reasoning=options.reasoning)
        sampling = Sampling()
        if options.temperature is not None:
            sampling = attrs.evolve(sampling, temperature=options.temperature)
        if options.top_p is not None:
            sampling = attrs.evolve(sampling, top_p=options.top_p)
        if options.seed is not None:
            sampling = attrs.evolve(sampling, seed=options.seed)
        reasoning = options.reasoning
        budget = getattr(reasoning, "budget_tokens", None)
        # One family for the parser and the loop's stop strings (never inside a call).
        family = self._format.tool_family if choice.mode != "none" else ToolCallFamily.NONE
        plan = GenerationPlan(
            prompt=rendered.text,
            sampling=sampling,
            abort=AbortFlag(),
            max_tokens=options.max_tokens,
            stop=options.stop,
            grammar=self._grammar(request, choice, rendered.opens_reasoning),
            think=self._format.think,
            starts_in_reasoning=rendered.opens_reasoning,
            reasoning_budget=budget,
            tool_family=family,
        )
        parser = OutputParser(
            family=family,
            think=self._format.think,
            in_reasoning=rendered.opens_reasoning,
        )
        return plan, parser

    def generate(
        self, request: GenerationRequest, *, cancellation: AgentCancellation | None = None
    ) -> AbstractAsyncContextManager[LlamaStream]:
        """Prepare one generation; enter the result to run it (see
        :class:`~emelex.model.AgentModel` for the stream contract).

        Calling does not checkpoint. Entering renders the prompt and queues the job
        (checkpoints; waits while the queue is full) and raises :class:`ModelNotOpen`,
        :class:`ChatTemplateError`, :class:`UnsupportedContent` or :class:`GrammarError`
        for a request that cannot run. Iterating raises :class:`ContextOverflow` or
        :class:`GenerationFailed` from the worker.

        Stopping: cancelling the caller's scope or leaving the block early sets the
        job's abort flag (generation stops at the next token, prompt processing inside
        the current decode) and the block's exit waits, shielded, until the job has
        left the worker. ``cancellation`` (an :class:`AgentCancellation`) stops it the
        same way; the stream then ends normally with ``finish_reason="cancelled"`` and
        what was produced so far.
        """
        if not isinstance(request, GenerationRequest):
            raise InvalidRequest(f"expected a GenerationRequest, got {type(request).__name__}")
        if cancellation is not None and not isinstance(cancellation, AgentCancellation):
            raise InvalidRequest(f"cancellation must be an AgentCancellation, got {cancellation!r}")
        return self._generate(request, cancellation)

    @asynccontextmanager
    async def _generate(
        self, request: GenerationRequest, cancellation: AgentCancellation | None
    ) -> AsyncIterator[LlamaStream]:
        worker = self._require_open()
        plan, parser = self._prepare(request)
        self._active.add(plan.abort)
        try:
            async with AsyncExitStack() as stack:
                try:
                    job = await stack.enter_async_context(
                        worker.job(run_generation, plan, name="llama.generate")
                    )
                except WorkerClosed:
                    raise ModelNotOpen(
                        f"{self._path.name} was closed while this generation waited for it"
                    ) from None
                stream = LlamaStream(
                    self, job, plan.abort, parser, cancellation, self._choice(request)
                )
                try:
                    yield stream
                finally:
                    # Before the job context aborts the job and waits for it: the flag
                    # also stops a prompt decode in progress.
                    plan.abort.set()
                    stream._detach()
        finally:
            self._active.discard(plan.abort)

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<LlamaModel {self._path.name} {state}>"


class LlamaStream:
    """The events of one native generation (an async iterator; see
    :meth:`LlamaModel.generate`).

    After the terminal :class:`Completed`, :attr:`report` holds the worker's account of
    the job (prompt tokens, cache reuse, generated token ids, how it finished).
    """

    def __init__(
        self,
        model: LlamaModel,
        job: WorkerJob[LoadedModel, GenerationReport],
        flag: AbortFlag,
        parser: OutputParser,
        cancellation: AgentCancellation | None,
        choice: ToolChoice = ToolChoice.AUTO,
    ) -> None:
        self._model = model
        self._choice = choice
        self._job = job
        self._flag = flag
        self._parser = parser
        self._ready: collections.deque[GenerationEvent] = collections.deque()
        self._drained = False
        self._done = False
        self._cancelled = False
        self._batch_interval = model._batch_interval
        self._next_batch_at = 0.0
        self.report: GenerationReport | None = None
        self._remove_callback = (
            cancellation.add_callback(self._on_cancel) if cancellation is not None else None
        )

    def _on_cancel(self) -> None:
        self._cancelled = True
        self._flag.set()
        self._job.abort()

    def _detach(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None

    def __aiter__(self) -> LlamaStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        """The next event. Checkpoints once per batch of items from the worker; raises
        what the job raised; cancellation propagates (the ``async with`` then stops the
        job and waits for it)."""
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            if self._drained:
                await self._complete()
                continue
            # A fast model produces tokens quicker than per-token hand-offs pay off: take
            # the next batch no sooner than one interval after the last.
            pause = self._next_batch_at - trio.current_time()
            if pause > 0:
                await trio.sleep(pause)
            try:
                batch = await self._job.__anext__()
            except StopAsyncIteration:
                self._drained = True
                continue
            if self._absorb(batch):  # token batches only: progress never delays a token
                self._next_batch_at = trio.current_time() + self._batch_interval
        return self._ready.popleft()

    def _absorb(self, batch: Sequence[Any]) -> bool:
        """Turn worker items into events; True when the batch held generated text."""
        ready, feed = self._ready, self._parser.feed
        text = False
        for item in batch:
            if isinstance(item, str):
                ready.extend(feed(item))
                text = True
            elif isinstance(item, PromptProgress):
                ready.append(Progress("prompt", item.completed, item.total))
        return text

    async def _complete(self) -> None:
        self._done = True
        try:
            report = await self._job.result()
        except WorkerJobAborted:
            if not self._cancelled:
                raise ModelNotOpen("the model was closed before this generation started") from None
            report = None
        if report is not None and report.finish == "cancelled" and not self._cancelled:
            raise ModelNotOpen("the model was closed during this generation")
        self.report = report
        events, output = self._parser.finish()
        self._ready.extend(events)
        if report is None:
            finish, usage = "cancelled", Usage()
        else:
            finish = report.finish
            usage = Usage(report.prompt_tokens, report.generated_tokens)
        if finish == "stop" and output.tool_calls:
            finish = "tool_calls"
        response = Response(
            output.text,
            output.reasoning,
            output.tool_calls,
            usage,
            finish,  # type: ignore[arg-type]
        )
        check_forced_call(self._choice, response)  # ToolCallMissing, not an empty answer
        self._ready.append(Completed(response))
