"""Your own data: a plain NPZ of arrays, or any tensorflow-datasets image/label set.

``dataset=my_data.npz`` reads::

    train_x  (N, ...)  uint8 images (scaled by 1/255) or float inputs
    train_y  (N,)      integer labels 0..C-1, every class present (or floats holding whole numbers)
    test_x   (M, ...)  as train_x
    test_y   (M,)      labels among the training classes
    train_client (N,)  optional: each training sample's client (writer, speaker, user id);
                       ``partition=natural`` then makes one client per id
    input_mean, input_std (C,)  optional per-channel normalisation; computed from the
                       training inputs when absent
    class_names (C,)   optional strings; they set C (classes may then lack training samples)

Inputs must be finite, a given ``input_std`` finite and > 0; a bad array is refused
naming it (:class:`DataFileError`).

Per-user data (TFF / FedScale style client ids, pfl's ``from_slices``) is this
format: concatenate the users' samples and give their ids in ``train_client``.

``dataset=tfds:NAME`` loads a tensorflow-datasets image classification set
(``as_supervised``: an image and a label); ``TFDS_DATA_DIR`` (tfds's own variable)
or ``~/tensorflow_datasets`` is where tfds looks, so an offline, already prepared
copy works without a network. It needs the ``tfds`` extra (tensorflow-datasets,
TensorFlow and ``importlib_resources``, which tfds 4.9's loaders import):
``pip install "felix-jax[tfds]"``; without it, and when tfds cannot load the set (no
network, an unknown name), the error is one line naming the data set.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from ..options import OptionError
from .dataset import ArrayDataset
from .paths import DataFileError, open_npz, reading

# the packages the tfds extra installs (pyproject.toml), by module name: what a tfds loader imports
TFDS_PACKAGES = {"tensorflow_datasets": "tensorflow-datasets", "tensorflow": "TensorFlow",
                 "importlib_resources": "importlib_resources"}
TFDS_INSTALL = 'pip install "felix-jax[tfds]" (from a checkout: pip install -e ".[tfds]")'


class MissingExtraError(OptionError, ImportError):
    """A data set whose loader needs packages that an extra of felix-jax installs: one line naming
    the data set, what is missing and the extra."""


def import_tfds(what: str):
    """``tensorflow_datasets``, once every package of the tfds extra can be imported; else a
    :class:`MissingExtraError` naming ``what`` (the data set), the missing packages and the extra."""
    missing = [name for module, name in TFDS_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if not missing:
        try:
            import tensorflow_datasets as tfds
            return tfds
        except ImportError as e:  # installed but broken (a dependency of theirs missing)
            missing = [e.name or str(e)]
    raise MissingExtraError(f"{what} needs the tfds extra (tensorflow-datasets, TensorFlow and importlib_resources; "
                            f"missing here: {', '.join(missing)}): {TFDS_INSTALL}")


def tfds_failed(what: str, e: Exception) -> OptionError:
    """What tensorflow-datasets raised while loading ``what`` (no network, an unknown name...), in one line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return OptionError(f"{what}: tensorflow-datasets could not load it ({type(e).__name__}: {first})")

_REQUIRED = ("train_x", "train_y", "test_x", "test_y")
_OPTIONAL = ("train_client", "input_mean", "input_std", "class_names")


def input_statistics(x: np.ndarray, scale: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (last axis) mean and std of ``x * scale``, computed in float64 chunks."""
    flat = np.asarray(x).reshape(-1, x.shape[-1] if x.ndim > 1 else 1)
    total = np.zeros(flat.shape[1])
    sq = np.zeros(flat.shape[1])
    for start in range(0, flat.shape[0], 1 << 20):
        chunk = flat[start:start + (1 << 20)].astype(np.float64) * scale
        total += chunk.sum(0)
        sq += (chunk ** 2).sum(0)
    n = max(flat.shape[0], 1)
    mean = total / n
    std = np.sqrt(np.maximum(sq / n - mean ** 2, 0.0))
    return tuple(float(m) for m in mean), tuple(float(s) if s > 0 else 1.0 for s in std)


def _labels(name: str, y) -> np.ndarray:
    """``y`` as int64 labels: integers (or floats holding exact integers), 1-D, >= 0; else a
    ValueError naming the array."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per sample), got shape {y.shape}")
    if y.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold integer class labels, got dtype {y.dtype}")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name} must hold integer class labels; {int(bad.sum())} of its {y.size} values "
                             f"are not whole numbers (first: {y[i].item()!r} at index {i})")
    if y.size and y.min() < 0:
        i = int(np.argmin(y))
        raise ValueError(f"{name} holds a negative label ({y[i].item()!r} at index {i}); labels are 0..C-1")
    if y.size and y.max() >= np.iinfo(np.int32).max:
        raise ValueError(f"{name} holds label {y.max().item()!r}, too large for a class index")
    return y.astype(np.int64)


def _check_finite(name: str, x: np.ndarray) -> None:
    """A float input array must hold only finite values (NaN / inf poison training)."""
    if x.dtype.kind != "f":
        return
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    for start in range(0, flat.shape[0], 1 << 14):  # bounded temporaries on large arrays
        bad = ~np.isfinite(flat[start:start + (1 << 14)])
        if bad.any():
            rows = np.flatnonzero(bad.any(axis=1)) + start
            raise ValueError(f"{name} holds NaN or inf values (first in sample {int(rows[0])}); inputs must be "
                             "finite numbers")


def _check_stats(name: str, values, channels: int, positive: bool) -> tuple[float, ...]:
    arr = np.ravel(np.asarray(values, dtype=np.float64)) if np.asarray(values).dtype.kind in "biuf" else None
    if arr is None:
        raise ValueError(f"{name} must hold numbers, got dtype {np.asarray(values).dtype}")
    if arr.size not in (1, channels):
        raise ValueError(f"{name} has {arr.size} values; expected 1 or one per input channel ({channels})")
    if not np.all(np.isfinite(arr)) or (positive and np.any(arr <= 0)):
        what = "finite and > 0" if positive else "finite"
        raise ValueError(f"{name} must be {what}, got {arr.tolist()}")
    return tuple(float(v) for v in arr)


def make_user_dataset(name: str, train_x, train_y, test_x, test_y, *, train_client=None, input_mean=None,
                      input_std=None, class_names=None, description: str = "") -> ArrayDataset:
    """An :class:`ArrayDataset` from arrays; normalisation from the training inputs unless given.

    Refused with a ValueError naming the array at fault: labels that are not whole numbers
    >= 0; training labels that skip classes (the classes are 0..C-1, C the number of
    distinct training labels, or ``len(class_names)`` when given); test labels outside
    the training classes; NaN or inf inputs; an ``input_std`` that is not finite and
    > 0; training inputs that are all the same (no spread to normalise by).
    """
    train_x, test_x = np.asarray(train_x), np.asarray(test_x)
    train_y, test_y = _labels("train_y", train_y), _labels("test_y", test_y)
    for split, x in (("train_x", train_x), ("test_x", test_x)):
        if x.dtype.kind not in "biuf":
            raise ValueError(f"{split} must hold numbers, got dtype {x.dtype}")
    if train_x.dtype == np.uint8 and test_x.dtype != np.uint8:  # test_x would miss the 1/255 scaling
        raise ValueError(f"train_x is uint8 but test_x is {test_x.dtype}: both must be uint8 images (scaled "
                         "by 1/255) or both other numbers")
    if not train_y.size:
        raise ValueError("train_y is empty: the data set has no training samples")
    if not test_y.size:
        raise ValueError("test_y is empty: the data set has no test samples to measure accuracy on")
    scale = 1.0 / 255.0 if train_x.dtype == np.uint8 else 1.0
    if train_x.dtype != np.uint8:
        train_x, test_x = train_x.astype(np.float32), test_x.astype(np.float32)
        _check_finite("train_x", train_x)
        _check_finite("test_x", test_x)
    present = np.unique(train_y)
    if class_names is not None:
        names = tuple(str(c) for c in np.ravel(np.asarray(class_names)))
        num_classes = len(names)
        for split, y in (("train_y", train_y), ("test_y", test_y)):
            if y.max() >= num_classes:
                raise ValueError(f"{split} holds label {int(y.max())} but class_names names {num_classes} "
                                 f"classes (labels 0..{num_classes - 1})")
    else:
        num_classes = int(present.size)
        if present[-1] != num_classes - 1:  # labels skip classes: a stray label makes phantom classes
            missing = np.setdiff1d(np.arange(present[-1] + 1), present)
            raise ValueError(f"train_y holds label {int(present[-1])} but only {num_classes} distinct labels: "
                             f"classes {_span(missing)} have no training sample (labels must be 0..C-1; "
                             "give class_names to declare classes without training samples)")
        names = tuple(map(str, range(num_classes)))
        if test_y.max() >= num_classes:
            raise ValueError(f"test_y holds label {int(test_y.max())}, outside the training classes "
                             f"0..{num_classes - 1} (train_y)")
    channels = train_x.shape[-1] if train_x.ndim > 1 else 1
    mean = std = None
    if input_mean is not None:
        mean = _check_stats("input_mean", input_mean, channels, positive=False)
    if input_std is not None:
        std = _check_stats("input_std", input_std, channels, positive=True)
    if mean is None or std is None:
        computed_mean, computed_std = input_statistics(train_x, scale)
        flat = train_x.reshape(-1, channels)
        if std is None and np.array_equal(flat.min(axis=0), flat.max(axis=0)):
            raise ValueError("train_x: every training sample is the same (no input varies), so there is "
                             "nothing to learn and no spread to normalise by")
        mean = computed_mean if mean is None else mean
        std = computed_std if std is None else std
    keys = None if train_client is None else np.unique(np.asarray(train_client), return_inverse=True)[1]
    return ArrayDataset(name, train_x, train_y.astype(np.int32), test_x, test_y.astype(np.int32), num_classes,
                        names, None if keys is None else keys.astype(np.int64), scale, mean, std,
                        description)


def _span(values: np.ndarray) -> str:
    """``4..56`` for a run of consecutive integers, else the first few listed."""
    v = values.tolist()
    if len(v) > 2 and v[-1] - v[0] == len(v) - 1:
        return f"{v[0]}..{v[-1]}"
    return ", ".join(map(str, v[:8])) + (", ..." if len(v) > 8 else "")


def load_arrays_npz(path: str | os.PathLike) -> ArrayDataset:
    """A user's data set from an NPZ of arrays (see the module docstring)."""
    path = Path(path)
    expected = f"a numpy .npz with arrays {', '.join(_REQUIRED)} (optional: {', '.join(_OPTIONAL)})"
    with reading(path, expected):
        with open_npz(path) as z:  # headers checked against the archive before anything is allocated
            missing = [k for k in _REQUIRED if k not in z.files]
            unknown = sorted(set(z.files) - set(_REQUIRED) - set(_OPTIONAL))
            if missing or unknown:
                raise DataFileError(path, f"arrays {sorted(z.files)}; expected {expected}")
            arrays = {k: z[k] for k in z.files}
        try:
            return make_user_dataset(path.stem, **arrays, description=f"user data set {path}")
        except ValueError as e:
            raise DataFileError(path, str(e)) from None


def load_tfds_dataset(name: str, data_dir: str | os.PathLike | None = None) -> ArrayDataset:
    """An image/label data set through tensorflow-datasets (train and test splits); the tfds extra
    (:func:`import_tfds`) and, for a set not prepared yet, the network."""
    tfds = import_tfds(f"dataset=tfds:{name}")
    kwargs = {} if data_dir is None else {"data_dir": os.fspath(data_dir)}
    try:
        (train, test), info = tfds.load(name, split=["train", "test"], batch_size=-1, as_supervised=True,
                                        with_info=True, **kwargs)
    except Exception as e:  # tfds raises many kinds: report which data set and why
        raise tfds_failed(f"dataset=tfds:{name}", e) from e
    (train_x, train_y), (test_x, test_y) = tfds.as_numpy((train, test))
    label = info.features["label"]
    return make_user_dataset(name, train_x, train_y, test_x, test_y,
                             class_names=getattr(label, "names", None),
                             description=f"{name} (tensorflow-datasets)")
