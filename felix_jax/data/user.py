"""Your own data: a plain NPZ of arrays, or any tensorflow-datasets image/label set.

``dataset=my_data.npz`` reads::

    train_x  (N, ...)  uint8 images (scaled by 1/255) or float inputs
    train_y  (N,)      integer labels 0..C-1
    test_x   (M, ...)  as train_x
    test_y   (M,)
    train_client (N,)  optional: each training sample's client (writer, speaker, user id);
                       ``partition=natural`` then makes one client per id
    input_mean, input_std (C,)  optional per-channel normalisation; computed from the
                       training inputs when absent
    class_names (C,)   optional strings

Per-user data (TFF / FedScale style client ids, pfl's ``from_slices``) is this
format: concatenate the users' samples and give their ids in ``train_client``.

``dataset=tfds:NAME`` loads a tensorflow-datasets image classification set
(``as_supervised``: an image and a label); ``TFDS_DATA_DIR`` (tfds's own variable)
or ``~/tensorflow_datasets`` is where tfds looks, so an offline, already prepared
copy works without a network.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .dataset import ArrayDataset
from .paths import DataFileError, reading

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


def make_user_dataset(name: str, train_x, train_y, test_x, test_y, *, train_client=None, input_mean=None,
                      input_std=None, class_names=None, description: str = "") -> ArrayDataset:
    """An :class:`ArrayDataset` from arrays; normalisation from the training inputs unless given."""
    train_x, test_x = np.asarray(train_x), np.asarray(test_x)
    train_y, test_y = np.asarray(train_y).astype(np.int32), np.asarray(test_y).astype(np.int32)
    scale = 1.0 / 255.0 if train_x.dtype == np.uint8 else 1.0
    if train_x.dtype != np.uint8:
        train_x, test_x = train_x.astype(np.float32), test_x.astype(np.float32)
    if input_mean is None or input_std is None:
        mean, std = input_statistics(train_x, scale)
    else:
        mean, std = tuple(np.ravel(input_mean).astype(float)), tuple(np.ravel(input_std).astype(float))
    num_classes = int(max(train_y.max(initial=-1), test_y.max(initial=-1)) + 1)
    names = tuple(str(c) for c in class_names) if class_names is not None else tuple(map(str, range(num_classes)))
    keys = None if train_client is None else np.unique(np.asarray(train_client), return_inverse=True)[1]
    return ArrayDataset(name, train_x, train_y, test_x, test_y, max(num_classes, len(names)), names,
                        None if keys is None else keys.astype(np.int64), scale, mean, std, description)


def load_arrays_npz(path: str | os.PathLike) -> ArrayDataset:
    """A user's data set from an NPZ of arrays (see the module docstring)."""
    path = Path(path)
    expected = f"a numpy .npz with arrays {', '.join(_REQUIRED)} (optional: {', '.join(_OPTIONAL)})"
    with reading(path, expected):
        with np.load(path, allow_pickle=False) as z:
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
    """An image/label data set through tensorflow-datasets (train and test splits)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise ImportError(f"dataset=tfds:{name} needs tensorflow-datasets and TensorFlow "
                          f"(pip install \"felix-jax[tfds]\"; missing: {e.name or e})") from e
    kwargs = {} if data_dir is None else {"data_dir": os.fspath(data_dir)}
    try:
        (train, test), info = tfds.load(name, split=["train", "test"], batch_size=-1, as_supervised=True,
                                        with_info=True, **kwargs)
    except Exception as e:  # tfds raises many kinds: report which data set and why
        raise RuntimeError(f"tensorflow-datasets could not load {name!r}: {e}") from e
    (train_x, train_y), (test_x, test_y) = tfds.as_numpy((train, test))
    label = info.features["label"]
    return make_user_dataset(name, train_x, train_y, test_x, test_y,
                             class_names=getattr(label, "names", None),
                             description=f"{name} (tensorflow-datasets)")
