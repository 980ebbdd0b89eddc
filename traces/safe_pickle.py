"""Loading pickled plain data without executing anything (docs/file-formats.md).

FedScale ships its traces as pickles. ``pickle.load`` on an untrusted file can run
arbitrary code, because a pickle may name any importable global (``os.system``)
and call it. ``restricted_pickle_load`` uses an ``Unpickler`` whose ``find_class``
refuses every global: only built-in containers and scalars (dict, list, tuple,
set, str, bytes, int, float, bool, None) can be built, so nothing is imported or
called. A pickle holding numpy objects or any class is rejected too.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any, BinaryIO

from .data_paths import DataFileError


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a global (class, function) or a persistent id: refused, nothing run."""


class UnsafePickleFileError(DataFileError, UnsafePickleError):
    """An :class:`UnsafePickleError` in a file; the message names the file."""


class PlainDataUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global (class, function) reference."""

    def find_class(self, module: str, name: str):  # noqa: D401 (pickle API)
        raise UnsafePickleError(
            f"refusing to load global {module}.{name}: only plain data (dict, list, "
            f"str, numbers) may be unpickled from an untrusted file"
        )

    def persistent_load(self, pid):
        raise UnsafePickleError("refusing persistent ids in an untrusted pickle")


def restricted_pickle_load(source: str | os.PathLike | bytes | BinaryIO) -> Any:
    """Unpickle plain data from a path, bytes or binary file, refusing globals."""
    if isinstance(source, (bytes, bytearray)):
        return PlainDataUnpickler(io.BytesIO(source)).load()
    if hasattr(source, "read"):
        return PlainDataUnpickler(source).load()
    with open(source, "rb") as f:
        try:
            return PlainDataUnpickler(f).load()
        except UnsafePickleError as e:
            raise UnsafePickleFileError(source, str(e)) from None
