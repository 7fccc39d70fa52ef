"""Private by default: the store's files hold whole conversations (tool output, file
contents, sometimes secrets), so they are created for their owner only and checked on
every open."""

from __future__ import annotations

import logging
import os
import stat

logger = logging.getLogger("emelex.store")

PRIVATE_FILE = 0o600
PRIVATE_DIRECTORY = 0o700
#: The database file and the files SQLite keeps beside it.
COMPANIONS = ("", "-wal", "-shm", "-journal")


def create_private_file(path: str) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (whatever the umask: SQLite
    gives its -wal, -shm and -journal files the database file's mode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def make_private_directory(path: str) -> None:
    """Create the directory ``path`` (and its parents) with mode 0700 unless it exists."""
    if os.path.isdir(path):
        return
    os.makedirs(path, mode=PRIVATE_DIRECTORY, exist_ok=True)
    os.chmod(path, PRIVATE_DIRECTORY)  # the umask may have taken bits away


def looser_than_private(path: str) -> list[str]:
    """One sentence per store file at ``path`` (with its -wal, -shm, -journal) that other
    users may read or write. Missing files are skipped."""
    problems = []
    for suffix in COMPANIONS:
        name = path + suffix
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            problems.append(
                f"store file {name} is accessible to other users (mode {mode:04o}); "
                f"run: chmod 600 {name}"
            )
    return problems


def directory_looser_than_private(directory: str) -> str | None:
    """A sentence when the store directory ``directory`` is open to other users."""
    try:
        mode = stat.S_IMODE(os.stat(directory).st_mode)
    except OSError:
        return None
    if mode & 0o077:
        return (
            f"store directory {directory} is accessible to other users (mode {mode:04o}); "
            f"run: chmod 700 {directory}"
        )
    return None


def warn_if_looser(path: str) -> list[str]:
    """Log (as warnings on the ``emelex.store`` logger) and return the sentences of
    :func:`looser_than_private`."""
    problems = looser_than_private(path)
    for problem in problems:
        logger.warning(problem)
    return problems
