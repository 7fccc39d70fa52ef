"""The session store on the command line: ``--store`` as a file or a directory, private
files, and every store failure as one line with exit code 3 (never a traceback), for
every subcommand that takes a store."""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
import trio

from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.store import open_sqlite_store

from .test_cli import EMELEX, run, script

EXIT_CONFIG = 3
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2

#: Every subcommand that takes a store, as (arguments before --store, stdin).
SUBCOMMANDS = {
    "chat": (["chat", "--resume", "s1"], "hi\n"),
    "list": (["sessions", "list"], ""),
    "show": (["sessions", "show", "s1"], ""),
    "export": (["sessions", "export", "s1"], ""),
    "delete": (["sessions", "delete", "s1"], ""),
}


def make_store(path: Path, sessions: tuple[str, ...] = ("s1",)) -> None:
    """A real store written through the library: each session with one whole turn."""

    async def fill() -> None:
        async with open_supervisor("test"), open_sqlite_store(str(path)) as store:
            for session_id in sessions:
                await store.create_session(session_id, '{"version": 1}', {"model": "x"})
                await store.append_turn(
                    session_id, "t1", [Message("user", "hello"), Message("assistant", "hi")]
                )

    trio.run(fill)


def one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> str:
    assert result.returncode == EXIT_CONFIG, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("emelex: ") and needle in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def command(name: str, store: str, tmp_path: Path) -> tuple[list[str], str]:
    arguments, stdin = SUBCOMMANDS[name]
    extra = ["--model", script(tmp_path, [[{"say": "ok"}]])] if name == "chat" else []
    return [*arguments, *extra, "--store", store], stdin


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_missing_store(name: str, tmp_path: Path) -> None:
    if name == "chat":
        # chat creates a missing store file, but not the directories above it.
        missing = str(tmp_path / "no-such-dir" / "s.db")
        arguments, stdin = command(name, missing, tmp_path)
        result = run(*arguments, cwd=tmp_path, stdin=stdin)
        one_line_error(result, f"cannot open store {missing}: No such file or directory")
        return
    missing = str(tmp_path / "nope.db")
    arguments, stdin = command(name, missing, tmp_path)
    one_line_error(run(*arguments, cwd=tmp_path, stdin=stdin), f"no session store at {missing}")
    assert not os.path.exists(missing)  # looking never creates one


def without_root_file_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    capability bounding set, so even root is held to file modes (a chmod 000 file is
    really unreadable, by the kernel's own check). A no-op for an ordinary user."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_unreadable_store(name: str, tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    make_store(store)
    store.chmod(0o000)
    arguments, stdin = command(name, str(store), tmp_path)
    result = subprocess.run(
        [*EMELEX, *arguments],
        cwd=tmp_path,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=without_root_file_override,
    )
    one_line_error(result, f"cannot open store {store}: Permission denied")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_store_under_a_regular_file(name: str, tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a directory")
    store = str(tmp_path / "plain" / "sessions.db")
    arguments, stdin = command(name, store, tmp_path)
    result = run(*arguments, cwd=tmp_path, stdin=stdin)
    if name == "chat":
        one_line_error(result, f"cannot open store {store}: Not a directory")
    else:
        one_line_error(result, f"no session store at {store}")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_garbage_store(name: str, tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    store.write_bytes(os.urandom(4096))
    store.chmod(0o600)
    arguments, stdin = command(name, str(store), tmp_path)
    result = run(*arguments, cwd=tmp_path, stdin=stdin)
    one_line_error(result, f"store {store} is corrupt: file is not a database")


#: Hand edits of a valid store: (SQL, the session it damages, the field named).
EDITS = {
    "config": ("UPDATE sessions SET config='{not json' WHERE id='s1'", "config"),
    "authority": ("UPDATE sessions SET authority='[1, 2]' WHERE id='s1'", "authority"),
    "body": (
        "UPDATE rows SET message='garbage' WHERE session_id='s1' AND source_sequence=2",
        "rows[2,0].message",
    ),
    "turns": ("UPDATE sessions SET turns='many' WHERE id='s1'", "turns"),
    "updated_at": ("UPDATE sessions SET updated_at='yesterday' WHERE id='s1'", "updated_at"),
}
#: What each subcommand reads of a session (delete decodes nothing: it is the repair).
READS = {
    "chat": {"config", "authority", "body", "turns", "updated_at"},
    "show": {"config", "authority", "body", "turns", "updated_at"},
    "export": {"config", "authority", "body", "turns", "updated_at"},
    "list": {"turns", "updated_at"},
    "delete": set(),
}


#: Every edit through ``show``; for the other subcommands, edits they read and one they
#: do not (each field's decoding is covered in tests/store/test_sqlite.py).
COMBINATIONS = [
    *(("show", edit) for edit in sorted(EDITS)),
    ("export", "config"),
    ("export", "body"),
    ("chat", "authority"),
    ("chat", "body"),
    ("list", "turns"),
    ("list", "updated_at"),
    ("list", "config"),
    ("delete", "body"),
]


@pytest.mark.parametrize(("name", "edit"), COMBINATIONS)
def test_hand_edited_store(name: str, edit: str, tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    make_store(store, ("s1", "s2"))
    sql, field = EDITS[edit]
    with sqlite3.connect(store) as db:
        db.execute(sql)
    db.close()
    arguments, stdin = command(name, str(store), tmp_path)
    result = run(*arguments, cwd=tmp_path, stdin=stdin)
    if edit in READS[name]:
        line = one_line_error(result, f"store {store} is corrupt, session s1, field {field}: ")
        assert line.endswith("(emelex sessions delete s1 removes that session)")
    else:
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    if name == "delete":
        # The damaged session can always be removed; the others are untouched.
        listing = run("sessions", "list", "--json", "--store", str(store), cwd=tmp_path)
        assert [json.loads(line)["id"] for line in listing.stdout.splitlines()] == ["s2"]


def test_a_directory_store_holds_sessions_db(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    directory.mkdir(mode=0o700)
    spec = script(tmp_path, [[{"say": "first"}]])
    chat = run("chat", "--model", spec, "--store", str(directory), cwd=tmp_path, stdin="hello\n")
    assert chat.returncode == 0, chat.stderr
    assert sorted(p.name for p in directory.iterdir()) == ["sessions.db"]
    listing = run("sessions", "list", "--json", "--store", str(directory), cwd=tmp_path)
    (session,) = [json.loads(line) for line in listing.stdout.splitlines()]
    for action in ("show", "export", "delete"):
        result = run("sessions", action, session["id"], "--store", str(directory), cwd=tmp_path)
        assert result.returncode == 0, (action, result.stderr)
    # A directory in the place of the store file is one clear line too.
    (directory / "sessions.db").unlink()
    (directory / "sessions.db").mkdir()
    for name in sorted(SUBCOMMANDS):
        arguments, stdin = command(name, str(directory), tmp_path)
        result = run(*arguments, cwd=tmp_path, stdin=stdin)
        one_line_error(result, f"cannot open store {directory / 'sessions.db'}: Is a directory")
    missing = run("sessions", "list", "--store", str(tmp_path / "absent") + "/", cwd=tmp_path)
    one_line_error(missing, "store directory")


def test_default_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "home" / "emelex"
    spec = script(tmp_path, [[{"say": "ok"}]])
    result = subprocess.run(
        [*EMELEX, "chat", "--model", spec],
        cwd=tmp_path,
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EMELEX_HOME": str(home)},
        preexec_fn=lambda: os.umask(0),
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for path in home.iterdir():  # sessions.db, and its -wal/-shm if still there
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # Loosened by hand: every later open says so, once per file, and still works.
    (home / "sessions.db").chmod(0o644)
    home.chmod(0o755)
    listing = run("sessions", "list", cwd=tmp_path, env={"EMELEX_HOME": str(home)})
    assert listing.returncode == 0, listing.stderr
    warnings = [line for line in listing.stderr.splitlines() if "warning" in line]
    assert warnings == [
        f"emelex: warning: store directory {home} is accessible to other users (mode 0755); "
        f"run: chmod 700 {home}",
        f"emelex: warning: store file {home / 'sessions.db'} is accessible to other users "
        f"(mode 0644); run: chmod 600 {home / 'sessions.db'}",
    ]
    assert len(listing.stdout.splitlines()) == 1


def test_nothing_stored_yet(tmp_path: Path) -> None:
    env = {"EMELEX_HOME": str(tmp_path / "fresh")}
    listing = run("sessions", "list", cwd=tmp_path, env=env)
    assert (listing.returncode, listing.stderr) == (0, "no stored sessions\n")
    shown = run("sessions", "show", "abc", cwd=tmp_path, env=env)
    assert (shown.returncode, shown.stderr) == (EXIT_CONFIG, "emelex: no stored session abc\n")
    assert not (tmp_path / "fresh").exists()
