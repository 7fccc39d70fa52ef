"""The buffer-type probe, run as a child process: ``python -m emelex.model.llama._probe``.

llama.cpp's extra CPU buffer types (AMX, CPU_REPACK, ...) repack quantized weights for
faster kernels. On some machines those kernels die with a signal instead (AMX tile
instructions fault on worker threads of some cloud VMs), killing the whole process, so
only a separate process can find out safely. This one writes a small model whose weights
are the quantized types, and of the shapes, those buffer types accept; loads it with
the extra buffer types on; reads llama.cpp's log for the buffer types the weights landed
in; decodes a prompt batch and a token on a second thread with several compute threads
(as the real backend does); and prints one JSON line. A crash is the parent's answer.

Kept free of Trio and of emelex's other modules: it only needs llama-cpp-python, numpy
and gguf, and starts fast.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

from emelex.model.llama._tiny import tiny_vocabulary

#: A test hook: the name of a signal (e.g. ``SIGILL``) the probe sends itself from its
#: decode thread right before decoding, to exercise the parent's crash handling for real.
FAULT_ENV: Final = "EMELEX_LLAMA_PROBE_FAULT"

# AMX kernels take Q4_0/Q8_0 weights whose rows are a multiple of 32 values and whose
# output dimension is a multiple of 32; REPACK's interleaved layouts need multiples of 8.
_N_EMBD: Final = 256
_N_FF: Final = 512
_N_HEAD: Final = 4
_N_LAYERS: Final = 2
_PROMPT_TOKENS: Final = 32  # a batch, so the matrix kernels (not the vector path) run
_BUFFER_LINE: Final = re.compile(r"(\S+) model buffer size\s*=\s*([0-9.]+) MiB")
# Buffers of plain host memory; every other model buffer is an extra buffer type.
PLAIN_BUFFERS: Final = frozenset({"CPU", "CPU_Mapped"})


def write_probe_gguf(path: Path) -> Path:
    """Write the probe model: attention weights Q8_0, feed-forward weights Q4_0."""
    import gguf
    import numpy as np
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    tokens, scores, types = tiny_vocabulary()

    def weights(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def quantized(kind: Any, *shape: int) -> tuple[Any, Any]:
        return quantize(weights(*shape), kind), kind

    q8, q4 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("emelex-buffer-probe")
    writer.add_context_length(512)
    writer.add_embedding_length(_N_EMBD)
    writer.add_block_count(_N_LAYERS)
    writer.add_feed_forward_length(_N_FF)
    writer.add_head_count(_N_HEAD)
    writer.add_head_count_kv(_N_HEAD)
    writer.add_rope_dimension_count(_N_EMBD // _N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_tensor("token_embd.weight", weights(len(tokens), _N_EMBD))
    for layer in range(_N_LAYERS):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            data, kind = quantized(q8, _N_EMBD, _N_EMBD)
            writer.add_tensor(f"{prefix}.{name}.weight", data, raw_dtype=kind)
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
        for name, shape in (
            ("ffn_gate", (_N_FF, _N_EMBD)),
            ("ffn_up", (_N_FF, _N_EMBD)),
            ("ffn_down", (_N_EMBD, _N_FF)),
        ):
            data, kind = quantized(q4, *shape)
            writer.add_tensor(f"{prefix}.{name}.weight", data, raw_dtype=kind)
    writer.add_tensor("output_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weights(len(tokens), _N_EMBD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _capture_log(lib: Any, lines: list[str]) -> Any:
    """Collect llama.cpp's log lines (nothing reaches the terminal)."""
    partial: list[str] = []

    @lib.llama_log_callback  # type: ignore[untyped-decorator]
    def log(_level: int, text: bytes, _user_data: object) -> None:
        partial.append(text.decode("utf-8", "replace"))
        if partial[-1].endswith("\n"):
            lines.append("".join(partial).rstrip())
            partial.clear()

    lib.llama_log_set(log, ctypes.c_void_p(0))
    return log


def model_buffers(lines: list[str]) -> dict[str, float]:
    """The model buffer types named in llama.cpp's load log, with their sizes in MiB."""
    found: dict[str, float] = {}
    for line in lines:
        match = _BUFFER_LINE.search(line)
        if match:
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    return found


def _decode(lib: Any, model: Any, n_threads: int, fault: str | None) -> float:
    """Decode a prompt batch and one token on the calling thread; return milliseconds."""
    params = lib.llama_context_default_params()
    params.n_ctx = 256
    params.n_batch = _PROMPT_TOKENS
    params.n_ubatch = _PROMPT_TOKENS
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    context = lib.llama_init_from_model(model, params)
    if not context:
        raise RuntimeError("llama.cpp could not create a context for the probe model")
    batch = lib.llama_batch_init(_PROMPT_TOKENS, 0, 1)
    try:
        if fault:
            signal.pthread_kill(threading.get_ident(), getattr(signal, fault))
        started = time.perf_counter()
        for start, count in ((0, _PROMPT_TOKENS), (_PROMPT_TOKENS, 1)):
            batch.n_tokens = count
            for index in range(count):
                batch.token[index] = 300 + (start + index) % 50
                batch.pos[index] = start + index
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = 0
                batch.logits[index] = index == count - 1
            status = lib.llama_decode(context, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status}")
        return (time.perf_counter() - started) * 1000
    finally:
        lib.llama_batch_free(batch)
        lib.llama_free(context)


def probe(directory: Path, n_threads: int, fault: str | None) -> dict[str, Any]:
    """Run the probe; return the verdict as a JSON-ready dict (raises on failure)."""
    import llama_cpp as lib

    lines: list[str] = []
    keep_alive = _capture_log(lib, lines)
    lib.llama_backend_init()
    path = write_probe_gguf(directory / "probe.gguf")
    params = lib.llama_model_default_params()
    params.use_extra_bufts = True
    params.use_mmap = False  # weights are copied (and repacked) into their buffers
    model = lib.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise RuntimeError("llama.cpp could not load the probe model: " + " | ".join(lines[-5:]))
    try:
        buffers = model_buffers(lines)
        result: list[float] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                result.append(_decode(lib, model, n_threads, fault))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        # A second thread, as the backend's dedicated worker: some CPUs allow a feature
        # on the main thread only.
        worker = threading.Thread(target=run, name="emelex-buffer-probe")
        worker.start()
        worker.join()
        if errors:
            raise errors[0]
    finally:
        lib.llama_model_free(model)
    del keep_alive
    return {
        "ok": True,
        "buffers": buffers,
        "extra": sorted(name for name in buffers if name not in PLAIN_BUFFERS),
        "decode_ms": round(result[0], 3),
        "n_threads": n_threads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emelex.model.llama._probe")
    parser.add_argument("--threads", type=int, default=max(2, os.cpu_count() or 2))
    args = parser.parse_args(argv)
    # A crash here is an expected outcome: no core file.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fault = os.environ.get(FAULT_ENV) or None
    if fault is not None and not (fault.startswith("SIG") and hasattr(signal, fault)):
        print(f"{FAULT_ENV}: unknown signal {fault!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="emelex-probe-") as directory:
        verdict = probe(Path(directory), max(2, args.threads), fault)
    sys.stdout.write(json.dumps(verdict, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
