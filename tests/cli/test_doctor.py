"""``emelex doctor``, run as a real subprocess."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import llama_cpp

import emelex
from emelex.store import SCHEMA_VERSION

EMELEX = [sys.executable, "-m", "emelex.cli"]
NAMES = [
    "python",
    "emelex",
    "llama_cpp",
    "cpu_features",
    "buffer_types",
    "default_model",
    "store",
    "diagnostics_socket",
    "leftovers",
]


def doctor(
    *args: str, env: dict[str, str], cwd: Path, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in {**os.environ, **env}.items() if k not in drop}
    return subprocess.run(
        [*EMELEX, "doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
        stdin=subprocess.DEVNULL,
    )


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert [check["name"] for check in document["checks"]] == NAMES
    return {check["name"]: check for check in document["checks"]}


def test_doctor_json_reports_every_line_and_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = doctor(
        "--json", env={"EMELEX_HOME": str(home)}, cwd=tmp_path, drop=("EMELEX_DIAGNOSTICS_SOCKET",)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    checks = by_name(document)
    assert document["ok"] is True
    assert all(check["ok"] and check["fix"] == "" for check in checks.values())
    assert checks["python"]["version"] == platform.python_version()
    assert checks["emelex"]["version"] == emelex.__version__
    assert checks["llama_cpp"]["version"] == llama_cpp.__version__
    info = llama_cpp.llama_print_system_info()
    info = info.decode() if isinstance(info, bytes) else info
    assert checks["cpu_features"]["system_info"] == info.strip()
    assert "AVX" in checks["cpu_features"]["features"] or platform.machine() != "x86_64"
    buffers = checks["buffer_types"]
    assert buffers["source"] in ("probe", "cache")
    assert isinstance(buffers["extra_buffers"], bool)
    assert buffers["reason"] and buffers["probe_error"] is None
    assert Path(buffers["cache_file"]).parent == Path(os.environ["EMELEX_CACHE_DIR"])
    model = checks["default_model"]
    assert model["path"].endswith(".gguf")
    if model["assembled"]:
        assert model["size"] == Path(model["path"]).stat().st_size
    assert model["capabilities"]["tool_declarations"] is True
    assert model["capabilities"]["tool_history"] is True
    store = checks["store"]
    assert store["path"] == str(home / "sessions.db")
    assert (store["exists"], store["expected_schema"]) == (False, SCHEMA_VERSION)
    assert not home.exists()  # the doctor looked, it did not create
    assert checks["diagnostics_socket"]["path"] is None


def test_doctor_marks_problems_with_what_to_do_and_exits_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "sessions.db").write_bytes(b"this is not SQLite" * 100)
    socket = tmp_path / "missing-dir" / "diag.sock"
    env = {"EMELEX_HOME": str(home), "EMELEX_DIAGNOSTICS_SOCKET": str(socket)}
    result = doctor("--json", env=env, cwd=tmp_path)
    assert result.returncode == 1
    checks = by_name(json.loads(result.stdout))
    assert not checks["store"]["ok"]
    assert "not a readable emelex store" in checks["store"]["summary"]
    assert "move it away" in checks["store"]["fix"]
    assert not checks["diagnostics_socket"]["ok"]
    assert "writable directory" in checks["diagnostics_socket"]["fix"]
    assert checks["python"]["ok"] and checks["default_model"]["ok"]
    # The same in words: a ✗ line, then what to do.
    text = doctor(env=env, cwd=tmp_path)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    (store_line,) = [line for line in lines if line.startswith("✗ store")]
    assert "→ move it away" in lines[lines.index(store_line) + 1]
    assert sum(line.startswith("✓") for line in lines) == len(NAMES) - 2


def test_doctor_lists_leftovers_of_killed_writes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "keys").mkdir(parents=True)
    (workspace / "keys" / ".server.key.emelex-tmp-0123456789ab").write_bytes(b"k" * 10)
    (workspace / "notes.txt").write_text("fine\n")
    env = {"EMELEX_HOME": str(tmp_path / "home")}
    result = doctor("--json", "--workspace", str(workspace), env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    check = by_name(json.loads(result.stdout))["leftovers"]
    assert not check["ok"] and check["checked"] is True
    (leftover,) = check["leftovers"]
    assert leftover["kind"] == "temporary" and leftover["size"] == 10
    assert leftover["stands_for"] == "keys/server.key"
    assert "recovery file" in check["fix"]
    # A clean folder (the default is the current directory) passes.
    clean = doctor("--json", env=env, cwd=workspace / "keys" / "..")
    assert by_name(json.loads(clean.stdout))["leftovers"]["ok"] is False
    os.remove(workspace / "keys" / ".server.key.emelex-tmp-0123456789ab")
    clean = doctor("--json", env=env, cwd=workspace)
    assert by_name(json.loads(clean.stdout))["leftovers"]["ok"] is True


def test_doctor_reports_a_store_of_another_schema(tmp_path: Path) -> None:
    import sqlite3

    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "sessions.db") as connection:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("INSERT INTO meta VALUES ('schema', '99')")
    connection.close()
    result = doctor("--json", env={"EMELEX_HOME": str(home)}, cwd=tmp_path)
    store = by_name(json.loads(result.stdout))["store"]
    assert (store["ok"], store["schema"]) == (False, 99)
    assert f"reads schemas 1 to {SCHEMA_VERSION}" in store["fix"]
    assert result.returncode == 1


def test_doctor_probe_reports_a_crashing_probe(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {
        "EMELEX_HOME": str(tmp_path / "home"),
        "EMELEX_CACHE_DIR": str(cache),
        "EMELEX_LLAMA_PROBE_FAULT": "SIGILL",
    }
    result = doctor("--probe", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 1
    buffers = by_name(json.loads(result.stdout))["buffer_types"]
    assert not buffers["ok"]
    assert "killed by SIGILL" in buffers["summary"]
    assert "EMELEX_LLAMA_EXTRA_BUFFERS=off" in buffers["summary"]
    assert (buffers["extra_buffers"], buffers["source"]) == (False, "probe")
    # The verdict is cached: the next doctor (no --probe) says "off" from the cache.
    again = doctor("--json", env={**env, "EMELEX_LLAMA_PROBE_FAULT": ""}, cwd=tmp_path)
    cached = by_name(json.loads(again.stdout))["buffer_types"]
    assert (cached["ok"], cached["extra_buffers"], cached["source"]) == (True, False, "cache")
    assert "SIGILL" in cached["reason"]


def test_doctor_shows_escapes_in_file_names_instead_of_obeying_them(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".\x1b]0;pwned\x07.emelex-tmp-0123456789ab").write_bytes(b"x")
    result = doctor(
        "--workspace", str(workspace), env={"EMELEX_HOME": str(tmp_path / "h")}, cwd=tmp_path
    )
    assert result.returncode == 1
    assert "\x1b]0;" not in result.stdout and "\\x1b]0;pwned\\x07" in result.stdout
