"""Rebuilding the paper's reference traces from their public source (host-only).

``felix_reference_300clients.npz`` (shipped in ``felix_jax/traces/reference/``, NOTICE beside it) is
derived from the FeLiX authors' 300 trainer configurations, ``trainer_1.json`` ... ``trainer_300.json``
of the public repository dhruvsgarg/flame at commit :data:`FLAME_COMMIT`, directory
:data:`FLAME_TRAINER_DIR` (Apache-2.0). Each file's ``hyperparameters`` hold, for client N (from the
file's name):

* ``avl_events_<trace>`` for the six traces of :data:`TRACE_NAMES`: a Python literal list of
  ``(time_s, state_name)`` pairs. Each becomes rows of ``<trace>_client`` (N), ``<trace>_time_s`` and
  ``<trace>_state`` (``UN_AVL`` 0, ``AVL_EVAL`` 1, ``AVL_TRAIN`` 2), the clients in id order and each
  client's rows sorted by time, rows at one time kept in file order (a stable sort: the last wins);
* ``training_delay_s`` (a string such as ``"4.0"``): ``training_delay_s`` (float32);
* ``trainer_indices_list``: its length is ``num_samples`` (int32), the client's CIFAR-10 samples in
  the paper's Dirichlet(0.1) split.

:func:`build_reference_arrays` does this; :func:`write_reference_npz` writes the archive atomically;
:func:`fetch_trainer_configs` gets the 300 files at the pinned commit (with a network).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np

from .data_paths import DataFileError, SHIPPED_DIR, atomic_file, reading

FLAME_REPOSITORY = "dhruvsgarg/flame"
FLAME_COMMIT = "6ef1133bbf8cfc64589ad56d982523538c4cdad3"
FLAME_TRAINER_DIR = ("lib/python/examples/async_cifar10/trainer/"
                     "config_dir0.1_num300_traceFail_6d_3state_oort")
FLAME_RAW_BASE = f"https://raw.githubusercontent.com/{FLAME_REPOSITORY}/{FLAME_COMMIT}/{FLAME_TRAINER_DIR}"
NUM_TRAINERS = 300
TRACE_NAMES = ("syn_0", "syn_20", "syn_50", "mobiperf_2st", "mobiperf_3st_50", "mobiperf_3st_75")
STATE_CODES = {"UN_AVL": 0, "AVL_EVAL": 1, "AVL_TRAIN": 2}
REFERENCE_FILE_NAME = "felix_reference_300clients.npz"
SHIPPED_REFERENCE = SHIPPED_DIR / REFERENCE_FILE_NAME

# The FLASH files shipped unchanged (NOTICE): name -> (path in PKU-Chengxu/FLASH at FLASH_COMMIT, SHA-256).
FLASH_REPOSITORY = "PKU-Chengxu/FLASH"
FLASH_COMMIT = "70e47eb2a802e1c79e1a9f9f84a4aee818cd15a8"
FLASH_FILES = {
    "flash_benchmark2score.json": ("models/utils/device_util/benchmark2score.json",
                                   "9b77b282048d0d83df781b5464e3870a6356a8151bb7288fbd196f901663d92d"),
    "flash_raw_ai_benchmark_list.json": ("models/utils/device_util/raw_ai_benchmark_list.json",
                                         "267a0e7b69d25906055bfc0916037686457d32de55c8a9ece8f9e295ec7a09b2"),
    "flash_real2benchmark.json": ("models/utils/device_util/real2benchmark.json",
                                  "ea40e8baec1e13a6a356510e47d9dd96cd5e70131d7d4625fc1188f42da2bc24"),
    "flash_speed_distri.json": ("models/speed_distri.json",
                                "63f9e869b34ceb3fb845f755b48018f55941a1b002c02abb21255d9bf5bedea4"),
}

_NAME = re.compile(r"^trainer_(\d+)\.json$")


def trainer_folder(source: str | os.PathLike) -> Path:
    """The folder holding ``trainer_N.json``: ``source`` itself, or ``source/<FLAME_TRAINER_DIR>`` for a flame
    checkout. Raises FileNotFoundError naming both places looked."""
    root = Path(source).expanduser()
    for folder in (root, root / FLAME_TRAINER_DIR):
        if folder.is_dir() and any(_NAME.match(p.name) for p in folder.iterdir()):
            return folder
    raise FileNotFoundError(f"no trainer_N.json files in {root} or in {root / FLAME_TRAINER_DIR} (give the folder "
                            f"of the 300 trainer configurations, or a checkout of {FLAME_REPOSITORY})")


def _read_trainer(path: Path) -> dict:
    with reading(path, "a flame trainer configuration (JSON with hyperparameters.avl_events_*, training_delay_s, "
                       "trainer_indices_list)"):
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        hyper = config["hyperparameters"]
        events = {}
        for name in TRACE_NAMES:
            raw = hyper[f"avl_events_{name}"]
            try:  # a literal, never evaluated code
                pairs = ast.literal_eval(raw) if isinstance(raw, str) else raw
            except SyntaxError as e:
                raise ValueError(f"avl_events_{name} is not a list of (time, state) pairs: {e.msg}") from None
            events[name] = [(int(t), STATE_CODES[str(s)]) for t, s in pairs]
        return {"events": events, "delay": float(hyper["training_delay_s"]),
                "samples": len(hyper["trainer_indices_list"])}


def build_reference_arrays(source: str | os.PathLike) -> dict[str, np.ndarray]:
    """The reference archive's arrays (module docstring), from the trainer folder or a flame checkout."""
    folder = trainer_folder(source)
    files = {int(m.group(1)): folder / p.name for p in folder.iterdir() if (m := _NAME.match(p.name))}
    ids = sorted(files)
    if ids != list(range(1, NUM_TRAINERS + 1)):
        missing = sorted(set(range(1, NUM_TRAINERS + 1)) - set(ids))[:5]
        extra = sorted(set(ids) - set(range(1, NUM_TRAINERS + 1)))[:5]
        raise DataFileError(folder, f"expected trainer_1.json ... trainer_{NUM_TRAINERS}.json"
                                    + (f"; missing e.g. {['trainer_%d.json' % i for i in missing]}" if missing else "")
                                    + (f"; unexpected e.g. {['trainer_%d.json' % i for i in extra]}" if extra else ""))
    trainers = [_read_trainer(files[i]) for i in ids]
    arrays: dict[str, np.ndarray] = {}
    for name in TRACE_NAMES:
        rows = [(cid, t, s) for cid, tr in zip(ids, trainers)
                for t, s in sorted(tr["events"][name], key=lambda e: e[0])]  # stable: file order at one time
        arrays[f"{name}_client"] = np.array([r[0] for r in rows], np.int32)
        arrays[f"{name}_time_s"] = np.array([r[1] for r in rows], np.int64)
        arrays[f"{name}_state"] = np.array([r[2] for r in rows], np.uint8)
    arrays["client"] = np.array(ids, np.int32)
    arrays["training_delay_s"] = np.array([tr["delay"] for tr in trainers], np.float32)
    arrays["num_samples"] = np.array([tr["samples"] for tr in trainers], np.int32)
    arrays["state_names"] = np.array(sorted(STATE_CODES, key=STATE_CODES.get))
    return arrays


def write_reference_npz(arrays: dict[str, np.ndarray], out: str | os.PathLike) -> Path:
    """Writes ``arrays`` as a compressed npz at ``out``, through a temporary file renamed into place (an
    interrupted write never leaves a half-written archive where a loader would read it)."""
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out) as f:
        np.savez_compressed(f, **arrays)
    return out


def differences(arrays: dict[str, np.ndarray], reference: str | os.PathLike = SHIPPED_REFERENCE) -> list[str]:
    """The arrays of ``arrays`` that differ from those of the archive ``reference`` (name, shape, dtype or
    values), and those either lacks; ``[]`` when they are equal array for array."""
    with np.load(reference, allow_pickle=False) as z:
        theirs = {k: z[k] for k in z.files}
    out = [f"{k}: only in {'the build' if k in arrays else reference}" for k in sorted(set(arrays) ^ set(theirs))]
    for k in sorted(set(arrays) & set(theirs)):
        a, b = arrays[k], theirs[k]
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b):
            out.append(f"{k}: {a.dtype}{a.shape} against {b.dtype}{b.shape}"
                       + ("" if a.shape != b.shape else " (values differ)"))
    return out


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_trainer_configs(dest: str | os.PathLike, *, base_url: str = FLAME_RAW_BASE,
                          download: Callable[[str, Path], None]) -> Path:
    """Gets ``trainer_1.json`` ... ``trainer_300.json`` from ``base_url`` (default: the pinned commit of
    dhruvsgarg/flame) into ``dest`` with ``download(url, path)``; files already there are kept (a cut
    fetch resumes). Returns ``dest``."""
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    for i in range(1, NUM_TRAINERS + 1):
        target = dest / f"trainer_{i}.json"
        if not target.is_file():
            download(f"{base_url.rstrip('/')}/trainer_{i}.json", target)
    return dest
