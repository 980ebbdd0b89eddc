"""All data-set loaders in one place, plus a by-name entry point.

The data home is ``$FELIX_JAX_DATA`` when set, else ``data/`` in the user cache (:mod:`.paths`).

Each loader returns an :class:`~felix_jax.data.dataset.ArrayDataset`:

====================  ==========================================  ==================
name                  loader                                      needs
====================  ==========================================  ==================
``digits``            :func:`load_digits_embedded`                nothing (sklearn)
``cifar10``           :func:`load_cifar10`: the binary archive,   the data home
                      else the JPEG copy                          (``felix-jax data fetch cifar10``)
``cifar10_binary``    :func:`load_cifar10_binary`                 the original tar.gz
``cifar10_tfds``      :func:`load_cifar10_tfds`                   TensorFlow + network
``speech_commands``   :func:`load_speech_commands_shared` (12)    the data home
``speech_commands35`` :func:`load_speech_commands_shared` (35)    (``felix-jax data fetch speech_commands``)
``speech_commands_tfds`` :func:`load_speech_commands_tfds`        TensorFlow + network
``PATH.npz``          :func:`~.user.load_arrays_npz`              your arrays
``tfds:NAME``         :func:`~.user.load_tfds_dataset`            TensorFlow (+ network)
====================  ==========================================  ==================
"""

from __future__ import annotations

import functools
from typing import Callable

from .cifar10 import load_cifar10, load_cifar10_binary, load_cifar10_shared, load_cifar10_tfds
from .dataset import ArrayDataset
from .embedded import load_digits_embedded
from .paths import resolve_cache_dir, resolve_data_dir
from .speech_commands import load_speech_commands_shared, load_speech_commands_tfds
from .user import load_arrays_npz, load_tfds_dataset

LOADERS: dict[str, Callable[..., ArrayDataset]] = {
    "digits": load_digits_embedded,
    "cifar10": load_cifar10,
    "cifar10_binary": load_cifar10_binary,
    "cifar10_tfds": load_cifar10_tfds,
    "speech_commands": functools.partial(load_speech_commands_shared, labels="12"),
    "speech_commands35": functools.partial(load_speech_commands_shared, labels="35"),
    "speech_commands_tfds": load_speech_commands_tfds,
}


def load_dataset(name: str, **kwargs) -> ArrayDataset:
    """Load a data set by its registry name (see the table above), a user's ``.npz`` of
    arrays (:func:`~felix_jax.data.user.load_arrays_npz`), or ``tfds:NAME``; ``kwargs``
    go to the loader."""
    if name.startswith("tfds:"):
        return load_tfds_dataset(name[5:], **kwargs)
    if name.lower().endswith(".npz"):
        return load_arrays_npz(name)
    try:
        loader = LOADERS[name]
    except KeyError:
        from ..suggest import known_names

        raise ValueError(f"unknown data set {name!r}"
                         + known_names(name, sorted(LOADERS), "data sets", ", a .npz of arrays, or tfds:NAME")) from None
    return loader(**kwargs)


__all__ = [
    "LOADERS",
    "load_dataset",
    "load_digits_embedded",
    "load_cifar10",
    "load_cifar10_shared",
    "load_cifar10_binary",
    "load_cifar10_tfds",
    "load_speech_commands_shared",
    "load_speech_commands_tfds",
    "load_arrays_npz",
    "load_tfds_dataset",
    "resolve_data_dir",
    "resolve_cache_dir",
]
