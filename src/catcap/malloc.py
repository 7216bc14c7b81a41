"""How catcap's processes ask glibc's malloc to keep freed memory for reuse (Linux).

A tensor of more than glibc's mmap threshold (128 KB, raised on the fly up to 32 MB) gets
pages of its own from the kernel, which zero-fills each page the first time it is written, and
gives them back when the tensor is freed; freed heap memory above the trim threshold goes back
too. Decoding on a CPU allocates tensors of megabytes every step (the vocabulary's scores, beam
search's gathers, CACA's history memory), so with the defaults a good part of its time is page
faults on fresh pages. At paper size, one thread, M2 + per-level CACA's beam-5 decode took
2.26 s with glibc's defaults and 2.09 s with this setting, M2's 1.62 s and 1.58 s (two runs back
to back, benchmarks/results/m2.md).

:func:`keep_freed_memory` sets both thresholds to 1 GiB with ``mallopt``, so that memory once
allocated is reused by later tensors instead of being returned and faulted in again. The cost:
the process keeps its peak memory (its resident size does not shrink after a large batch).
``catcap``'s commands call it at start; ``CATCAP_MALLOC=system`` (the environment variable)
keeps glibc's defaults, as does any C library other than glibc. Importing catcap as a library
changes nothing: call it yourself in a long decoding process if the trade suits you.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

ENV_VAR = "CATCAP_MALLOC"
CHOICES = ("catcap", "system")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
THRESHOLD = 1 << 30  # 1 GiB: tensors below it come from the heap, and freed heap memory stays


def keep_freed_memory(choice: str | None = None) -> bool:
    """Apply ``choice`` (default: ``$CATCAP_MALLOC``, else ``"catcap"``): ``"catcap"`` raises
    glibc's mmap and trim thresholds (see module doc), ``"system"`` leaves them. Returns whether
    the thresholds were raised (False on other C libraries)."""
    choice = choice or os.environ.get(ENV_VAR) or "catcap"
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}, got {choice!r} "
                         f"(unset it, or set {ENV_VAR}=system to keep the C library's malloc settings)")
    if choice == "system":
        return False
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD))


def _glibc():
    """The process's glibc, or None (macOS, musl, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except (OSError, TypeError):
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc
