"""Locating data files (docs/file-formats.md, "Where data comes from") without hard-coded paths.

A data folder is laid out like this (any subset may be present)::

    <folder>/cifar10/cifar-10-binary.tar.gz          # the canonical archive (felix-jax data fetch cifar10)
    <folder>/cifar10/cifar10_jpeg_bytes.npz          # or an offline JPEG copy
    <folder>/speech_commands/speech_commands_v0.02_test.npz
    <folder>/traces/felix_reference_300clients.npz, <folder>/traces/flash_*.json

One rule finds every file: an explicit ``path`` argument, else the **data home**, which is
``$FELIX_JAX_DATA`` when set, else ``data/`` in the user cache folder (``$FELIX_JAX_CACHE``, else the
platform's: ``$XDG_CACHE_HOME/felix_jax`` or ``~/.cache/felix_jax`` on Linux,
``~/Library/Caches/felix_jax`` on macOS, ``%LOCALAPPDATA%\\felix_jax\\Cache`` on Windows). ``felix-jax
data fetch`` writes there. The paper's reference traces and the FLASH device files also ship inside
the package (``felix_jax/traces/reference/``, with their NOTICE): a data home without them falls back
to the shipped copies, so ``ref:NAME``, ``mobiperf`` and the ``reference`` and ``flash`` device
profiles need no data folder at all.

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
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

DATA_ENV_VAR = "FELIX_JAX_DATA"
CACHE_ENV_VAR = "FELIX_JAX_CACHE"
# The files shipped inside the package (felix_jax/traces/reference/), by their data-folder path.
SHIPPED_DIR = Path(__file__).resolve().parent / "reference"
SHIPPED_FILES = ("traces/felix_reference_300clients.npz", "traces/flash_benchmark2score.json",
                 "traces/flash_raw_ai_benchmark_list.json", "traces/flash_real2benchmark.json",
                 "traces/flash_speed_distri.json")


def user_cache_root() -> Path:
    """The felix-jax cache folder (not created here): ``$FELIX_JAX_CACHE``, else the platform's user cache
    (``$XDG_CACHE_HOME/felix_jax`` or ``~/.cache/felix_jax`` on Linux, ``~/Library/Caches/felix_jax`` on
    macOS, ``%LOCALAPPDATA%\\felix_jax\\Cache`` on Windows)."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "felix_jax"
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "felix_jax" / "Cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "felix_jax"


def data_home() -> tuple[Path, str]:
    """The data folder used without an explicit path, and where it came from: ``$FELIX_JAX_DATA`` when set
    (``"FELIX_JAX_DATA"``), else ``<cache folder>/data`` (``"the user cache"``). Not created here."""
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        return Path(env).expanduser(), DATA_ENV_VAR
    return user_cache_root() / "data", "the user cache"


def shipped_file(relative: str) -> Path | None:
    """The copy of ``relative`` (e.g. ``traces/felix_reference_300clients.npz``) shipped in the package,
    or None when felix-jax ships no such file."""
    if relative not in SHIPPED_FILES:
        return None
    path = SHIPPED_DIR / Path(relative).name
    return path if path.is_file() else None


def fetch_hint(relative: str) -> str | None:
    """``felix-jax data fetch NAME`` for a data set that command gets, else None."""
    top = Path(relative).parts[0] if Path(relative).parts else ""
    return {"cifar10": "felix-jax data fetch cifar10",
            "speech_commands": "felix-jax data fetch speech_commands"}.get(top)


def resolve_data_file(relative: str, path: str | os.PathLike | None = None) -> Path:
    """Path of ``relative`` (e.g. ``"traces/flash_speed_distri.json"``).

    ``path`` may be the file itself, a data folder (``<path>/<relative>``) or the
    folder holding the file (``<path>/<basename>``); an explicit ``path`` is the only place looked.
    Without it, the data home (:func:`data_home`: ``$FELIX_JAX_DATA``, else the user cache's ``data/``),
    then the copy shipped in the package (the reference traces and FLASH files). Raises
    :class:`DataNotFoundError` (a FileNotFoundError) saying where it looked and how to get the file,
    naming the folder meant when the one given is one level too high or too deep.
    """
    rel = Path(relative)
    if path is not None:
        root, origin, setting = Path(path), f"path={str(path)!r}", "path"
        if root.is_file():
            return root
    else:
        root, source = data_home()
        origin = f"{DATA_ENV_VAR}={os.environ[DATA_ENV_VAR]}" if source == DATA_ENV_VAR else f"the data home {root}"
        setting = None
    for candidate in (root / rel, root / rel.name):
        if candidate.is_file():
            return candidate
    if path is None:
        shipped = shipped_file(relative)
        if shipped is not None:
            return shipped
    looked = f"cannot find {relative} under {origin} (looked for <folder>/{relative} and <folder>/{rel.name})"
    hint = one_level_off_hint(root, relative, setting) if root.is_dir() else None
    fetch = fetch_hint(relative)
    how_py = hint or (f"get it with `{fetch}`, or " if fetch else "") + \
        f"set {DATA_ENV_VAR} or pass path= pointing at the data folder"
    how_cli = hint or (f"get it with `{fetch}`, or " if fetch else "") + \
        f"set {DATA_ENV_VAR} to the data folder that holds {relative}"
    raise DataNotFoundError(f"{looked}; {how_py}", cli_message=f"{looked}; {how_cli}")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ".part") -> Iterator:
    """An open binary file beside ``path``, renamed to ``path`` when the block ends without an error and
    removed otherwise: an interrupted write never leaves a half-written file where a reader would look."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
