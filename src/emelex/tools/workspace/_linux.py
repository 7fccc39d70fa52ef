"""Linux ``renameat2(2)`` through ctypes (the standard library has no binding).

``RENAME_EXCHANGE`` swaps two names atomically; ``RENAME_NOREPLACE`` refuses to replace
an existing name. Both are relative to directory descriptors, so no path is re-resolved.
The glibc wrapper is used when present (glibc >= 2.28), else the raw system call.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import lru_cache

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

_SYSCALL_NUMBERS = {"x86_64": 316, "aarch64": 276, "riscv64": 276, "i686": 353, "i386": 353}

_Rename = Callable[[int, bytes, int, bytes, int], int]


@lru_cache(maxsize=1)
def _binding() -> _Rename:
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "renameat2"):
        function = libc.renameat2
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        function.argtypes.append(ctypes.c_uint)
        function.restype = ctypes.c_int
        return function
    number = _SYSCALL_NUMBERS.get(os.uname().machine)
    if number is None:
        raise OSError(38, "renameat2 is not available on this platform")  # ENOSYS
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def raw(old_dir: int, old: bytes, new_dir: int, new: bytes, flags: int) -> int:
        return int(
            syscall(
                ctypes.c_long(number),
                ctypes.c_int(old_dir),
                ctypes.c_char_p(old),
                ctypes.c_int(new_dir),
                ctypes.c_char_p(new),
                ctypes.c_uint(flags),
            )
        )

    return raw


def renameat2(old_dir: int, old: str, new_dir: int, new: str, flags: int) -> None:
    """Rename ``old`` (below ``old_dir``) to ``new`` (below ``new_dir``) with ``flags``.

    Raises ``OSError`` with the system call's errno on failure (``EINVAL`` when the
    filesystem does not support the flag, ``EEXIST`` for ``RENAME_NOREPLACE`` conflicts,
    ``ENOENT`` when a name is missing for ``RENAME_EXCHANGE``).
    """
    result = _binding()(old_dir, os.fsencode(old), new_dir, os.fsencode(new), flags)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), old, None, new)
