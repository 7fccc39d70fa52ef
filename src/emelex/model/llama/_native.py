"""The llama.cpp side of the backend: loading, the generation loop, abort flags.

Everything here except :class:`AbortFlag` runs on the model's dedicated worker thread.
The generation loop uses llama.cpp's low-level API directly: ``llama_decode`` over a
reused batch, a sampler chain, and ``llama_token_to_piece`` with an incremental UTF-8
decoder (:mod:`._utf8`), so a character split across tokens is emitted whole once
complete and the cost per token does not grow with the output length.

Cancellation: each job has an :class:`AbortFlag`. The loop checks it before every token,
and llama.cpp reads it from its compute loop through the abort callback, so a prompt
chunk or a token being decoded stops within one graph node.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import attrs

from emelex.model.llama._errors import (
    ContextOverflow,
    GenerationFailed,
    GrammarError,
    ModelLoadError,
)
from emelex.model.llama._grammar import ToolGrammar
from emelex.model.llama._stops import CallAwareStops
from emelex.model.llama._utf8 import Utf8Decoder
from emelex.model.templates import ThinkMarkers, ToolCallFamily
from emelex.runtime import WorkerJob

_llama: Any
try:
    import llama_cpp as _llama
except ImportError:  # pragma: no cover - exercised only without the "local" extra
    _llama = None

logger = logging.getLogger("emelex.model.llama")

_ABORTED: Final = 2  # llama_decode's status for an abort through the callback
_MAX_PIECE: Final = 256


def _lib() -> Any:
    if _llama is None:
        raise ModelLoadError(
            "the native llama.cpp backend needs llama-cpp-python: pip install 'emelex[local]'"
        )
    return _llama


# -- abort flags --------------------------------------------------------------------------
def _native_flag_reader() -> Any | None:
    """A C function that reads a flag byte without Python, or None.

    llama.cpp calls the abort callback ``bool (*)(void *)`` after every graph node: a
    Python callback would take the GIL hundreds of times per token and stall whenever
    the Trio thread holds it. libc's ``strlen`` reads the flag without the GIL: the flag
    is a two-byte buffer, ``"\\0\\0"`` (length 0, false) or ``"\\1\\0"`` (length 1, true),
    and ``strlen``'s return register carries that length where the caller reads a bool
    (true on every ABI that returns in a register, which is all that llama.cpp targets).
    """
    try:
        libc = ctypes.CDLL(None)
        address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    except (OSError, AttributeError):  # pragma: no cover - e.g. Windows
        return None
    if not address:  # pragma: no cover
        return None
    return _lib().ggml_abort_callback(address)


def _python_flag_reader() -> Any:  # pragma: no cover - fallback where libc is unavailable
    lib = _lib()

    @lib.ggml_abort_callback  # type: ignore[untyped-decorator]
    def read(data: int | None) -> bool:
        return data is not None and ctypes.c_char.from_address(data).value != b"\x00"

    return read


_FLAG_READER: Any = None
_SETUP_LOCK = threading.Lock()  # process-wide llama.cpp state: log callback, flag reader


def _flag_reader() -> Any:
    global _FLAG_READER
    with _SETUP_LOCK:
        if _FLAG_READER is None:
            _FLAG_READER = _native_flag_reader() or _python_flag_reader()
        return _FLAG_READER


class AbortFlag:
    """A one-way stop signal readable by llama.cpp's compute loop without the GIL.

    :meth:`set` may be called from any thread; it never blocks.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = ctypes.create_string_buffer(2)

    def set(self) -> None:
        self._buffer[0] = b"\x01"

    @property
    def is_set(self) -> bool:
        return self._buffer[0] != b"\x00"

    @property
    def address(self) -> int:
        return ctypes.addressof(self._buffer)


# -- settings, plans and results ----------------------------------------------------------
@attrs.frozen(kw_only=True)
class LoadSettings:
    """How to load a model and size its context."""

    path: str
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_threads_batch: int
    n_gpu_layers: int = 0
    use_mmap: bool = True
    extra_buffers: bool = True  # llama.cpp's extra CPU buffer types (REPACK, AMX, ...)


@attrs.frozen(kw_only=True)
class Sampling:
    """Sampler settings; ``temperature == 0`` means greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None


@attrs.frozen(kw_only=True)
class GenerationPlan:
    """One generation, fully prepared on the Trio side."""

    prompt: str
    sampling: Sampling
    abort: AbortFlag
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    grammar: ToolGrammar | None = None
    think: ThinkMarkers | None = None
    starts_in_reasoning: bool = False
    reasoning_budget: int | None = None
    #: The tool-call markup the output may hold (stop strings never fire inside a call).
    tool_family: ToolCallFamily = ToolCallFamily.NONE


@attrs.frozen
class PromptProgress:
    """Emitted after each processed prompt chunk: ``completed`` of ``total`` tokens."""

    completed: int
    total: int


FinishKind = Literal["stop", "length", "cancelled"]


@attrs.frozen(kw_only=True)
class GenerationReport:
    """What the generation job reports when it leaves the worker."""

    finish: FinishKind
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    aborted_in_decode: bool = False
    tokens: tuple[int, ...] = ()
    first_token_at: float | None = None  # time.perf_counter() of the first emitted piece


@attrs.frozen(kw_only=True)
class Performance:
    """llama.cpp's own counters since the last reset (milliseconds and token counts)."""

    prompt_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int


# -- logging ------------------------------------------------------------------------------
_LOG_CALLBACK: Any = None


def _install_logging() -> None:  # called with _SETUP_LOCK held
    """Route llama.cpp's log lines to the ``emelex.model.llama`` logger (once).

    llama.cpp is chatty at load time and its warnings are advisory (failures reach the
    caller as typed errors), so its debug and info lines become DEBUG records, its
    warnings INFO and its errors WARNING (the only level printed without logging set up).
    """
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None:
        return
    lib = _lib()
    # ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line.
    levels = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.INFO, 4: logging.WARNING}
    last = [logging.DEBUG]

    @lib.llama_log_callback  # type: ignore[untyped-decorator]
    def log(level: int, text: bytes, _user_data: object) -> None:
        python_level = levels.get(level, last[0])
        last[0] = python_level
        if logger.isEnabledFor(python_level):
            message = text.decode("utf-8", "replace").rstrip()
            if message:
                logger.log(python_level, "%s", message)

    _LOG_CALLBACK = log
    lib.llama_log_set(log, ctypes.c_void_p(0))
    lib.llama_backend_init()


# -- the loaded model ---------------------------------------------------------------------
class LoadedModel:
    """A loaded model with one context, owned by the worker thread.

    The context keeps the tokens of the last prompt and generation in its KV cache;
    the next generation reuses the longest common prefix.
    """

    def __init__(
        self, settings: LoadSettings, progress: Callable[[float], None] | None = None
    ) -> None:
        lib = _lib()
        with _SETUP_LOCK:
            _install_logging()
        self.settings = settings
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = settings.n_gpu_layers
        model_params.use_mmap = settings.use_mmap
        # A ctypes structure accepts any attribute name: setting a field the library
        # lacks would silently do nothing.
        if "use_extra_bufts" not in {name for name, *_ in type(model_params)._fields_}:
            raise ModelLoadError(
                "this llama-cpp-python cannot choose its CPU buffer types "
                "(no use_extra_bufts): pip install 'llama-cpp-python>=0.3.36'"
            )
        model_params.use_extra_bufts = settings.extra_buffers
        report = _LoadReport(progress) if progress is not None else None
        if report is not None:
            # Kept referenced by ``report`` until loading returns (llama.cpp holds the pointer).
            model_params.progress_callback = report.callback
        model = lib.llama_model_load_from_file(os.fsencode(settings.path), model_params)
        if report is not None and report.error is not None:
            if model:
                lib.llama_model_free(model)
            raise ModelLoadError(
                f"loading {settings.path} stopped: its progress callback raised {report.error!r}"
            ) from report.error
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {settings.path}")
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_ubatch
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads_batch
        params.no_perf = False
        context = lib.llama_init_from_model(model, params)
        if not context:
            lib.llama_model_free(model)
            raise ModelLoadError(
                f"llama.cpp could not create a context of {settings.n_ctx} tokens "
                f"for {settings.path}"
            )
        self.context = context
        self.vocab = lib.llama_model_get_vocab(model)
        self.memory = lib.llama_get_memory(context)
        self.n_ctx = int(lib.llama_n_ctx(context))
        self.n_batch = min(settings.n_batch, self.n_ctx)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.bos = int(lib.llama_vocab_bos(self.vocab))
        self.add_bos = bool(lib.llama_vocab_get_add_bos(self.vocab))
        self.cached: list[int] = []
        self._piece = ctypes.create_string_buffer(_MAX_PIECE)
        self._pieces: dict[int, bytes] = {}
        self._ends: dict[int, bool] = {}
        self._idle_flag = AbortFlag()  # never set; installed between jobs
        self.install_abort(self._idle_flag)

    def close(self) -> None:
        lib = _lib()
        lib.llama_batch_free(self.batch)
        lib.llama_free(self.context)
        lib.llama_model_free(self.model)

    # -- helpers -----------------------------------------------------------------------
    def install_abort(self, flag: AbortFlag) -> None:
        _lib().llama_set_abort_callback(self.context, _flag_reader(), ctypes.c_void_p(flag.address))

    def tokenize(self, text: str) -> list[int]:
        lib = _lib()
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            tokens = (lib.llama_token * capacity)()
            count = lib.llama_tokenize(self.vocab, data, len(data), tokens, capacity, False, True)
            if count >= 0:
                break
            capacity = -count
        result = list(tokens[:count])
        if self.add_bos and (not result or result[0] != self.bos):
            result.insert(0, self.bos)
        return result

    def piece(self, token: int) -> bytes:
        """The bytes of ``token`` (special tokens rendered), memoised per token."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        lib = _lib()
        size = lib.llama_token_to_piece(self.vocab, token, self._piece, _MAX_PIECE, 0, True)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = lib.llama_token_to_piece(self.vocab, token, buffer, -size, 0, True)
            data = buffer.raw[:size]
        else:
            data = self._piece.raw[:size]
        self._pieces[token] = data
        return data

    def is_end(self, token: int) -> bool:
        """Whether ``token`` ends generation (end of turn, end of text), memoised."""
        end = self._ends.get(token)
        if end is None:
            end = self._ends[token] = bool(_lib().llama_vocab_is_eog(self.vocab, token))
        return end

    def fill_batch(self, tokens: Sequence[int], position: int, *, logits_last: bool) -> None:
        batch = self.batch
        batch.n_tokens = len(tokens)
        token, pos, n_seq, seq, logits = (
            batch.token,
            batch.pos,
            batch.n_seq_id,
            batch.seq_id,
            batch.logits,
        )
        for index, value in enumerate(tokens):
            token[index] = value
            pos[index] = position + index
            n_seq[index] = 1
            seq[index][0] = 0
            logits[index] = 0
        if logits_last:
            logits[len(tokens) - 1] = 1

    def truncate_cache(self, keep: int) -> int:
        """Drop cached tokens from position ``keep`` on; return how many remain (all are
        dropped when the memory cannot cut a sequence short, e.g. a recurrent model)."""
        lib = _lib()
        if keep < len(self.cached):
            if not lib.llama_memory_seq_rm(self.memory, 0, keep, -1):
                lib.llama_memory_clear(self.memory, True)
                keep = 0
            del self.cached[keep:]
        return len(self.cached)

    def resync_cache(self, tokens: Sequence[int]) -> None:
        """After a failed or aborted decode, keep only what the KV cache really holds."""
        lib = _lib()
        highest = int(lib.llama_memory_seq_pos_max(self.memory, 0))
        self.cached = list(tokens[: min(max(highest + 1, 0), len(tokens))])
        if not lib.llama_memory_seq_rm(self.memory, 0, len(self.cached), -1):
            lib.llama_memory_clear(self.memory, True)
            self.cached = []

    def sampler(self, plan: GenerationPlan) -> Any:
        lib = _lib()
        params = lib.llama_sampler_chain_default_params()
        params.no_perf = True
        chain = lib.llama_sampler_chain_init(params)
        try:
            sampling = plan.sampling
            if sampling.temperature <= 0.0:
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            else:
                if sampling.top_k > 0:
                    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(sampling.top_k))
                if sampling.top_p < 1.0:
                    lib.llama_sampler_chain_add(
                        chain, lib.llama_sampler_init_top_p(sampling.top_p, 1)
                    )
                if sampling.min_p > 0.0:
                    lib.llama_sampler_chain_add(
                        chain, lib.llama_sampler_init_min_p(sampling.min_p, 1)
                    )
                lib.llama_sampler_chain_add(
                    chain, lib.llama_sampler_init_temp(sampling.temperature)
                )
                seed = (
                    lib.LLAMA_DEFAULT_SEED if sampling.seed is None else sampling.seed & 0xFFFFFFFF
                )
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed))
        except BaseException:
            lib.llama_sampler_free(chain)
            raise
        return chain

    def greedy_sampler(self) -> Callable[[Any], int] | None:
        """Greedy sampling straight from the logits, or None without numpy.

        llama.cpp's sampler first copies the logits into a candidate array (3 MB for a
        262k-token vocabulary); an argmax over the logits themselves picks the same
        token (the first of equal maxima, as llama.cpp's greedy sampler does) in a
        fraction of the time.
        """
        try:
            import numpy  # a llama-cpp-python dependency, but optional here
        except ImportError:  # pragma: no cover
            return None
        lib = _lib()
        get_logits, as_array = lib.llama_get_logits_ith, numpy.ctypeslib.as_array
        shape = (int(lib.llama_vocab_n_tokens(self.vocab)),)

        def argmax(context: Any) -> int:
            return int(as_array(get_logits(context, -1), shape=shape).argmax())

        return argmax

    def grammar_sampler(self, grammar: ToolGrammar) -> Any:
        """llama.cpp's sampler for ``grammar`` (kept out of the chain: see
        :func:`_constrained`). Raises :class:`GrammarError` when llama.cpp rejects it."""
        return self._grammar(grammar)

    def _grammar(self, grammar: ToolGrammar) -> Any:
        lib = _lib()
        text = grammar.text.encode("utf-8")
        if grammar.triggers:
            patterns = (ctypes.c_char_p * len(grammar.triggers))(
                *(pattern.encode("utf-8") for pattern in grammar.triggers)
            )
            sampler = lib.llama_sampler_init_grammar_lazy_patterns(
                self.vocab, text, b"root", patterns, len(grammar.triggers), None, 0
            )
        else:
            sampler = lib.llama_sampler_init_grammar(self.vocab, text, b"root")
        if not sampler:
            raise GrammarError("llama.cpp rejected the tool-call grammar")
        return sampler

    def performance(self, *, reset: bool) -> Performance:
        lib = _lib()
        data = lib.llama_perf_context(self.context)
        result = Performance(
            prompt_ms=float(data.t_p_eval_ms),
            prompt_tokens=int(data.n_p_eval),
            eval_ms=float(data.t_eval_ms),
            eval_tokens=int(data.n_eval),
        )
        if reset:
            lib.llama_perf_context_reset(self.context)
        return result


class _LoadReport:
    """llama.cpp's load ``progress_callback`` (a fraction, on the loading thread) calling
    a Python function. An exception cannot cross the C frames: it stops the load (the
    callback returns false) and is raised by the loader afterwards."""

    def __init__(self, progress: Callable[[float], None]) -> None:
        self.error: Exception | None = None

        def call(fraction: float, _data: int | None) -> bool:
            try:
                progress(fraction)
            except Exception as exc:
                self.error = exc
                return False
            return True

        self.callback = _lib().llama_progress_callback(call)


def load_model(
    settings: LoadSettings, progress: Callable[[float], None] | None = None
) -> LoadedModel:
    """Worker setup: load the model (raises :class:`ModelLoadError`). ``progress`` is
    called on the loading thread with the fraction loaded, 0.0 to 1.0."""
    return LoadedModel(settings, progress)


def close_model(model: LoadedModel) -> None:
    """Worker teardown."""
    model.close()


def read_performance(job: WorkerJob[LoadedModel, Performance], reset: bool) -> Performance:
    """A worker job: llama.cpp's performance counters, optionally reset."""
    return job.resource.performance(reset=reset)


def reset_cache(job: WorkerJob[LoadedModel, None]) -> None:
    """A worker job: forget the cached prompt."""
    job.resource.truncate_cache(0)


# -- helpers of the generation loop ---------------------------------------------------------
class _ReasoningBudget:
    """Tracks reasoning in the output and says when the budget forces it closed."""

    __slots__ = ("_budget", "_spent", "_state", "_tail", "_think")

    def __init__(self, think: ThinkMarkers, budget: int, starts_in_reasoning: bool) -> None:
        self._think = think
        self._budget = budget
        self._spent = 0
        self._state = "reasoning" if starts_in_reasoning else "start"
        self._tail = ""

    def observe(self, text: str) -> bool:
        """Account one token's text; True when reasoning must be closed now."""
        if self._state == "done":
            return False
        self._tail = (self._tail + text)[-64:]
        if self._state == "start":
            stripped = self._tail.lstrip()
            if stripped.startswith(self._think.open):
                self._state = "reasoning"
                self._tail = stripped[len(self._think.open) :]
            elif stripped and not self._think.open.startswith(stripped):
                self._state = "done"
            return False
        if self._think.close in self._tail:
            self._state = "done"
            return False
        self._spent += 1
        if self._spent >= self._budget:
            self._state = "done"
            return True
        return False


def run_generation(
    job: WorkerJob[LoadedModel, GenerationReport], plan: GenerationPlan
) -> GenerationReport:
    """The generation job: process the prompt in chunks, then sample token by token.

    Emits :class:`PromptProgress` after each prompt chunk and the text of each token
    (as ``str``; an incomplete UTF-8 sequence waits for the next token). Returns when
    generation ends, the token limit or the context is reached, a stop string appears,
    or the job is aborted (``finish="cancelled"``).
    """
    model = job.resource
    flag = plan.abort
    model.install_abort(flag)
    try:
        return _generate(job, model, plan)
    finally:
        model.install_abort(model._idle_flag)


def _generate(
    job: WorkerJob[LoadedModel, GenerationReport], model: LoadedModel, plan: GenerationPlan
) -> GenerationReport:
    lib = _lib()
    flag = plan.abort
    tokens = model.tokenize(plan.prompt)
    total = len(tokens)
    if total >= model.n_ctx:
        raise ContextOverflow(total, model.n_ctx)

    # Reuse the cached prefix; at least the last prompt token is decoded for its logits.
    common = 0
    for cached, token in zip(model.cached, tokens, strict=False):
        if cached != token:
            break
        common += 1
    common = model.truncate_cache(min(common, total - 1))

    def outcome(finish: FinishKind, generated: list[int], **extra: Any) -> GenerationReport:
        return GenerationReport(
            finish=finish,
            prompt_tokens=total,
            cached_tokens=common,
            generated_tokens=len(generated),
            tokens=tuple(generated),
            **extra,
        )

    job.emit(PromptProgress(common, total))
    position = common
    while position < total:
        if flag.is_set or job.aborted:
            return outcome("cancelled", [])
        chunk = tokens[position : position + model.n_batch]
        last = position + len(chunk) == total
        model.fill_batch(chunk, position, logits_last=last)
        status = lib.llama_decode(model.context, model.batch)
        if status != 0:
            model.resync_cache(tokens)
            if status == _ABORTED:
                return outcome("cancelled", [], aborted_in_decode=True)
            raise GenerationFailed(
                f"llama_decode failed on the prompt (status {status})", status=status
            )
        model.cached.extend(chunk)
        position += len(chunk)
        job.emit(PromptProgress(position, total))

    limit = model.n_ctx - total
    if plan.max_tokens is not None:
        limit = min(limit, plan.max_tokens)
    chain = model.sampler(plan)
    try:
        grammar = None if plan.grammar is None else model.grammar_sampler(plan.grammar)
        try:
            return _sample(job, model, plan, chain, grammar, limit, outcome)
        finally:
            if grammar is not None:
                lib.llama_sampler_free(grammar)
    finally:
        lib.llama_sampler_free(chain)


def _constrained(
    model: LoadedModel, chain: Any, grammar: Any, first_choice: Callable[[Any], int]
) -> Callable[[Any], int]:
    """Sampling under a grammar, checking the grammar on one token first.

    Applying a grammar to every candidate costs a walk of the grammar per token of the
    vocabulary (262k for Gemma) on every step. Most steps the unconstrained choice is
    allowed anyway: take it when the grammar accepts that single token, and only
    otherwise apply the grammar to all candidates and sample again (as llama.cpp's own
    common sampler does). Greedy decoding picks the same tokens either way: the best
    token overall, when allowed, is the best allowed token.
    """
    import numpy  # a llama-cpp-python dependency

    lib = _lib()
    apply, accept = lib.llama_sampler_apply, lib.llama_sampler_accept
    get_logits, as_array = lib.llama_get_logits_ith, numpy.ctypeslib.as_array
    size = int(lib.llama_vocab_n_tokens(model.vocab))
    one = (lib.llama_token_data * 1)()
    single = lib.llama_token_data_array(one, 1, -1, False)
    candidates = (lib.llama_token_data * size)()
    full = lib.llama_token_data_array(candidates, size, -1, False)
    view, ids = as_array(candidates), numpy.arange(size, dtype=numpy.int32)
    single_ref, full_ref = ctypes.byref(single), ctypes.byref(full)
    rejected = float("-inf")

    def sample(context: Any) -> int:
        token = first_choice(context)
        one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
        single.size, single.selected, single.sorted = 1, -1, False
        apply(grammar, single_ref)
        if one[0].logit != rejected:
            accept(grammar, token)
            return token
        view["id"] = ids
        view["logit"] = as_array(get_logits(context, -1), shape=(size,))
        view["p"] = 0.0
        full.size, full.selected, full.sorted = size, -1, False
        apply(grammar, full_ref)
        apply(chain, full_ref)
        token = int(candidates[full.selected].id)
        accept(grammar, token)
        accept(chain, token)
        return token

    return sample


def _chain_sampler(chain: Any) -> Callable[[Any], int]:
    sample_with_chain = _lib().llama_sampler_sample

    def sample(context: Any) -> int:
        return int(sample_with_chain(chain, context, -1))

    return sample


def _sample(
    job: WorkerJob[LoadedModel, GenerationReport],
    model: LoadedModel,
    plan: GenerationPlan,
    chain: Any,
    grammar: Any,
    limit: int,
    outcome: Callable[..., GenerationReport],
) -> GenerationReport:
    lib = _lib()
    flag = plan.abort
    context = model.context
    decoder = Utf8Decoder()
    stops = CallAwareStops(
        plan.stop, plan.tool_family, think=plan.think, in_reasoning=plan.starts_in_reasoning
    )
    budget = (
        _ReasoningBudget(plan.think, plan.reasoning_budget, plan.starts_in_reasoning)
        if plan.think is not None and plan.reasoning_budget is not None
        else None
    )
    generated: list[int] = []
    first_token_at: float | None = None
    position = len(model.cached)
    finish: FinishKind = "length"
    aborted_in_decode = stopped = False
    emit, is_end, piece = job.emit, model.is_end, model.piece
    sample = _chain_sampler(chain)
    if plan.sampling.temperature <= 0:
        sample = model.greedy_sampler() or sample
    if grammar is not None:
        sample = _constrained(model, chain, grammar, sample)
    # Single-token decodes reuse slot 0 of the batch: only token and position change.
    batch = model.batch
    token_slot, position_slot = batch.token, batch.pos
    batch.n_seq_id[0] = 1
    batch.seq_id[0][0] = 0

    while len(generated) < limit:
        if flag.is_set or job.aborted:
            finish = "cancelled"
            break
        token = sample(context)
        if is_end(token):
            finish = "stop"
            break
        generated.append(token)
        text, stopped = stops.feed(decoder.decode(piece(token)))
        if text:
            if first_token_at is None:
                first_token_at = time.perf_counter()
            emit(text)
        if stopped:
            finish = "stop"
            break
        batch_tokens = [token]
        if budget is not None and budget.observe(text):
            assert plan.think is not None
            closing = f"\n{plan.think.close}\n\n"
            forced = model.tokenize(closing)
            if forced and model.add_bos and forced[0] == model.bos:
                forced = forced[1:]
            for each in forced:
                lib.llama_sampler_accept(chain, each)
                if grammar is not None:
                    lib.llama_sampler_accept(grammar, each)
            # Bytes of an unfinished character belong to the reasoning, not the answer.
            rest, _ = stops.feed(decoder.decode(b"", final=True))
            decoder.reset()
            emit(rest + closing)
            batch_tokens += forced
        if len(generated) >= limit or position + len(batch_tokens) >= model.n_ctx:
            break
        if len(batch_tokens) == 1:
            batch.n_tokens = 1
            token_slot[0] = token
            position_slot[0] = position
            batch.logits[0] = 1
        else:
            model.fill_batch(batch_tokens, position, logits_last=True)
        status = lib.llama_decode(context, batch)
        if status != 0:
            model.resync_cache([*model.cached, *batch_tokens])
            if status == _ABORTED:
                finish, aborted_in_decode = "cancelled", True
                break
            raise GenerationFailed(
                f"llama_decode failed while generating (status {status})", status=status
            )
        model.cached.extend(batch_tokens)
        position += len(batch_tokens)
    if finish != "cancelled" and not stopped:
        tail, ended = stops.feed(decoder.decode(b"", final=True))
        if not ended:
            rest, _ = stops.flush()  # an unfinished stop string is ordinary text
            tail += rest
        if tail:
            emit(tail)
    return outcome(
        finish, generated, aborted_in_decode=aborted_in_decode, first_token_at=first_token_at
    )
