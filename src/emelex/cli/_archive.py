"""Reproducible ``.tar.gz`` archives of a directory: the same files give the same bytes."""

from __future__ import annotations

import gzip
import os
import tarfile

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def is_archive_name(path: str) -> bool:
    return path.endswith(ARCHIVE_SUFFIXES)


def archive_top(path: str) -> str:
    """The folder name inside the archive: ``DEST``'s name without its suffix."""
    name = os.path.basename(path)
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] or "package"
    return name


def _info(
    name: str, *, directory: bool, size: int = 0, executable: bool = False
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory or executable else 0o644
    info.size = size
    # Nothing of this machine or this moment: the bytes depend on the files only.
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar_gz(source: str, dest: str, top: str) -> None:
    """Write the regular files and directories under ``source`` to ``dest`` as a gzip
    tar, under the folder ``top``: names sorted, times, owners and the gzip header
    zeroed, modes normalized (0644, or 0755 for directories and executables). ``dest``
    must not exist; it appears whole or not at all."""
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest} already exists")
    partial = f"{dest}.partial-{os.getpid()}"
    try:
        with (
            open(partial, "xb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed,
            tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.addfile(_info(top, directory=True))
            for root, dirs, files in os.walk(source):
                dirs.sort()
                relative = os.path.relpath(root, source)
                prefix = top if relative == "." else f"{top}/{relative.replace(os.sep, '/')}"
                if relative != ".":
                    tar.addfile(_info(prefix, directory=True))
                for name in sorted(files):
                    path = os.path.join(root, name)
                    if os.path.islink(path) or not os.path.isfile(path):
                        continue  # exports hold regular files only
                    with open(path, "rb") as handle:
                        size = os.fstat(handle.fileno()).st_size
                        executable = bool(os.fstat(handle.fileno()).st_mode & 0o111)
                        info = _info(
                            f"{prefix}/{name}", directory=False, size=size, executable=executable
                        )
                        tar.addfile(info, handle)
        os.replace(partial, dest)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
