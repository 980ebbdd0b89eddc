"""Host-side array data set: the one type every loader returns.

A loader (embedded digits, CIFAR-10, Speech Commands, tfds) produces an
:class:`ArrayDataset` of numpy arrays; :mod:`felix_jax.data.federated` then puts it
on the device once and describes clients as rows of an index table.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class ArrayDataset:
    """A train/test split held on the host as numpy arrays.

    Inputs may be stored compactly (uint8 images); ``input_scale``, ``input_mean``
    and ``input_std`` say how the device turns them into model inputs:
    ``x = (x * input_scale - input_mean) / input_std`` (per channel, broadcast over
    the last axis).
    """

    name: str
    train_x: np.ndarray  # (N, ...) uint8 or float32
    train_y: np.ndarray  # (N,) int32 labels in [0, num_classes)
    test_x: np.ndarray  # (M, ...) same dtype/shape tail as train_x
    test_y: np.ndarray  # (M,) int32
    num_classes: int
    class_names: tuple[str, ...] = ()
    # Optional per-sample grouping key (e.g. speaker id) for partition_by_key.
    train_keys: np.ndarray | None = None  # (N,) int64
    input_scale: float = 1.0
    input_mean: tuple[float, ...] = (0.0,)
    input_std: tuple[float, ...] = (1.0,)
    description: str = ""

    def __post_init__(self):
        for split in ("train", "test"):
            x, y = getattr(self, f"{split}_x"), getattr(self, f"{split}_y")
            if x.shape[0] != y.shape[0]:
                raise ValueError(f"{self.name}: {split}_x has {x.shape[0]} rows but {split}_y has {y.shape[0]}")
            if y.ndim != 1:
                raise ValueError(f"{self.name}: {split}_y must be 1-D, got shape {y.shape}")
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                raise ValueError(f"{self.name}: {split}_y has labels outside [0, {self.num_classes})")
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise ValueError(f"{self.name}: train inputs {self.train_x.shape[1:]} != test inputs {self.test_x.shape[1:]}")
        if self.train_keys is not None and self.train_keys.shape != self.train_y.shape:
            raise ValueError(f"{self.name}: train_keys shape {self.train_keys.shape} != train_y shape {self.train_y.shape}")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def subset(self, num_train: int | None = None, num_test: int | None = None, seed: int = 0) -> "ArrayDataset":
        """A seeded uniform random sample of ``num_train`` / ``num_test`` rows (``None``: all):
        the rows :func:`subset_rows` names.

        Random, not the first rows: stored data sets are often ordered by class
        (the shared CIFAR-10 copy is), and a prefix would hold a single class.
        """
        for n in (num_train, num_test):
            if n is not None and n < 1:
                raise ValueError(f"{self.name}: cannot take {n} rows")
        tr, te = subset_rows(num_train, num_test, self.train_x.shape[0], self.test_x.shape[0], seed)
        return dataclasses.replace(
            self,
            train_x=self.train_x[tr],
            train_y=self.train_y[tr],
            test_x=self.test_x[te],
            test_y=self.test_y[te],
            train_keys=None if self.train_keys is None else self.train_keys[tr],
        )


def subset_rows(num_train: int | None, num_test: int | None, train_total: int, test_total: int,
                seed: int = 0) -> tuple[np.ndarray | slice, np.ndarray | slice]:
    """The training and test rows :meth:`ArrayDataset.subset` keeps: sorted uniform samples without
    replacement from one seeded stream, the training rows drawn first (so the test rows of
    ``num_test=k`` depend on ``num_train`` too); ``slice(None)`` where all are kept."""
    rng = np.random.default_rng(seed)

    def pick(n: int | None, total: int) -> np.ndarray | slice:
        if n is None or n >= total:
            return slice(None)
        return np.sort(rng.choice(total, n, replace=False))

    return pick(num_train, train_total), pick(num_test, test_total)

