"""Opt-in persistent XLA compilation cache (host-only helper).

A new bucket shape costs 5-7 s to compile on CPU; with the persistent cache a
fresh process reloads it in about 0.5 s. The CLI and benchmarks call this; the
library never changes jax's configuration on import.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax


def default_cache_dir() -> Path:
    root = os.environ.get("FELIX_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "felix_jax")
    return Path(root) / "xla"


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Turns on jax's persistent compilation cache in ``path`` (default: ~/.cache/felix_jax/xla)."""
    cache = Path(path) if path is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # processes this one spawns (compare/paper_matrix workers) start with jax's defaults: the
    # environment carries the setting to them
    os.environ.update({"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    return cache
