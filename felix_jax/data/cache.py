"""A small on-disk cache of derived numpy arrays (decoded images, audio features).

An entry is one uncompressed ``.npz`` in the cache folder, named
``<name>-<key>.npz`` where ``key`` hashes the source file's absolute path, size
and modification time plus the parameters that produced the arrays and a format
version. Changing the source file or any parameter therefore misses the cache;
stale entries are simply never read again (delete the folder to reclaim space).
Entries are written to a temporary file and renamed into place, so an interrupted
build never leaves a half-written entry behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .paths import READ_ERRORS, atomic_file, resolve_cache_dir


def source_fingerprint(path: str | os.PathLike) -> dict:
    """Identity of a source file for cache keys: absolute path, size, mtime."""
    path = Path(path).resolve()
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def cache_path(name: str, key_parts: Mapping, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the entry for ``name`` and ``key_parts`` (JSON-serialisable) lives."""
    blob = json.dumps(key_parts, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:16]
    return resolve_cache_dir(cache_dir) / f"{name}-{digest}.npz"


def cached_arrays(
    name: str,
    key_parts: Mapping,
    build: Callable[[], Mapping[str, np.ndarray]],
    *,
    enabled: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, np.ndarray]:
    """Return ``build()``'s arrays, reading them from the cache when present.

    With ``enabled=False`` the cache is neither read nor written.
    A corrupt entry is rebuilt (and overwritten), with a warning naming it.
    """
    if not enabled:
        return dict(build())
    path = cache_path(name, key_parts, cache_dir)
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except READ_ERRORS as e:  # corrupt or truncated entry: the source is still there, so rebuild it
            warnings.warn(f"{path}: unreadable cache entry ({type(e).__name__}: {e}); rebuilding it",
                          RuntimeWarning, stacklevel=2)
    arrays = dict(build())
    with atomic_file(path, suffix=".tmp") as f:
        np.savez(f, **arrays)
    return arrays
