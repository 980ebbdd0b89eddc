"""Locating the shared data folder (docs/file-formats.md) without hard-coded paths.

The data folder is laid out like the project's shared ``data/`` directory, e.g.
``<folder>/traces/felix_reference_300clients.npz``. It is found from an explicit
``path`` argument, else from the environment variable ``FELIX_JAX_DATA``.

A file that is there but cannot be read as what it should be (truncated, corrupt,
missing arrays or fields) raises :class:`DataFileError` naming the file; every
trace and data loader funnels its raw reads through :func:`reading`.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

DATA_ENV_VAR = "FELIX_JAX_DATA"


def resolve_data_file(relative: str, path: str | os.PathLike | None = None) -> Path:
    """Path of ``relative`` (e.g. ``"traces/flash_speed_distri.json"``).

    ``path`` may be the file itself, a data folder (``<path>/<relative>``) or the
    folder holding the file (``<path>/<basename>``). Without ``path`` the folder
    named by ``$FELIX_JAX_DATA`` is used. Raises :class:`DataNotFoundError` (a
    FileNotFoundError) saying how to point at the data, and naming the folder meant when the
    one given is one level too high or too deep.
    """
    rel = Path(relative)
    if path is not None:
        roots, origin, setting = [Path(path)], f"path={str(path)!r}", "path"
        if roots[0].is_file():
            return roots[0]
    elif os.environ.get(DATA_ENV_VAR):
        roots, origin, setting = [Path(os.environ[DATA_ENV_VAR])], f"{DATA_ENV_VAR}={os.environ[DATA_ENV_VAR]}", None
    else:
        raise DataNotFoundError(
            f"cannot find {relative}: pass path= or set the environment variable "
            f"{DATA_ENV_VAR} to a data folder laid out like the shared data "
            f"(${DATA_ENV_VAR}/{relative})",
            cli_message=f"cannot find {relative}: set {DATA_ENV_VAR} to a data folder laid out like the shared data "
                        f"(export {DATA_ENV_VAR}=/path/to/data, holding {relative})",
        )
    for root in roots:
        for candidate in (root / rel, root / rel.name):
            if candidate.is_file():
                return candidate
    looked = f"cannot find {relative} under {origin} (looked for <folder>/{relative} and <folder>/{rel.name})"
    hint = one_level_off_hint(roots[0], relative, setting)
    raise DataNotFoundError(
        f"{looked}; " + (hint or f"set {DATA_ENV_VAR} or pass path= pointing at the data folder"),
        cli_message=f"{looked}; " + (hint or f"set {DATA_ENV_VAR} to the data folder that holds {relative}"),
    )


class DataNotFoundError(FileNotFoundError):
    """A data file or folder that is not where felix-jax looked. ``str()`` says it in Python's words
    (the ``path=`` / ``data_dir=`` arguments); ``cli_message`` in the command line's (the
    ``FELIX_JAX_DATA`` variable, ``--set``), which ``felix-jax`` prints."""

    def __init__(self, message: str, cli_message: str | None = None):
        super().__init__(message)
        self.cli_message = cli_message or message


def one_level_off(root: Path, relative: str) -> Path | None:
    """The data folder ``root`` was probably meant to be when ``root/relative`` is missing: a folder
    directly inside it that holds ``relative`` (``root`` one level too high, e.g. the folder above
    ``data/``), or its parent when that holds it (one level too deep, e.g. ``data/cifar10``)."""
    rel = Path(relative)
    try:
        if (root.parent / rel).is_file() and root.parent != root:
            return root.parent
        children = sorted(p for p in root.iterdir() if p.is_dir())[:200]  # a bounded look, never a walk
    except OSError:
        return None
    return next((child for child in children if (child / rel).is_file()), None)


def one_level_off_hint(root: Path, relative: str, setting: str | None = None) -> str | None:
    """``"FELIX_JAX_DATA=/x is one level too high: /x/data holds ...; set FELIX_JAX_DATA=/x/data"``
    (``setting``: the Python argument it came from, ``path`` or ``data_dir``; None: the variable),
    or None when neither the folder above nor one inside holds ``relative``."""
    meant = one_level_off(root, relative)
    if meant is None:
        return None
    how = "high" if meant.parent == root else "deep"
    name = setting or DATA_ENV_VAR
    return (f"{name}={root} is one level too {how}: {meant} holds {relative}; "
            f"{'pass' if setting else 'set'} {name}={meant}")


class DataFileError(ValueError):
    """A data or trace file exists but is not what it should be; the message names the file.

    ``path`` is the file, ``problem`` what is wrong with it (including what was expected).
    """

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


# What reading a damaged file raises: zip and gzip damage, numpy's format checks,
# missing archive members or fields (KeyError), JSON/CSV/pickle syntax, short reads,
# a structure of the wrong kind (TypeError: a number where a record should be), a number
# too large for its type (OverflowError), nesting too deep to parse (RecursionError), and a
# header claiming more memory than there is (MemoryError: numpy allocates what the header says).
READ_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error,
               tarfile.TarError, pickle.UnpicklingError, csv.Error, OverflowError, RecursionError, MemoryError)


@contextlib.contextmanager
def reading(path: str | os.PathLike, expected: str) -> Iterator[None]:
    """Turns a raw read error inside the block into one :class:`DataFileError` naming ``path``.

    ``expected`` says what the file should be (``"a numpy .npz archive with arrays
    x, y"``). A missing file stays a ``FileNotFoundError`` (its message names the
    path); a :class:`DataFileError` raised inside passes through unchanged.
    """
    try:
        yield
    except (DataFileError, FileNotFoundError):
        raise
    except READ_ERRORS as e:
        detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise DataFileError(path, f"cannot read it as {expected} ({detail})") from e


def open_npz(path: str | os.PathLike):
    """``np.load(path, allow_pickle=False)`` that must give an ``.npz`` archive (use inside :func:`reading`).

    Every array's header is checked against the bytes the archive holds for it before anything is
    loaded: numpy allocates what a header claims, so a header claiming a huge shape would otherwise
    allocate terabytes (or be killed trying) before the short read is noticed."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x93NUMPY"):
        raise ValueError("a single .npy array, not an .npz archive")
    if not magic.startswith(b"PK"):  # otherwise numpy guesses "pickled data", which misleads
        raise ValueError("the file does not start like an .npz (zip) archive")
    _check_claimed_sizes(path)
    return np.load(path, allow_pickle=False)


def _check_claimed_sizes(path: str | os.PathLike) -> None:
    """Refuses (ValueError naming the array) an ``.npy`` member whose header claims more data than the
    member holds; object arrays and unreadable headers are left to ``np.load`` to refuse."""
    from numpy.lib import format as npy

    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with z.open(info) as f:
                try:
                    version = npy.read_magic(f)
                    read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
                    if read is None:
                        continue
                    shape, _, dtype = read(f)
                except (ValueError, EOFError, OSError):
                    continue
                if dtype.hasobject:
                    continue
                claimed = math.prod(shape) * dtype.itemsize
                held = info.file_size - f.tell()
                if claimed > held:
                    raise ValueError(f"array {info.filename[:-4]} claims shape {tuple(shape)} of {dtype} "
                                     f"({claimed:,} bytes) but the archive holds {max(held, 0):,} bytes for it")
