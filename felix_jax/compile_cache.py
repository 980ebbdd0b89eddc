"""Opt-in persistent XLA compilation cache (host-only helper).

A new bucket shape costs 5-7 s to compile on CPU; with the persistent cache a
fresh process reloads it in about 0.5 s. The CLI and benchmarks call this; the
library never changes jax's configuration on import.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import jax


def default_cache_dir() -> Path:
    from .traces.data_paths import user_cache_root

    return user_cache_root() / "xla"


def usable_cache_dir(path: Path, what: str) -> Path:
    """Creates the cache folder ``path`` if needed; an OSError naming it (and ``FELIX_JAX_CACHE``, where
    cache folders come from) when it cannot be one: a file in the way, no permission."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, f"is a file, not a folder: {what} needs a folder (set "
                                 "FELIX_JAX_CACHE to another one)", str(path)) from None
    except OSError as e:
        raise OSError(e.errno, f"cannot be created for {what} ({e.strerror or e}; set FELIX_JAX_CACHE to "
                      "another folder)", str(path)) from None
    return path


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Turns on jax's persistent compilation cache in ``path`` (default: ~/.cache/felix_jax/xla)."""
    cache = Path(path) if path is not None else default_cache_dir()
    usable_cache_dir(cache, "the XLA compilation cache")
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # processes this one spawns (compare/paper_matrix workers) start with jax's defaults: the
    # environment carries the setting to them
    os.environ.update({"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    return cache
