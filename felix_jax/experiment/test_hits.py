"""A run's ``test_hits.npz``: which test samples each test checkpoint classified right.

Written by runs with ``test_hits=true`` (:class:`~felix_jax.fleet.config.StopRule` ``keep_hits``): one
row of ``np.packbits`` bits per checkpoint, in ``metrics.csv``'s order. The test subset a run is
measured on never feeds back into the run (it picks no client and weights no update), so the accuracy
on any subset of the test set, after every aggregation, can be read from one run on the whole set:
``subset_accuracies(hits, num_test_rows(num_train, 250, ...))`` is what ``num_test=250`` would have
measured on the same models (tested equal on real runs).

Keys: ``hits`` uint8 (checkpoints, ceil(n / 8)); ``num_test`` (n); ``time_s`` float64 and ``version``
int64 (checkpoints,), the checkpoints' virtual times and model versions, as in ``metrics.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.dataset import subset_rows
from ..traces.data_paths import DataFileError, reading

TEST_HITS_FILE = "test_hits.npz"


class HitsRecord(NamedTuple):
    hits: np.ndarray  # (checkpoints, ceil(num_test / 8)) uint8: packed bits, bit j of a row = sample j right
    num_test: int
    time_s: np.ndarray  # (checkpoints,) float64
    version: np.ndarray  # (checkpoints,) int64

    def correct(self) -> np.ndarray:
        """(checkpoints, num_test) bool: sample j classified right at checkpoint i."""
        return np.unpackbits(self.hits, axis=1, count=self.num_test).astype(bool)


def write_test_hits(path: str | Path, hits: list[np.ndarray], num_test: int, checkpoints) -> Path:
    """``test_hits.npz`` from a run's packed rows and its checkpoints (the same count, same order)."""
    path = Path(path)
    if len(hits) != len(checkpoints):
        raise ValueError(f"{len(hits)} rows of test hits for {len(checkpoints)} checkpoints")
    width = -(-int(num_test) // 8)
    table = np.stack(hits).astype(np.uint8) if hits else np.zeros((0, width), np.uint8)
    if table.shape[1:] != (width,):
        raise ValueError(f"test hits rows of {table.shape[1:]} bytes for {num_test} test samples ({width} bytes)")
    np.savez_compressed(path, hits=table, num_test=np.int64(num_test),
                        time_s=np.asarray([c.time_s for c in checkpoints], np.float64),
                        version=np.asarray([c.version for c in checkpoints], np.int64))
    return path


def read_test_hits(run_dir: str | Path) -> HitsRecord:
    """A run folder's ``test_hits.npz``; a :class:`DataFileError` naming the file (one line) when it is
    missing (the run did not set ``test_hits=true``) or not such a file."""
    path = Path(run_dir) / TEST_HITS_FILE
    if not path.is_file():
        raise DataFileError(path, "no per-sample test record: run with --set test_hits=true to keep one")
    with reading(path, "a run's test_hits.npz"):
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("hits", "num_test", "time_s", "version") if k not in z.files]
            if missing:
                raise DataFileError(path, f"not a run's test_hits.npz: no {', '.join(missing)}")
            out = HitsRecord(np.asarray(z["hits"], np.uint8), int(z["num_test"]), np.asarray(z["time_s"], np.float64),
                           np.asarray(z["version"], np.int64))
    if out.hits.ndim != 2 or out.hits.shape[1] != -(-out.num_test // 8) or len(out.time_s) != len(out.hits):
        raise DataFileError(path, f"hits of shape {out.hits.shape} do not fit {out.num_test} test samples and "
                                  f"{len(out.time_s)} checkpoints")
    return out


def subset_accuracies(record: HitsRecord, subset: int | np.ndarray | None = None) -> np.ndarray:
    """(checkpoints,) float64: the accuracy at every checkpoint on a subset of the test set: its first
    ``subset`` samples (an int), the samples at the indices of an array, or all of them (None). The count of right samples over the subset's size, so the whole set
    gives ``metrics.csv``'s accuracies exactly. (``num_test=k`` is a seeded sample, not the first k
    rows: :func:`num_test_rows` names its rows.)"""
    correct = record.correct()
    if subset is None:
        cols = correct
    elif np.ndim(subset) == 0:
        k = int(subset)
        if not 1 <= k <= record.num_test:
            raise ValueError(f"a subset of {k} test samples: the run kept {record.num_test}")
        cols = correct[:, :k]
    else:
        idx = np.asarray(subset, np.int64)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= record.num_test:
            raise ValueError(f"subset indices must lie in [0, {record.num_test})")
        cols = correct[:, idx]
    return cols.sum(axis=1) / cols.shape[1]


def num_test_rows(num_train: int | None, num_test: int, train_total: int, test_total: int) -> np.ndarray:
    """The test rows a run with ``num_train`` and ``num_test=num_test`` evaluates, as indices into the
    data set's whole test split (:func:`~felix_jax.data.dataset.subset_rows`: the same seeded draw,
    after the training rows'); for a run that kept the whole test set, the subset to pass to
    :func:`subset_accuracies` to read what that smaller test would have measured."""
    rows = subset_rows(num_train, num_test, train_total, test_total)[1]
    return np.arange(test_total) if isinstance(rows, slice) else rows
