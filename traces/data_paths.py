"""Locating the shared data folder (data/README.md) without hard-coded paths.

The data folder is laid out like the project's shared ``data/`` directory, e.g.
``<folder>/traces/felix_reference_300clients.npz``. It is found from an explicit
``path`` argument, else from the environment variable ``FELIX_JAX_DATA``.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV_VAR = "FELIX_JAX_DATA"


def resolve_data_file(relative: str, path: str | os.PathLike | None = None) -> Path:
    """Path of ``relative`` (e.g. ``"traces/flash_speed_distri.json"``).

    ``path`` may be the file itself, a data folder (``<path>/<relative>``) or the
    folder holding the file (``<path>/<basename>``). Without ``path`` the folder
    named by ``$FELIX_JAX_DATA`` is used. Raises FileNotFoundError saying how to
    point at the data.
    """
    rel = Path(relative)
    if path is not None:
        roots, origin = [Path(path)], f"path={str(path)!r}"
        if roots[0].is_file():
            return roots[0]
    elif os.environ.get(DATA_ENV_VAR):
        roots, origin = [Path(os.environ[DATA_ENV_VAR])], f"${DATA_ENV_VAR}={os.environ[DATA_ENV_VAR]!r}"
    else:
        raise FileNotFoundError(
            f"cannot find {relative}: pass path= or set the environment variable "
            f"{DATA_ENV_VAR} to a data folder laid out like the shared data "
            f"(${DATA_ENV_VAR}/{relative})"
        )
    for root in roots:
        for candidate in (root / rel, root / rel.name):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        f"cannot find {relative} under {origin} (looked for <folder>/{relative} and "
        f"<folder>/{rel.name}); set {DATA_ENV_VAR} or pass path= pointing at the data folder"
    )
