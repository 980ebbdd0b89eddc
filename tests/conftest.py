"""Shared fixtures: tiny federated data sets the tests make themselves."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from felix_jax.data.dataset import ArrayDataset
from felix_jax.data.federated import held_out_to_device, to_device
from felix_jax.data.partition import partition_from_counts


def shared_data_dir() -> Path | None:
    """The offline data folder (FELIX_JAX_DATA, else ../shared/data beside the repo)."""
    env = os.environ.get("FELIX_JAX_DATA")
    cand = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return cand if cand.is_dir() else None


def make_image_dataset(num_train=600, num_test=64, shape=(8, 8, 3), seed=0) -> ArrayDataset:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (num_train,) + shape, dtype=np.uint8)
    y = rng.integers(0, 10, num_train).astype(np.int32)
    tx = rng.integers(0, 256, (num_test,) + shape, dtype=np.uint8)
    ty = rng.integers(0, 10, num_test).astype(np.int32)
    return ArrayDataset("tiny", x, y, tx, ty, 10, input_scale=1 / 255, input_mean=(0.5,), input_std=(0.25,))


@pytest.fixture(scope="session")
def tiny():
    """600 random 8x8x3 images over 6 clients of sizes 5, 70, 33, 100, 1, 64."""
    ds = make_image_dataset()
    counts = np.array([5, 70, 33, 100, 1, 64], np.int32)
    part = partition_from_counts(ds.train_x.shape[0], counts, seed=0)
    return ds, part, to_device(ds, part), held_out_to_device(ds)
