"""llama.cpp's extra CPU buffer types: the probe child (pass and crash), the verdict
cache, the forced options, and what the loaded model really used (llama.cpp's log)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import pytest
import trio

from emelex import EmelexError
from emelex.model import InvalidRequest, ModelError
from emelex.model.llama import (
    TINY_CHAT_TEMPLATE,
    BufferVerdict,
    LlamaModel,
    NativeCrash,
    _buffers,
    choose_extra_buffers,
    probe_extra_buffers,
)
from emelex.model.llama._probe import FAULT_ENV, PLAIN_BUFFERS, model_buffers, write_probe_gguf

PROBE_SECONDS = 120  # a cold child on a busy 2-core machine takes a few seconds


def _system_info() -> str:
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return info.decode() if isinstance(info, bytes) else str(info)


def _expected_extra_types() -> set[str]:
    """The buffer type llama.cpp's CPU backend offers first for Q4_0 weights."""
    info = _system_info()
    if "AMX_INT8 = 1" in info:
        return {"AMX"}
    if "REPACK = 1" in info:
        return {"CPU_REPACK"}
    return set()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("EMELEX_CACHE_DIR", str(directory))
    monkeypatch.delenv(FAULT_ENV, raising=False)
    return directory


@pytest.fixture(scope="module")
def quantized_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe's model (Q8_0 attention, Q4_0 feed-forward): weights the extra buffer
    types take, unlike the F32 tiny model."""
    return write_probe_gguf(tmp_path_factory.mktemp("quantized") / "probe.gguf")


def _cache_files(directory: Path) -> list[Path]:
    """Every file in the cache directory (none when it was never created)."""
    return sorted(directory.iterdir()) if directory.exists() else []


def _loaded_buffers(caplog: pytest.LogCaptureFixture) -> dict[str, float]:
    return model_buffers([record.getMessage() for record in caplog.records])


# -- the probe ----------------------------------------------------------------------------
async def test_probe_loads_quantized_weights_into_an_extra_buffer_and_decodes(
    cache_dir: Path,
) -> None:
    with trio.fail_after(PROBE_SECONDS):
        try:
            report = await probe_extra_buffers(n_threads=2)
        except NativeCrash:
            # Only acceptable where the build has AMX kernels (the trap this guards).
            if "AMX_INT8 = 1" not in _system_info():
                raise
            return
    assert report.n_threads == 2
    assert report.decode_ms > 0
    names = {name for name, _ in report.model_buffers}
    assert set(report.extra_buffer_types) == names - PLAIN_BUFFERS
    # On this project's machines (AVX2, REPACK build): the Q4_0 weights are repacked.
    assert set(report.extra_buffer_types) == _expected_extra_types()
    assert all(size > 0 for _, size in report.model_buffers)
    assert not _cache_files(cache_dir)  # the bare probe never touches the cache


@pytest.mark.parametrize("fault", ["SIGILL", "SIGSEGV"])
async def test_a_probe_killed_by_a_signal_raises_native_crash(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setenv(FAULT_ENV, fault)
    with trio.fail_after(PROBE_SECONDS), pytest.raises(NativeCrash) as caught:
        await probe_extra_buffers()
    crash = caught.value
    assert isinstance(crash, ModelError)
    assert isinstance(crash, EmelexError)
    assert crash.signal_name == fault
    assert crash.signal_number == getattr(signal, fault)
    message = str(crash)
    assert f"killed by {fault}" in message
    assert "extra_buffers='off'" in message
    assert "EMELEX_LLAMA_EXTRA_BUFFERS=off" in message
    assert "132" not in message and "exit" not in message


async def test_cancelling_the_probe_kills_the_child_and_caches_nothing(
    cache_dir: Path,
) -> None:
    with trio.fail_after(30):
        with trio.move_on_after(0.3) as scope:
            await choose_extra_buffers()
    assert scope.cancelled_caught
    assert not _cache_files(cache_dir)


# -- auto: probe, cache ---------------------------------------------------------------------
async def test_auto_probes_once_then_uses_the_cache(cache_dir: Path) -> None:
    with trio.fail_after(PROBE_SECONDS):
        first = await choose_extra_buffers()
    if "AMX_INT8 = 1" not in _system_info():
        assert first.extra_buffers
        assert set(first.buffer_types) == _expected_extra_types()
    assert first.source == "probe"
    (cached_file,) = _cache_files(cache_dir)  # and no temporary file left behind
    assert cached_file.name.startswith("llama-buffers-")
    assert first.cache_file == str(cached_file)
    data = json.loads(cached_file.read_bytes())
    assert data["key"] == _buffers.machine_key()
    assert data["verdict"]["extra_buffers"] == first.extra_buffers

    second = await choose_extra_buffers()
    assert second.source == "cache"
    assert (second.extra_buffers, second.reason, second.buffer_types) == (
        first.extra_buffers,
        first.reason,
        first.buffer_types,
    )


async def test_a_crashing_probe_gives_off_with_the_reason_and_is_cached(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, "SIGILL")
    with trio.fail_after(PROBE_SECONDS):
        verdict = await choose_extra_buffers()
    assert not verdict.extra_buffers
    assert verdict.source == "probe"
    assert "SIGILL" in verdict.reason
    monkeypatch.delenv(FAULT_ENV)
    again = await choose_extra_buffers()  # no probe: the cached verdict
    assert (again.source, again.extra_buffers, again.reason) == ("cache", False, verdict.reason)


async def test_the_cache_misses_when_the_key_changes(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _buffers.machine_key()
    _buffers.write_cached(
        _buffers.cache_file(key),
        key,
        BufferVerdict(extra_buffers=True, source="probe", reason="an older probe"),
    )
    assert (await choose_extra_buffers()).reason == "an older probe"
    # A kernel upgrade (or another llama.cpp build, or other CPU flags) is another key.
    changed = (*((k, v) for k, v in key.items() if k != "kernel"), ("kernel", "9.9.9-new"))
    monkeypatch.setattr(_buffers, "_machine_key", lambda: changed)
    assert _buffers.read_cached(_buffers.cache_file(key), dict(changed)) is None
    monkeypatch.setenv(FAULT_ENV, "SIGILL")  # makes the new probe's verdict recognisable
    with trio.fail_after(PROBE_SECONDS):
        verdict = await choose_extra_buffers()
    assert (verdict.source, verdict.extra_buffers) == ("probe", False)
    assert len(_cache_files(cache_dir)) == 2


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b"[]", b'{"format": 1}', b"\xff\xfe", b'{"format": 1, "key": 3}'],
)
def test_a_corrupt_cache_file_reads_as_a_miss(cache_dir: Path, content: bytes) -> None:
    key = _buffers.machine_key()
    path = _buffers.cache_file(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert _buffers.read_cached(path, key) is None


async def test_a_corrupt_cache_file_is_replaced_by_a_new_probe(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _buffers.machine_key()
    path = _buffers.cache_file(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"format": 1, "key": {"trunc')
    monkeypatch.setenv(FAULT_ENV, "SIGILL")
    with trio.fail_after(PROBE_SECONDS):
        verdict = await choose_extra_buffers()
    assert verdict.source == "probe"
    assert _buffers.read_cached(path, key) == BufferVerdict(
        extra_buffers=False, source="cache", reason=verdict.reason, cache_file=str(path)
    )


def test_a_cached_verdict_with_wrong_types_is_ignored(cache_dir: Path) -> None:
    key = _buffers.machine_key()
    path = _buffers.cache_file(key)
    path.parent.mkdir(parents=True)
    bad = {"extra_buffers": "yes", "reason": "x", "buffer_types": []}
    path.write_text(json.dumps({"format": 1, "key": key, "verdict": bad}))
    assert _buffers.read_cached(path, key) is None


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMELEX_CACHE_DIR", "/somewhere/emelex-cache")
    assert _buffers.cache_directory() == Path("/somewhere/emelex-cache")
    monkeypatch.delenv("EMELEX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert _buffers.cache_directory() == Path("/xdg/emelex")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert _buffers.cache_directory() == Path("/home/someone/.cache/emelex")


# -- forced choices -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["on", "off"])
async def test_a_forced_option_skips_the_probe_and_decides_the_load(
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quantized_model: Path,
    mode: str,
) -> None:
    monkeypatch.setenv(FAULT_ENV, "SIGILL")  # a probe would say "off"
    monkeypatch.setenv("EMELEX_LLAMA_EXTRA_BUFFERS", "off" if mode == "on" else "on")
    model = LlamaModel(
        quantized_model,
        chat_template=TINY_CHAT_TEMPLATE,
        extra_buffers=mode,  # type: ignore[arg-type]
        n_threads=2,
    )
    assert model.buffer_verdict is None
    with caplog.at_level(logging.DEBUG, logger="emelex.model.llama"), trio.fail_after(60):
        async with model:
            verdict = model.buffer_verdict
    assert verdict is not None
    assert (verdict.source, verdict.extra_buffers) == ("option", mode == "on")
    assert not _cache_files(cache_dir)  # no probe ran
    loaded = _loaded_buffers(caplog)
    assert loaded, "llama.cpp's load log named no model buffer"
    extra = set(loaded) - PLAIN_BUFFERS
    assert extra == (_expected_extra_types() if mode == "on" else set())


@pytest.mark.parametrize("value", ["on", "off", "OFF "])
async def test_the_environment_variable_forces_auto(
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quantized_model: Path,
    value: str,
) -> None:
    monkeypatch.setenv("EMELEX_LLAMA_EXTRA_BUFFERS", value)
    model = LlamaModel(quantized_model, chat_template=TINY_CHAT_TEMPLATE, n_threads=2)
    with caplog.at_level(logging.DEBUG, logger="emelex.model.llama"), trio.fail_after(60):
        async with model:
            pass
    on = value.strip().lower() == "on"
    assert model.buffer_verdict == BufferVerdict(
        extra_buffers=on,
        source="environment",
        reason=f"EMELEX_LLAMA_EXTRA_BUFFERS={value.strip().lower()}",
    )
    assert set(_loaded_buffers(caplog)) - PLAIN_BUFFERS == (
        _expected_extra_types() if on else set()
    )
    assert not _cache_files(cache_dir)


async def test_auto_after_a_crashing_probe_loads_without_extra_buffers(
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quantized_model: Path,
) -> None:
    monkeypatch.setenv(FAULT_ENV, "SIGILL")
    model = LlamaModel(quantized_model, chat_template=TINY_CHAT_TEMPLATE, n_threads=2)
    with caplog.at_level(logging.DEBUG, logger="emelex.model.llama"), trio.fail_after(120):
        async with model:
            pass
    verdict = model.buffer_verdict
    assert verdict is not None
    assert (verdict.source, verdict.extra_buffers) == ("probe", False)
    assert "SIGILL" in verdict.reason
    assert set(_loaded_buffers(caplog)) - PLAIN_BUFFERS == set()
    messages = [record.getMessage() for record in caplog.records]
    assert any("extra CPU buffer types off" in message for message in messages)


async def test_bad_modes_are_typed_errors(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidRequest, match="extra_buffers must be"):
        await choose_extra_buffers("yes")  # type: ignore[arg-type]
    monkeypatch.setenv("EMELEX_LLAMA_EXTRA_BUFFERS", "sometimes")
    with pytest.raises(InvalidRequest, match="EMELEX_LLAMA_EXTRA_BUFFERS must be"):
        await choose_extra_buffers()


def test_a_bad_option_fails_at_construction(tiny_model: Path) -> None:
    with pytest.raises(InvalidRequest, match="extra_buffers must be"):
        LlamaModel(tiny_model, extra_buffers=True)  # type: ignore[arg-type]


def test_native_crash_names_unknown_signals_plainly() -> None:
    crash = NativeCrash("the server", 200)
    assert crash.signal_name == "signal 200"
    assert "the server was killed by signal 200" in str(crash)


def test_describe_is_one_line() -> None:
    verdict = BufferVerdict(
        extra_buffers=True, source="cache", reason="probed", buffer_types=("CPU_REPACK",)
    )
    assert verdict.describe() == "extra CPU buffer types on (CPU_REPACK) [cache]: probed"
