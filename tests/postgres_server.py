"""A real PostgreSQL server for the tests: initdb into a temporary directory, listen on a
Unix socket only, stop (and remove the directory) at the end.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user
(Debian's package creates it). Binaries come from PATH or /usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

#: Set (CI does) to make a missing server a test failure instead of a skip.
REQUIRE_ENV = "EMELEX_REQUIRE_POSTGRES"


class PostgresUnavailable(Exception):
    """No PostgreSQL binaries (or no unprivileged user to run them as)."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not candidates:
        raise PostgresUnavailable(f"no {name} on PATH or in /usr/lib/postgresql/*/bin")
    return candidates[-1]


class PostgresServer:
    """One running server; :meth:`create_database` hands out fresh databases."""

    def __init__(self, root: Path, socket_dir: Path, runas: list[str]) -> None:
        self.root = root
        self.socket_dir = socket_dir
        self._runas = runas

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} user=postgres dbname={dbname}"

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        done = subprocess.run(
            [
                *(_binary("psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"),
                *("-d", self.dsn(dbname), "-c", sql),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    def create_database(self) -> str:
        """A new empty database; returns its DSN."""
        name = "t_" + uuid.uuid4().hex[:16]
        self.psql(f"CREATE DATABASE {name}")
        return self.dsn(name)


def _run(command: list[str], runas: list[str]) -> None:
    done = subprocess.run([*runas, *command], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway server (raises :class:`PostgresUnavailable` without binaries)."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    runas: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable("running as root and there is no postgres user") from None
        runas = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="emelex-pg-"))
    try:
        socket_dir = root / "s"
        socket_dir.mkdir()
        if owner is not None:
            for path in (root, socket_dir):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        data = root / "data"
        _run(
            [
                *(initdb, "-D", str(data), "-A", "trust", "-U", "postgres"),
                *("-E", "UTF8", "--no-locale", "--no-sync"),
            ],
            runas,
        )
        options = (
            f"-k {socket_dir} -h '' -c fsync=off -c full_page_writes=off"
            " -c max_connections=300 -c shared_buffers=32MB"
        )
        _run(
            [
                *(pg_ctl, "-D", str(data), "-l", str(root / "log")),
                *("-o", options, "-w", "-t", "60", "start"),
            ],
            runas,
        )
        try:
            yield PostgresServer(root, socket_dir, runas)
        finally:
            _run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], runas)
    finally:
        shutil.rmtree(root, ignore_errors=True)
