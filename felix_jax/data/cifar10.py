"""CIFAR-10 loaders: the canonical binary archive, an offline JPEG copy, tfds.

``dataset=cifar10`` (:func:`load_cifar10`) reads whichever of the first two the data folder holds: the
canonical archive ``cifar10/cifar-10-binary.tar.gz`` (what ``felix-jax data fetch cifar10`` downloads:
exact pixels), else the JPEG copy ``cifar10/cifar10_jpeg_bytes.npz``.

All of them return an :class:`~felix_jax.data.dataset.ArrayDataset` with uint8
images ``(N, 32, 32, 3)`` (50,000 train / 10,000 test for the full set), int32
labels in ``[0, 10)``, ``input_scale = 1/255`` and the usual CIFAR-10 per-channel
normalisation ``mean = (0.4914, 0.4822, 0.4465)``, ``std = (0.2470, 0.2435, 0.2616)``.
No loader needs TensorFlow except :func:`load_cifar10_tfds`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .cache import cached_arrays, source_fingerprint
from .dataset import ArrayDataset
from .paths import DataFileError, data_file, open_npz, reading, resolve_data_dir

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)
SHARED_RELPATH = "cifar10/cifar10_jpeg_bytes.npz"
BINARY_RELPATH = "cifar10/cifar-10-binary.tar.gz"
# dataset=cifar10 reads the first of these that the data folder holds
CIFAR10_FILES = (BINARY_RELPATH, SHARED_RELPATH)

_JPEG_CAVEAT = (
    "Decoded from a JPEG copy of CIFAR-10 (quality 75, 4:2:0 chroma): pixels are not "
    "bit-identical to the original binaries; per-channel means match (0.491, 0.482, 0.447) "
    "but the spread is slightly lower, so expect accuracy within a point or two of the original."
)
_CACHE_VERSION = 1
_PARALLEL_MIN_IMAGES = 4096  # below this, decode in-process (worker start-up costs more)


def _make(name, train_x, train_y, test_x, test_y, class_names, description) -> ArrayDataset:
    return ArrayDataset(
        name=name,
        train_x=np.ascontiguousarray(train_x, dtype=np.uint8),
        train_y=np.asarray(train_y, dtype=np.int32),
        test_x=np.ascontiguousarray(test_x, dtype=np.uint8),
        test_y=np.asarray(test_y, dtype=np.int32),
        num_classes=10,
        class_names=tuple(str(c) for c in class_names),
        input_scale=1.0 / 255.0,
        input_mean=CIFAR10_MEAN,
        input_std=CIFAR10_STD,
        description=description,
    )


# ----------------------------------------------------------------------------
# The shared JPEG-bytes copy
# ----------------------------------------------------------------------------

def decode_jpeg_chunk(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Decode images ``data[offsets[i]:offsets[i+1]]`` to a uint8 ``(n, H, W, 3)`` array.

    In-process. Every image must have the same size (32x32 for CIFAR-10).

    Raises:
      ValueError: an image cannot be decoded or has a different size.
    """
    from PIL import Image

    n = len(offsets) - 1
    out = None
    for i in range(n):
        blob = data[offsets[i]:offsets[i + 1]].tobytes()
        try:
            img = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))
        except Exception as e:  # PIL raises several types for bad data
            raise ValueError(f"image {i} is not a decodable image: {e}") from e
        if out is None:
            out = np.empty((n,) + img.shape, np.uint8)
        elif img.shape != out.shape[1:]:
            raise ValueError(f"image {i} has shape {img.shape}, expected {out.shape[1:]}")
        out[i] = img
    return out if out is not None else np.empty((0, 32, 32, 3), np.uint8)


# Worker for parallel decoding, run as `python -c _WORKER_SRC <npz> <start> <stop> <out.npy>`.
# A fresh interpreter importing only numpy and Pillow: unlike multiprocessing's
# "spawn" it never re-imports the caller's __main__ (so scripts need no
# `if __name__ == "__main__"` guard), and unlike "fork" it is safe after JAX has
# started its threads. Mirrors decode_jpeg_chunk; tests check they agree.
_WORKER_SRC = """
import io, sys
import numpy as np
from PIL import Image
src, a, b, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with np.load(src, allow_pickle=False) as z:
    off = z["offsets"][a:b + 1].astype(np.int64)
    data = z["data"]
res = np.empty((b - a, 32, 32, 3), np.uint8)
for i in range(b - a):
    img = np.asarray(Image.open(io.BytesIO(data[off[i]:off[i + 1]].tobytes())).convert("RGB"))
    res[i] = img
np.save(out, res)
"""


def _decode_in_subprocesses(source: Path, n: int, num_workers: int) -> np.ndarray:
    bounds = np.linspace(0, n, num_workers + 1).astype(int)
    with tempfile.TemporaryDirectory(prefix="felix_jax_decode_") as tmp:
        procs = []
        for w, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            out = os.path.join(tmp, f"part{w}.npy")
            cmd = [sys.executable, "-c", _WORKER_SRC, os.fspath(source), str(a), str(b), out]
            procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out))
        errors = []
        for proc, _ in procs:
            _, err = proc.communicate()
            if proc.returncode:
                errors.append(err.decode(errors="replace").strip().splitlines()[-1:] or ["?"])
        if errors:
            raise RuntimeError(f"decode worker failed: {errors[0][0]}")
        return np.concatenate([np.load(out) for _, out in procs])


def decode_jpeg_array(
    data: np.ndarray, offsets: np.ndarray, num_workers: int | None = None, source: str | os.PathLike | None = None
) -> np.ndarray:
    """Decode all images of a JPEG-bytes archive (``data``, ``offsets``).

    With ``source`` (the ``.npz`` the arrays came from) and more than one worker,
    decoding runs in ``num_workers`` fresh Python processes (None: one per usable
    CPU, at most 8, or in-process on fewer than 4 CPUs) that each read ``source`` and decode a contiguous range of 32x32
    images; if a worker fails, everything is decoded in-process instead (with a
    warning). 0 or 1 worker, small inputs or no ``source`` decode in-process.
    """
    n = len(offsets) - 1
    if num_workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        num_workers = min(8, cpus) if cpus >= 4 else 1  # on 2-3 CPUs workers barely help
    if num_workers <= 1 or n < _PARALLEL_MIN_IMAGES or source is None:
        return decode_jpeg_chunk(data, offsets)
    try:
        images = _decode_in_subprocesses(Path(source), n, min(num_workers, n))
        if images.shape[0] == n:
            return images
        raise RuntimeError(f"decode workers returned {images.shape[0]} images, expected {n}")
    except (OSError, RuntimeError, ValueError) as e:
        warnings.warn(f"parallel JPEG decoding failed ({e}); decoding in-process", RuntimeWarning, stacklevel=2)
        return decode_jpeg_chunk(data, offsets)


def _read_jpeg_npz(path: Path, num_workers: int | None) -> dict[str, np.ndarray]:
    with reading(path, "the CIFAR-10 JPEG-bytes archive (npz arrays data, offsets, split, label)"), \
            open_npz(path) as z:
        missing = {"data", "offsets", "split", "label"} - set(z.files)
        if missing:
            raise DataFileError(path, f"not a CIFAR-10 JPEG-bytes archive (missing keys {sorted(missing)})")
        data, offsets = z["data"], z["offsets"].astype(np.int64)
        split, label = z["split"], z["label"].astype(np.int32)
        classes = z["classes"] if "classes" in z.files else np.array(CIFAR10_CLASSES)
    n = len(split)
    if offsets.shape != (n + 1,) or label.shape != (n,) or offsets[-1] > len(data) or np.any(np.diff(offsets) < 0):
        raise DataFileError(path, f"inconsistent archive (offsets {offsets.shape}, split {split.shape}, "
                                  f"label {label.shape})")
    try:
        images = decode_jpeg_array(data, offsets, num_workers, source=path)
    except ValueError as e:
        raise DataFileError(path, str(e)) from e
    train, test = split == 0, split == 1
    return {
        "train_x": images[train], "train_y": label[train],
        "test_x": images[test], "test_y": label[test],
        "classes": np.asarray(classes).astype(str),
    }


def load_cifar10_shared(
    data_dir: str | os.PathLike | None = None,
    cache: bool = True,
    num_workers: int | None = None,
) -> ArrayDataset:
    """CIFAR-10 from the offline JPEG-bytes copy ``<data_dir>/cifar10/cifar10_jpeg_bytes.npz``.

    The archive holds the JPEG bytes of all 60,000 images (keys ``data``,
    ``offsets``, ``split``, ``label``, ``classes``); it is read with
    ``allow_pickle=False`` and decoded with Pillow (about 12 s of one CPU for the
    full set; in parallel worker processes on machines with 4 or more CPUs). The
    decoded arrays are cached in the cache folder (``$FELIX_JAX_CACHE``, default ``~/.cache/felix_jax``), keyed by
    the archive's path, size and mtime, so later loads take a fraction of a
    second. ``cache=False`` neither reads nor writes the cache.

    Caveat: the copy was saved as JPEG quality 75 (4:2:0), so pixels are not
    bit-identical to the original CIFAR-10; per-channel means match
    (0.491, 0.482, 0.447), the spread is slightly lower; expect accuracy within a
    point or two of the original. Report this with any result. Use
    :func:`load_cifar10_binary` or :func:`load_cifar10_tfds` for exact pixels.

    Args:
      data_dir: the data folder; default the data home (``$FELIX_JAX_DATA``, else the user cache's
        ``data/``).
      cache: use the decoded-array cache.
      num_workers: decoding processes (None: one per usable CPU, at most 8;
        in-process on machines with fewer than 4 CPUs).

    Raises:
      FileNotFoundError: no data folder or no archive in it.
      ValueError: the archive is malformed.
    """
    path = data_file(SHARED_RELPATH, data_dir)
    arrays = cached_arrays(
        "cifar10_jpeg",
        {"source": source_fingerprint(path), "version": _CACHE_VERSION},
        lambda: _read_jpeg_npz(path, num_workers),
        enabled=cache,
    )
    return _make(
        "cifar10", arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"],
        arrays["classes"], "CIFAR-10 (offline JPEG copy). " + _JPEG_CAVEAT,
    )


# ----------------------------------------------------------------------------
# The original binary archive
# ----------------------------------------------------------------------------

_RECORD = 1 + 32 * 32 * 3
_TRAIN_BATCHES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_TEST_BATCH = "test_batch.bin"


def parse_cifar10_records(raw: bytes, what: str = "batch") -> tuple[np.ndarray, np.ndarray]:
    """Parse CIFAR-10 binary records (1 label byte + 3072 pixel bytes in R, G, B
    planes of 32x32 each) into ``(images uint8 (n, 32, 32, 3), labels int32 (n,))``."""
    if len(raw) == 0 or len(raw) % _RECORD:
        raise ValueError(f"{what}: {len(raw)} bytes is not a whole number of {_RECORD}-byte CIFAR-10 records")
    rec = np.frombuffer(raw, np.uint8).reshape(-1, _RECORD)
    labels = rec[:, 0].astype(np.int32)
    if labels.max() >= 10:
        raise ValueError(f"{what}: label byte {labels.max()} outside 0..9 (not a CIFAR-10 batch?)")
    images = rec[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _read_binary_members(path: Path) -> dict[str, bytes]:
    wanted = set(_TRAIN_BATCHES) | {_TEST_BATCH, "batches.meta.txt"}
    found: dict[str, bytes] = {}
    if path.is_dir():
        for name in wanted:
            hits = sorted(path.rglob(name))
            if hits:
                found[name] = hits[0].read_bytes()
        return found
    with reading(path, "a readable tar archive of the CIFAR-10 binary batches"), tarfile.open(path, "r:*") as tar:
        for member in tar:
            base = os.path.basename(member.name)
            if member.isfile() and base in wanted and base not in found:
                found[base] = tar.extractfile(member).read()
    return found


def load_cifar10_binary(path: str | os.PathLike | None = None, *, cache: bool = True) -> ArrayDataset:
    """CIFAR-10 from the original ``cifar-10-binary.tar.gz`` (exact pixels).

    The archive (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz) holds
    ``data_batch_1.bin`` .. ``data_batch_5.bin`` and ``test_batch.bin``; each
    record is 1 label byte followed by 3072 pixel bytes (the R, G and B 32x32
    planes). It is parsed with numpy only; no TensorFlow.

    Args:
      path: the ``.tar.gz`` (or ``.tar``), or a folder holding the extracted
        ``.bin`` files; default ``<data folder>/cifar10/cifar-10-binary.tar.gz``.
      cache: keep the parsed arrays in the cache folder (``$FELIX_JAX_CACHE``), keyed by the archive's
        path, size and modification time (an archive is decompressed once).

    Raises:
      FileNotFoundError: the archive does not exist.
      ValueError: the archive is malformed or lacks a batch.
    """
    path = data_file(BINARY_RELPATH) if path is None else Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"CIFAR-10 binary archive {str(path)!r} does not exist")
    if path.is_file():
        arrays = cached_arrays("cifar10_binary", {"source": source_fingerprint(path), "version": _CACHE_VERSION},
                               lambda: _binary_arrays(path), enabled=cache)
    else:
        arrays = _binary_arrays(path)
    return _make("cifar10", arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"],
                 [str(c) for c in arrays["classes"]], "CIFAR-10 (original binary archive, exact pixels).")


def _binary_arrays(path: Path) -> dict[str, np.ndarray]:
    members = _read_binary_members(path)
    missing = [m for m in (*_TRAIN_BATCHES, _TEST_BATCH) if m not in members]
    if missing:
        raise DataFileError(path, f"not a CIFAR-10 binary archive, missing {missing}")
    try:
        train = [parse_cifar10_records(members[m], m) for m in _TRAIN_BATCHES]
        test_x, test_y = parse_cifar10_records(members[_TEST_BATCH], _TEST_BATCH)
    except ValueError as e:
        raise DataFileError(path, str(e)) from e
    classes = CIFAR10_CLASSES
    meta = members.get("batches.meta.txt", b"").decode("utf-8", "replace").split()
    if len(meta) == 10:
        classes = tuple(meta)
    return {"train_x": np.concatenate([x for x, _ in train]), "train_y": np.concatenate([y for _, y in train]),
            "test_x": test_x, "test_y": test_y, "classes": np.array(classes)}


def cifar10_file(data_dir: str | os.PathLike | None = None) -> Path:
    """The file ``dataset=cifar10`` reads: the first of :data:`CIFAR10_FILES` in the data folder (``data_dir``,
    else the data home). Raises DataNotFoundError naming the canonical archive's path and
    ``felix-jax data fetch cifar10``."""
    root = resolve_data_dir(data_dir)
    for relative in CIFAR10_FILES:
        if (root / relative).is_file():
            return root / relative
    return data_file(BINARY_RELPATH, data_dir)  # the error: the canonical archive's path and the fetch


def load_cifar10(data_dir: str | os.PathLike | None = None, *, cache: bool = True) -> ArrayDataset:
    """CIFAR-10 from the data folder: the canonical binary archive when there (exact pixels, what
    ``felix-jax data fetch cifar10`` downloads), else the offline JPEG copy (:func:`load_cifar10_shared`,
    whose caveat its description carries). The decoded arrays are cached either way."""
    path = cifar10_file(data_dir)
    if path.name == Path(BINARY_RELPATH).name:
        return load_cifar10_binary(path, cache=cache)
    return load_cifar10_shared(data_dir, cache=cache)


# ----------------------------------------------------------------------------
# tensorflow-datasets
# ----------------------------------------------------------------------------

def load_cifar10_tfds(data_dir: str | os.PathLike | None = None) -> ArrayDataset:
    """CIFAR-10 through tensorflow-datasets (``tfds.load("cifar10")``), exact pixels.

    For users with network access or an already-prepared tfds folder.
    tensorflow-datasets is imported lazily here. Building (downloading and
    preparing) CIFAR-10 with tfds needs TensorFlow, and tfds 4.9.10 also needs the
    ``importlib_resources`` package; none is a dependency of felix-jax
    (``pip install "felix-jax[tfds]"`` adds all three). Without them this raises an
    ImportError that says so (:func:`~.user.import_tfds`); :func:`load_cifar10_shared`
    and :func:`load_cifar10_binary` need none.

    Args:
      data_dir: the tfds data folder (tfds's own default, ``~/tensorflow_datasets``,
        when None). This is *not* the felix-jax data folder.
    """
    from .user import import_tfds, tfds_failed

    tfds = import_tfds("dataset=cifar10_tfds (offline: dataset=cifar10 or cifar10_binary)")
    kwargs = {} if data_dir is None else {"data_dir": os.fspath(data_dir)}
    try:
        splits, info = tfds.load("cifar10", split=["train", "test"], batch_size=-1,
                                 as_supervised=True, with_info=True, **kwargs)
    except Exception as e:
        raise tfds_failed("dataset=cifar10_tfds", e) from e
    (train_x, train_y), (test_x, test_y) = tfds.as_numpy(splits)
    return _make("cifar10", train_x, train_y, test_x, test_y, info.features["label"].names,
                 "CIFAR-10 (tensorflow-datasets, exact pixels).")
