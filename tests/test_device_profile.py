"""Tests for felix_jax.traces.device_profile."""

from __future__ import annotations

import numpy as np
import pytest

from felix_jax.traces import (
    DeviceProfile,
    fedscale_task_time_s,
    flash_profile,
    paper_halfnormal,
    reference_profile,
)
from tests.conftest import DATA_DIR as DATA
from tests.conftest import FLASH_FILES, REFERENCE_FILE, needs_data


def _profile() -> DeviceProfile:
    return DeviceProfile(
        train_delay_s=np.array([10.0, 2.0, 0.0]),
        compute_speed=np.array([1.0, 2.0, 0.5]),
        down_kbps=np.array([8000.0, np.inf, 1000.0]),
        up_kbps=np.array([800.0, 1000.0, np.inf]),
        nominal_ms_per_sample=100.0,
    )


def test_train_duration_hand_computed():
    p = _profile()
    # client 0: down 1e6 B * 8 / 8e6 b/s = 1 s; compute 10 + 50 * 0.1 / 1 = 15 s;
    #           up 8e6 b / 8e5 b/s = 10 s -> 26 s
    # client 1: down 0; compute 2 + 50 * 0.1 / 2 = 4.5; up 8e6 / 1e6 = 8 -> 12.5 s
    # client 2: down 8 s; compute 0 + 50 * 0.1 / 0.5 = 10; up 0 -> 18 s
    np.testing.assert_allclose(p.train_duration_s(None, 1e6, 50), [26.0, 12.5, 18.0])
    # subset in any order, per-task sample counts
    np.testing.assert_allclose(p.train_duration_s([2, 0], 1e6, np.array([0, 10])), [8.0, 1 + 11 + 10])
    # compressed upload
    np.testing.assert_allclose(p.train_duration_s([0], 1e6, 50, upload_bytes=1e5), [1 + 15 + 1])


def test_eval_duration_hand_computed():
    p = _profile()
    # eval = download + compute / 20 + 64-byte upload
    expect0 = 1.0 + (10.0 + 32 * 0.1) / 20 + 64 * 8 / 800e3
    expect1 = 0.0 + (2.0 + 32 * 0.1 / 2) / 20 + 64 * 8 / 1e6
    expect2 = 8.0 + (32 * 0.1 / 0.5) / 20 + 0.0
    np.testing.assert_allclose(p.eval_duration_s(None, 1e6, 32), [expect0, expect1, expect2])
    np.testing.assert_allclose(p.eval_duration_s([0], 0, 0), [0.5 + 64 * 8 / 800e3])


def test_uniform_infinite_bandwidth_and_validation():
    p = DeviceProfile.uniform(4, train_delay_s=3.0)
    np.testing.assert_allclose(p.train_duration_s(None, 2.1e6, 1000), [3.0] * 4)
    np.testing.assert_allclose(p.eval_duration_s(None, 2.1e6), [0.15] * 4)
    assert p.restrict([1, 3]).num_clients == 2
    with pytest.raises(ValueError, match="train_delay_s"):
        DeviceProfile.uniform(2, train_delay_s=-1.0)
    with pytest.raises(ValueError, match="compute_speed"):
        DeviceProfile.uniform(2, compute_speed=0.0)
    with pytest.raises(ValueError, match="bandwidth"):
        DeviceProfile.uniform(2, down_kbps=0.0)
    with pytest.raises(ValueError, match="ragged"):
        DeviceProfile(np.zeros(2), np.ones(3), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="client indices"):
        p.train_duration_s([4], 1.0, 1)


def test_paper_halfnormal_statistics():
    d = paper_halfnormal(30000, seed=0).train_delay_s
    assert d.min() >= 2 and d.max() <= 60 and np.all(d == np.round(d))
    assert abs(np.median(d) - 10) <= 1 and abs(d.mean() - 12.1) < 0.4
    np.testing.assert_array_equal(paper_halfnormal(300, seed=1).train_delay_s,
                                  paper_halfnormal(300, seed=1).train_delay_s)
    p = paper_halfnormal(10, seed=0)
    assert np.all(np.isinf(p.down_kbps)) and np.all(p.compute_speed == 1)


def test_fedscale_time_model():
    compute, comm = fedscale_task_time_s(
        np.array([100.0, 50.0]), np.array([8000.0, 16000.0]), batch_size=32, local_steps=10, model_bytes=1e6
    )
    np.testing.assert_allclose(compute, [3 * 32 * 10 * 100 / 1000, 3 * 32 * 10 * 50 / 1000])  # 96, 48 s
    np.testing.assert_allclose(comm, [2 * 8e6 / 8e6, 2 * 8e6 / 16e6])  # 2, 1 s


@needs_data(REFERENCE_FILE)
def test_reference_profile():
    p = reference_profile(DATA)
    assert p.num_clients == 300
    assert np.median(p.train_delay_s) == 10 and abs(p.train_delay_s.mean() - 12.1) < 0.05
    np.testing.assert_allclose(p.train_duration_s([0, 1], 2.1e6, 100), [4.0, 16.0])


@needs_data(*FLASH_FILES)
def test_flash_profile_loads():
    p = flash_profile(2000, seed=0, path=DATA)
    assert p.num_clients == 2000
    assert np.all(p.compute_speed > 0) and 0.5 < np.median(p.compute_speed) < 2.0
    for bw in (p.down_kbps, p.up_kbps):
        assert np.all(np.isfinite(bw)) and np.all(bw > 0)
    assert 10_000 < np.median(p.down_kbps) < 100_000  # FLASH users: ~2-17 MB/s means
    q = flash_profile(2000, seed=0, path=DATA)
    np.testing.assert_array_equal(p.compute_speed, q.compute_speed)
    np.testing.assert_array_equal(p.down_kbps, q.down_kbps)
    # the median phone trains the paper's median client (114 samples) in about 10 s
    median_phone = DeviceProfile.uniform(1, nominal_ms_per_sample=p.nominal_ms_per_sample)
    np.testing.assert_allclose(median_phone.train_compute_s(None, 114), [10.0])
