"""Errors of the native llama.cpp backend."""

from __future__ import annotations

from emelex.model._errors import InvalidRequest, ModelError


class ModelLoadError(ModelError):
    """The model file is missing, unreadable, not GGUF, or llama.cpp refused to load it
    (also raised when ``llama-cpp-python`` is not installed)."""


class ModelNotOpen(ModelError):
    """A generation was started on a :class:`LlamaModel` whose weights are not loaded.

    Open the model first: ``async with model:`` (or ``async with client:`` for a
    :class:`~emelex.Client` built with ``Client.llama``).
    """


class ContextOverflow(InvalidRequest):
    """The rendered prompt does not fit the context window (with room for one token).

    ``prompt_tokens`` is the prompt's length and ``context_size`` the window.
    """

    def __init__(self, prompt_tokens: int, context_size: int) -> None:
        super().__init__(
            f"the prompt has {prompt_tokens} tokens but the context holds {context_size} "
            "(at least one more is needed to generate); shorten the conversation or open "
            "the model with a larger n_ctx"
        )
        self.prompt_tokens = prompt_tokens
        self.context_size = context_size


class GenerationFailed(ModelError):
    """llama.cpp failed while processing the prompt or generating (``status`` is the
    code ``llama_decode`` returned)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GrammarError(ModelError):
    """A tool-call grammar could not be built from the offered tools, or llama.cpp
    refused it."""


class NativeCrash(ModelError):
    """A child process running llama.cpp's native code was killed by a signal.

    ``what`` says which child (e.g. the buffer-type probe), ``signal_number`` and
    ``signal_name`` which signal (``SIGILL`` for an instruction the CPU refused). The
    message names the workaround: load models without llama.cpp's extra CPU buffer
    types (``LlamaModel(..., extra_buffers="off")`` or ``EMELEX_LLAMA_EXTRA_BUFFERS=off``).
    """

    def __init__(self, what: str, signal_number: int, *, detail: str = "") -> None:
        import signal

        try:
            name = signal.Signals(signal_number).name
        except ValueError:
            name = f"signal {signal_number}"
        message = (
            f"{what} was killed by {name} inside llama.cpp's native code"
            + (f" ({detail})" if detail else "")
            + "; load models without the extra CPU buffer types: "
            "LlamaModel(..., extra_buffers='off') or EMELEX_LLAMA_EXTRA_BUFFERS=off"
        )
        super().__init__(message)
        self.what = what
        self.signal_number = signal_number
        self.signal_name = name


class BufferProbeFailed(ModelError):
    """The buffer-type probe child failed without a signal: it exited with an error,
    printed no verdict, or did not finish in time (``detail`` holds the end of its
    error output)."""

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message + (f": {detail}" if detail else ""))
        self.detail = detail
