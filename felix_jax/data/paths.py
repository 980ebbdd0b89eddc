"""Where felix-jax finds its offline data and keeps its caches.

No machine path is hard-coded: the data folder comes from an explicit argument or
the ``FELIX_JAX_DATA`` environment variable, and the cache folder from
``FELIX_JAX_CACHE`` (default ``~/.cache/felix_jax``).

A data folder is laid out like this (any subset may be present)::

    <data_dir>/
      cifar10/cifar10_jpeg_bytes.npz             # load_cifar10_shared
      cifar10/cifar-10-binary.tar.gz             # load_cifar10_binary (optional)
      speech_commands/speech_commands_v0.02_test.npz
      traces/felix_reference_300clients.npz, traces/flash_*.json
"""

from __future__ import annotations

import os
from pathlib import Path

# One error type for every unreadable data or trace file (a ValueError naming the file).
from ..traces.data_paths import (READ_ERRORS, DataFileError, DataNotFoundError, one_level_off_hint,  # noqa: F401
                                 open_npz, reading)

DATA_ENV = "FELIX_JAX_DATA"
CACHE_ENV = "FELIX_JAX_CACHE"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data folder: ``data_dir`` if given, else ``$FELIX_JAX_DATA``.

    Raises:
      FileNotFoundError: neither is set, or the folder does not exist.
    """
    source = "argument data_dir"
    layout = ("a folder laid out like <dir>/cifar10/cifar10_jpeg_bytes.npz, "
              "<dir>/speech_commands/speech_commands_v0.02_test.npz, <dir>/traces/...")
    if data_dir is None:
        env = os.environ.get(DATA_ENV)
        if not env:
            raise DataNotFoundError(
                f"No data folder given. Pass data_dir=... or set the environment variable {DATA_ENV} to "
                f"{layout} (e.g. `export FELIX_JAX_DATA=/path/to/shared/data`). "
                "load_digits_embedded() needs no data folder.",
                cli_message=f"no data folder: set {DATA_ENV} to {layout} (export {DATA_ENV}=/path/to/data); "
                            "the embedded digits (--set dataset=digits, every preset but cifar10-* and speech-*) "
                            "need none",
            )
        data_dir, source = env, DATA_ENV
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        said = f"{DATA_ENV}={data_dir}" if source == DATA_ENV else f"data_dir={str(data_dir)!r}"
        raise DataNotFoundError(f"Data folder {str(path)!r} (from {source}) does not exist or is not a folder.",
                                cli_message=f"{said}: no such folder (set {DATA_ENV} to the data folder)")
    return path


def data_file(relative: str, data_dir: str | os.PathLike | None = None) -> Path:
    """``<data folder>/<relative>``, with a clear error if the file is missing."""
    root = resolve_data_dir(data_dir)
    path = root / relative
    if not path.is_file():
        setting = None if data_dir is None else "data_dir"
        hint = one_level_off_hint(root, relative, setting)
        origin = f"data folder {str(root)!r}" + (f", from {DATA_ENV}" if setting is None else "")
        raise DataNotFoundError(
            f"Expected data file {str(path)!r} is missing ({origin}; "
            + (hint or f"set {DATA_ENV} or data_dir to a folder that contains {relative!r}") + ").",
            cli_message=f"{path} is missing ({origin}); "
                        + (hint or f"set {DATA_ENV} to a folder that holds {relative}"))
    return path


def resolve_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder (created if needed): argument, else ``$FELIX_JAX_CACHE``,
    else ``~/.cache/felix_jax``."""
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "felix_jax"
    from ..compile_cache import usable_cache_dir

    return usable_cache_dir(Path(cache_dir).expanduser(), "the data cache")
