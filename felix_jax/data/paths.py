"""Where felix-jax finds its data and keeps its caches (docs/file-formats.md, "Where data comes from").

No machine path is hard-coded. The data folder is an explicit argument, else the **data home**:
``$FELIX_JAX_DATA`` when set, else ``data/`` in the user cache folder (``$FELIX_JAX_CACHE``, else the
platform's user cache, e.g. ``~/.cache/felix_jax``), which is where ``felix-jax data fetch`` puts what
it downloads. The decoded-array caches live in the cache folder itself.

A data folder is laid out like this (any subset may be present)::

    <data_dir>/
      cifar10/cifar-10-binary.tar.gz             # the canonical archive (felix-jax data fetch cifar10)
      cifar10/cifar10_jpeg_bytes.npz             # an offline JPEG copy (load_cifar10_shared)
      speech_commands/speech_commands_v0.02_test.npz   # (felix-jax data fetch speech_commands)
      traces/felix_reference_300clients.npz, traces/flash_*.json   # optional: shipped in the package
"""

from __future__ import annotations

import os
from pathlib import Path

# One error type for every unreadable data or trace file (a ValueError naming the file).
from ..traces.data_paths import (READ_ERRORS, DataFileError, DataNotFoundError, atomic_file,  # noqa: F401
                                 data_home, fetch_hint, one_level_off_hint, open_npz, reading, user_cache_root)

DATA_ENV = "FELIX_JAX_DATA"
CACHE_ENV = "FELIX_JAX_CACHE"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data folder: ``data_dir`` if given, else the data home (``$FELIX_JAX_DATA``, else the user
    cache's ``data/``, which need not exist yet: a file looked up in it is then reported missing with
    the command that fetches it).

    Raises:
      FileNotFoundError: ``data_dir`` or ``$FELIX_JAX_DATA`` names no folder.
    """
    if data_dir is None:
        path, source = data_home()
        if source != DATA_ENV:
            return path
        data_dir = os.environ[DATA_ENV]
    else:
        source = "argument data_dir"
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        said = f"{DATA_ENV}={data_dir}" if source == DATA_ENV else f"data_dir={str(data_dir)!r}"
        raise DataNotFoundError(f"Data folder {str(path)!r} (from {source}) does not exist or is not a folder.",
                                cli_message=f"{said}: no such folder (set {DATA_ENV} to the data folder, or "
                                            f"unset it to use the data home in the user cache)")
    return path


def data_file(relative: str, data_dir: str | os.PathLike | None = None) -> Path:
    """``<data folder>/<relative>``, with a clear error if the file is missing (naming the command that
    fetches it, where there is one)."""
    root = resolve_data_dir(data_dir)
    path = root / relative
    if not path.is_file():
        setting = None if data_dir is None else "data_dir"
        hint = one_level_off_hint(root, relative, setting) if root.is_dir() else None
        from_env = data_dir is None and bool(os.environ.get(DATA_ENV))
        origin = (f"data folder {str(root)!r}" + (f", from {DATA_ENV}" if from_env else "")
                  if data_dir is not None or from_env else f"the data home {str(root)!r}")
        fetch = fetch_hint(relative)
        get = f"get it with `{fetch}`" if fetch else None
        raise DataNotFoundError(
            f"Expected data file {str(path)!r} is missing ({origin}; "
            + (hint or "; ".join(filter(None, (get, f"or set {DATA_ENV} or data_dir to a folder that contains "
                                                     f"{relative!r}")))) + ").",
            cli_message=f"{path} is missing ({origin}); "
                        + (hint or (f"{get} (or set {DATA_ENV} to a folder that holds {relative})" if get else
                                    f"set {DATA_ENV} to a folder that holds {relative}")))
    return path


def resolve_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder (created if needed): argument, else ``$FELIX_JAX_CACHE``,
    else the platform's user cache (e.g. ``~/.cache/felix_jax``)."""
    if cache_dir is None:
        cache_dir = user_cache_root()
    from ..compile_cache import usable_cache_dir

    return usable_cache_dir(Path(cache_dir).expanduser(), "the data cache")
