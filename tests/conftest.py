"""Shared fixtures: tiny federated data sets the tests make themselves, and the offline data folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from felix_jax.data.dataset import ArrayDataset
from felix_jax.data.federated import held_out_to_device, to_device
from felix_jax.data.partition import partition_from_counts

# ---------------------------------------------------------------- the offline data folder
# The library reads its offline data only from $FELIX_JAX_DATA (or an explicit path). The
# tests also look beside the checkout: when FELIX_JAX_DATA is unset and ../shared/data exists,
# it is set here, once, at conftest import, i.e. before any test module is collected, so every
# test and every subprocess a test starts (the CLI, the benchmark scripts) sees the same folder.
# FELIX_JAX_TEST_NO_SHARED=1 turns that fallback off, to run the suite as on a fresh clone
# without data (`env -u FELIX_JAX_DATA FELIX_JAX_TEST_NO_SHARED=1 python -m pytest -q`):
# every test that needs a data file then skips, naming the file (needs_data / require_data).
DATA_ENV = "FELIX_JAX_DATA"
NO_SHARED_ENV = "FELIX_JAX_TEST_NO_SHARED"
SHARED_FALLBACK = Path(__file__).resolve().parents[2] / "shared" / "data"

if not os.environ.get(DATA_ENV) and os.environ.get(NO_SHARED_ENV, "") in ("", "0") and SHARED_FALLBACK.is_dir():
    os.environ[DATA_ENV] = str(SHARED_FALLBACK)

# Read once here: some tests clear FELIX_JAX_DATA for themselves (monkeypatch) and still need the real folder.
DATA_DIR: Path | None = Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None

# The data files tests may need, relative to the data folder.
REFERENCE_FILE = "traces/felix_reference_300clients.npz"  # ref:NAME, mobiperf, partition=reference/pool, ...
CIFAR10_FILE = "cifar10/cifar10_jpeg_bytes.npz"
SPEECH_FILE = "speech_commands/speech_commands_v0.02_test.npz"
FLASH_FILES = ("traces/flash_benchmark2score.json", "traces/flash_speed_distri.json")


def missing_data(*relative: str) -> list[str]:
    """Those of the data files (relative to the data folder) that the data folder lacks."""
    return [r for r in relative if DATA_DIR is None or not (DATA_DIR / r).is_file()]


def _skip_reason(missing: list[str]) -> str:
    where = f"set {DATA_ENV}" if DATA_DIR is None else f"not under {DATA_ENV}={DATA_DIR}"
    return f"needs {', '.join(missing)}: {where}"


def needs_data(*relative: str) -> pytest.MarkDecorator:
    """Marks a test (or a module, as ``pytestmark``) to skip unless the data folder holds these files."""
    missing = missing_data(*relative)
    return pytest.mark.skipif(bool(missing), reason=_skip_reason(missing))


def require_data(*relative: str) -> Path:
    """The data folder, or a skip naming the files it lacks (for tests that decide at run time)."""
    __tracebackhide__ = True  # the skip is reported at the calling test's line
    missing = missing_data(*relative)
    if missing:
        pytest.skip(_skip_reason(missing))
    return DATA_DIR


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
