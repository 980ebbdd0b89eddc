"""Tests for felix_jax.data.partition."""

import numpy as np
import pytest

from felix_jax.data.partition import (
    Partition,
    dirichlet_partition,
    iid_partition,
    partition_by_key,
    partition_from_assignment,
    partition_from_counts,
)


def balanced_labels(n=5000, k=10, seed=0):
    return np.random.default_rng(seed).permutation(np.arange(n) % k)


def assert_exact_cover(p: Partition, n: int):
    assert p.num_samples == n
    assert int(p.counts.sum()) == n
    idx = p.index_table[p.valid_mask()]
    np.testing.assert_array_equal(np.sort(idx), np.arange(n))  # every sample exactly once


def check_table(p: Partition):
    assert p.index_table.dtype == np.int32 and p.counts.dtype == np.int32
    assert p.index_table.shape == (p.num_clients, max(int(p.counts.max()), 1))
    assert np.all(p.index_table[~p.valid_mask()] == 0)  # padding is 0
    for i in range(p.num_clients):
        row = p.client_indices(i)
        assert row.shape == (p.counts[i],)
        assert np.all(np.diff(row) > 0)  # ascending, no duplicates


@pytest.mark.parametrize("alpha", [0.05, 0.1, 1.0, 100.0])
def test_dirichlet_cover_min_and_determinism(alpha):
    y = balanced_labels()
    p = dirichlet_partition(y, 100, alpha, seed=3)
    assert_exact_cover(p, len(y))
    check_table(p)
    assert p.counts.min() >= 1
    q = dirichlet_partition(y, 100, alpha, seed=3)
    np.testing.assert_array_equal(p.index_table, q.index_table)
    np.testing.assert_array_equal(p.counts, q.counts)
    r = dirichlet_partition(y, 100, alpha, seed=4)
    assert not np.array_equal(p.counts, r.counts)


def test_dirichlet_min_samples_repair():
    y = balanced_labels(2000)
    p = dirichlet_partition(y, 200, 0.01, seed=0, min_samples=5)
    assert_exact_cover(p, 2000)
    assert p.counts.min() >= 5
    assert "repaired=" in p.method


def test_label_skew_grows_as_alpha_falls():
    y = balanced_labels(20000)
    share, entropy = [], []
    for alpha in (100.0, 1.0, 0.1):
        h = dirichlet_partition(y, 100, alpha, seed=0).label_histogram(y, 10).astype(float)
        frac = h / h.sum(axis=1, keepdims=True)
        share.append(frac.max(axis=1).mean())
        with np.errstate(divide="ignore", invalid="ignore"):
            entropy.append(-np.nansum(frac * np.log(frac), axis=1).mean())
    assert share[0] < share[1] < share[2]
    assert entropy[0] > entropy[1] > entropy[2]
    assert share[0] < 0.2 and share[2] > 0.5


def test_dirichlet_rejects_bad_arguments():
    y = balanced_labels(100)
    for alpha in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            dirichlet_partition(y, 10, alpha)
    with pytest.raises(ValueError):
        dirichlet_partition(y, 0, 1.0)
    with pytest.raises(ValueError):
        dirichlet_partition(y, 101, 1.0)  # cannot give everyone a sample
    with pytest.raises(ValueError):
        dirichlet_partition(y, 10, 1.0, min_samples=11)


def test_label_histogram_and_stats():
    y = np.array([0, 1, 1, 2, 2, 2])
    p = partition_from_assignment(np.array([0, 0, 1, 1, 1, 0]), 2)
    np.testing.assert_array_equal(p.label_histogram(y, 3), [[1, 1, 1], [0, 1, 2]])
    np.testing.assert_array_equal(p.assignment(), [0, 0, 1, 1, 1, 0])
    s = p.size_stats()
    assert s["min"] == 3 and s["max"] == 3 and s["total"] == 6 and s["median"] == 3.0
    assert set(s) >= {"min", "p10", "median", "mean", "p90", "max"}
    with pytest.raises(ValueError):
        p.label_histogram(y[:5], 3)


def test_iid_partition():
    p = iid_partition(1003, 10, seed=1)
    assert_exact_cover(p, 1003)
    check_table(p)
    assert p.counts.max() - p.counts.min() <= 1
    np.testing.assert_array_equal(p.index_table, iid_partition(1003, 10, seed=1).index_table)
    with pytest.raises(ValueError):
        iid_partition(5, 10)


def test_partition_by_key_one_client_per_key():
    keys = np.array([7, 3, 7, 9, 3, 3, 9, 7])
    p = partition_by_key(keys)
    assert p.num_clients == 3
    assert_exact_cover(p, len(keys))
    # client i holds the i-th key in sorted order (3, 7, 9)
    for i, key in enumerate([3, 7, 9]):
        np.testing.assert_array_equal(p.client_indices(i), np.flatnonzero(keys == key))


def test_partition_by_key_grouped_keeps_keys_together():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, size=2000)
    p = partition_by_key(keys, num_clients=12, seed=5)
    assert p.num_clients == 12
    assert_exact_cover(p, 2000)
    owner = p.assignment()
    for k in np.unique(keys):
        assert len(np.unique(owner[keys == k])) == 1  # a key never straddles clients
    keys_per_client = [len(np.unique(keys[p.client_indices(i)])) for i in range(12)]
    assert min(keys_per_client) >= 4 and max(keys_per_client) <= 5  # 50 keys / 12 clients
    q = partition_by_key(keys, num_clients=12, seed=5)
    np.testing.assert_array_equal(p.index_table, q.index_table)
    with pytest.raises(ValueError):
        partition_by_key(keys, num_clients=51)


def test_partition_from_counts():
    counts = np.array([1, 5, 0, 10])
    p = partition_from_counts(30, counts, seed=0)
    np.testing.assert_array_equal(p.counts, counts)
    idx = p.index_table[p.valid_mask()]
    assert len(np.unique(idx)) == 16 and idx.max() < 30
    assert (p.assignment() == -1).sum() == 14
    with pytest.raises(ValueError):
        partition_from_counts(10, counts)


def test_partition_validation():
    with pytest.raises(ValueError):
        Partition(np.zeros((2, 3), np.int32), np.array([1, 4], np.int32), 10)
    with pytest.raises(ValueError):
        Partition(np.zeros((2, 3), np.int64), np.array([1, 2], np.int32), 10)


def test_dataset_subset_is_a_seeded_random_sample_not_a_prefix():
    from felix_jax.data.dataset import ArrayDataset

    y = np.repeat(np.arange(10), 50).astype(np.int32)  # sorted by class, like the shared CIFAR copy
    x = np.zeros((500, 2), np.float32)
    ds = ArrayDataset("sorted", x, y, x[:100], y[:100], 10)
    sub = ds.subset(100, 20)
    assert len(np.unique(sub.train_y)) == 10 and sub.test_y.shape == (20,)
    np.testing.assert_array_equal(sub.train_y, ds.subset(100, 20).train_y)  # seeded
