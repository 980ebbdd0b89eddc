"""The paged DeltaStore: rows held across fixed-size pages, against a reference dict.

* the page size by hand;
* random writes, frees and gathers (hypothesis) give back exactly the rows written, bit for bit
  (negative zeros and NaNs included), take the lowest free slots, and count the rows in use;
* a new page leaves the earlier pages' arrays as they were (nothing copied when it grows);
* a snapshot's rows come back, also from a doubling store's snapshot (no ``page_rows``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from felix_jax.cohort import DeltaStore
from felix_jax.cohort.store import page_rows_for

TEMPLATE = {"w": jnp.zeros((2, 3)), "b": jnp.zeros((3,), jnp.float32)}


def _rows(rng: np.random.Generator, n: int) -> dict:
    w = rng.normal(size=(n, 2, 3)).astype(np.float32)
    w[rng.random(w.shape) < 0.1] = -0.0
    w[rng.random(w.shape) < 0.05] = np.nan
    return {"w": w, "b": rng.normal(size=(n, 3)).astype(np.float32)}


def _bits(tree: dict) -> dict:
    return {k: np.asarray(v).view(np.uint32) for k, v in tree.items()}


def test_page_rows_by_hand():
    assert page_rows_for(9_640) == 4096  # 256 MiB / 9,640 B = 27,846 rows: 4,096 (the cap)
    assert page_rows_for(400_000) == 512  # 671 rows: 512 (the largest power of two)
    assert page_rows_for(789_288) == 256  # the tiny MLP's update: 340 rows: 256, a whole cohort call
    assert page_rows_for(9_600_000) == 64  # 27 rows: at least 64
    assert page_rows_for(1) == 4096
    assert page_rows_for(1000, page_bytes=300_000) == 256  # 300 rows: 256
    assert DeltaStore(TEMPLATE).page_rows == 4096  # 36 bytes a row


@settings(max_examples=40, deadline=None)
@given(page_rows=st.integers(1, 4), seed=st.integers(0, 2 ** 16), steps=st.integers(1, 12))
def test_random_writes_frees_and_gathers_match_a_reference(page_rows, seed, steps):
    rng = np.random.default_rng(seed)
    store = DeltaStore(TEMPLATE, capacity=1, page_rows=page_rows)
    held: dict[int, dict] = {}
    for _ in range(steps):
        size = int(rng.integers(1, 6))
        real = np.sort(rng.choice(size, int(rng.integers(0, size + 1)), replace=False))
        rows = _rows(rng, size)
        before, short = store.capacity, len(real) - (store.capacity - len(held))
        slots = store.write({k: jnp.asarray(v) for k, v in rows.items()}, real)
        # a page more only when needed, as few as fit; the lowest free slots, in order
        assert store.capacity == before + (page_rows * -(-short // page_rows) if short > 0 else 0)
        assert slots.tolist() == sorted(set(range(store.capacity)) - set(held))[:len(real)]
        for s, r in zip(slots.tolist(), real.tolist()):
            held[s] = {k: v[r] for k, v in rows.items()}
        assert store.num_used == len(held) and store.capacity % page_rows == 0
        if held and rng.random() < 0.6:
            pick = rng.choice(sorted(held), int(rng.integers(1, len(held) + 1)))  # repeats allowed
            got = _bits(store.gather(pick))
            want = _bits({k: np.stack([held[int(s)][k] for s in pick]) for k in TEMPLATE})
            for k in TEMPLATE:
                np.testing.assert_array_equal(got[k], want[k])
        if held and rng.random() < 0.5:
            gone = rng.choice(sorted(held), int(rng.integers(1, len(held) + 1)), replace=False)
            store.free(gone)
            for s in gone.tolist():
                del held[s]


def test_growing_adds_a_page_and_copies_nothing():
    store = DeltaStore(TEMPLATE, capacity=2, page_rows=2)
    rng = np.random.default_rng(0)
    first = store.write({k: jnp.asarray(v) for k, v in _rows(rng, 2).items()}, np.array([0, 1]))
    page0 = store.pages[0]
    slots = store.write({k: jnp.asarray(v) for k, v in _rows(rng, 3).items()}, np.array([0, 1, 2]))
    assert store.capacity == 6 and len(store.pages) == 3 and slots.tolist() == [2, 3, 4]
    assert store.pages[0] is page0  # the first page was neither copied nor rewritten
    store.free(first)
    assert store.write({k: jnp.asarray(v) for k, v in _rows(rng, 1).items()}, np.array([0])).tolist() == [0]


@pytest.mark.parametrize("page_rows", [1, 2, 3, 64])
def test_a_snapshot_comes_back(page_rows):
    rng = np.random.default_rng(1)
    store = DeltaStore(TEMPLATE, capacity=1, page_rows=2)
    rows = _rows(rng, 5)
    slots = store.write({k: jnp.asarray(v) for k, v in rows.items()}, np.arange(5))
    store.free(slots[[1, 3]])
    state = store.state_dict()
    assert state["used"] == [0, 2, 4] and state["free"] == [1, 3, 5]
    other = DeltaStore(TEMPLATE, page_rows=page_rows)
    other.load_state_dict(state)
    assert other.num_used == 3 and other.capacity >= 6
    for k in TEMPLATE:
        np.testing.assert_array_equal(_bits(other.gather([0, 2, 4]))[k], _bits(rows)[k][[0, 2, 4]])
    # the next write takes the same lowest free slot the snapshotted store would
    assert other.write({k: jnp.asarray(v) for k, v in _rows(rng, 1).items()}, np.array([0])).tolist() == [1]


def test_a_doubling_stores_snapshot_loads():
    """Snapshots written before the store had pages: ``capacity`` rows, a free list in any order, no ``page_rows``."""
    rng = np.random.default_rng(2)
    rows = _rows(rng, 2)
    state = {"capacity": 4, "used": [3, 1], "free": [2, 0],
             "rows": {k: v for k, v in rows.items()}}
    store = DeltaStore(TEMPLATE, page_rows=3)
    store.load_state_dict(state)
    assert store.capacity == 6 and store.num_used == 2
    for k in TEMPLATE:
        np.testing.assert_array_equal(_bits(store.gather([3, 1]))[k], _bits(rows)[k])
    got = store.write({k: jnp.asarray(v) for k, v in _rows(rng, 4).items()}, np.arange(4))
    assert got.tolist() == [0, 2, 4, 5]
