"""Tests for felix_jax.traces: availability traces, generators and loaders."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from felix_jax.traces.data_paths import SHIPPED_DIR
from felix_jax.traces import (
    DATA_ENV_VAR,
    REFERENCE_TRACE_NAMES,
    AvailabilityTrace,
    Tier,
    always_available,
    diurnal,
    load_fedscale_trace,
    load_interval_csv,
    load_interval_npz,
    load_reference_clients,
    load_reference_trace,
    restricted_pickle_load,
    save_interval_csv,
    save_interval_npz,
    slot_bernoulli,
)
from tests.conftest import DATA_DIR as DATA
from tests.conftest import REFERENCE_FILE, needs_data

TRAIN, EVAL, UN = int(Tier.AVL_TRAIN), int(Tier.AVL_EVAL), int(Tier.UN_AVL)


# ---------------------------------------------------------- brute force reference
def _brute_state(trace: AvailabilityTrace, c: int, t: float) -> int:
    """Per-client loop over the raw rows: the last row with time <= local t wins."""
    lo, hi = trace.offsets[c], trace.offsets[c + 1]
    times, states = trace.times[lo:hi], trace.states[lo:hi]
    if trace.beyond_end == "repeat":
        period = trace.duration_s if trace.client_duration_s is None else trace.client_duration_s[c]
        t = t % period
        keep = times < period
        times, states = times[keep], states[keep]
    state = None
    for ti, si in zip(times, states):
        if ti <= t:
            state = int(si)
    return state


def _small_trace(beyond_end="hold", duration_s=30.0) -> AvailabilityTrace:
    return AvailabilityTrace.from_client_lists(
        [
            [0, 10, 20],  # client 0
            [0, 10, 20],  # client 1: row at 10 repeats the state
            [0],  # client 2: constant
            [0, 10, 20],  # client 3: ends in its initial state
        ],
        [
            ["AVL_TRAIN", "UN_AVL", "AVL_EVAL"],
            [TRAIN, TRAIN, UN],
            [TRAIN],
            [TRAIN, UN, TRAIN],
        ],
        duration_s=duration_s,
        beyond_end=beyond_end,
    )


# ------------------------------------------------------------------ semantics
def test_state_at_boundaries_and_hold():
    tr = _small_trace()
    assert tr.state_at(9.999, [0]).tolist() == [TRAIN]
    assert tr.state_at(10.0, [0]).tolist() == [UN]  # the new state applies at the change
    assert tr.state_at(20.0, [0]).tolist() == [EVAL]
    assert tr.state_at(1e9).tolist() == [EVAL, UN, TRAIN, TRAIN]  # hold
    assert tr.state_at(0.0).tolist() == [TRAIN] * 4
    assert tr.state_at(np.array([0.0, 10.0, 5.0, 15.0])).tolist() == [TRAIN, TRAIN, TRAIN, UN]
    assert tr.state_at(np.array([[5.0], [15.0]])).shape == (2, 4)
    assert int(tr.state_at(15.0, 0)) == UN  # scalar client
    assert tr.state_at(15.0).dtype == np.int8


def test_same_time_rows_last_wins_in_file_order():
    rows = dict(
        client=[0, 0, 0, 0, 1, 1], time_s=[0, 5, 5, 5, 0, 0], state=[TRAIN, UN, EVAL, TRAIN, UN, EVAL]
    )
    tr = AvailabilityTrace.from_rows(rows["client"], rows["time_s"], rows["state"])
    assert tr.state_at(5.0).tolist() == [TRAIN, EVAL]
    assert tr.state_at(4.0).tolist() == [TRAIN, EVAL]
    # The change at 5 is (TRAIN -> ... -> TRAIN): no real change.
    assert tr.next_change_after(0.0, [0])[0].tolist() == [np.inf]
    # Shuffling the rows of different clients / times keeps same-time rows' relative order.
    order = [4, 3, 0, 1, 5, 2]
    bad = AvailabilityTrace.from_rows(
        np.array(rows["client"])[order], np.array(rows["time_s"])[order], np.array(rows["state"])[order]
    )
    assert bad.state_at(5.0).tolist() == [EVAL, EVAL]  # now EVAL is the last row at t=5


def test_state_at_matches_brute_force_and_is_order_independent():
    tr = diurnal(40, seed=3, num_periods=2, slot_s=900, eval_availability=0.4)
    rng = np.random.default_rng(0)
    ts = np.concatenate([rng.uniform(0, 3 * tr.duration_s, 60), tr.times[rng.integers(0, tr.num_rows, 40)]])
    for policy in ("hold", "repeat"):
        t2 = tr.with_beyond_end(policy)
        full = t2.state_at(ts[:, None])
        expect = np.array([[_brute_state(t2, c, t) for c in range(t2.num_clients)] for t in ts])
        np.testing.assert_array_equal(full, expect)
        perm = rng.permutation(t2.num_clients)
        np.testing.assert_array_equal(t2.state_at(ts[:, None], perm[None, :]), full[:, perm])
        # per-client times in any order
        tc = rng.uniform(0, 2 * tr.duration_s, t2.num_clients)
        np.testing.assert_array_equal(t2.state_at(tc[perm], perm), t2.state_at(tc)[perm])


def test_next_change_after_hold():
    tr = _small_trace()
    t, s = tr.next_change_after(0.0)
    assert t.tolist() == [10.0, 20.0, np.inf, 10.0]
    assert s.tolist() == [UN, UN, TRAIN, UN]  # client 1 skips its same-state row at 10
    t, s = tr.next_change_after(10.0)  # strictly after
    assert t.tolist() == [20.0, 20.0, np.inf, 20.0]
    t, s = tr.next_change_after(25.0)
    assert t.tolist() == [np.inf] * 4 and s.tolist() == [EVAL, UN, TRAIN, TRAIN]


def test_next_change_after_repeat():
    tr = _small_trace("repeat", duration_s=30.0)
    assert tr.state_at(35.0).tolist() == tr.state_at(5.0).tolist()
    t, s = tr.next_change_after(25.0)
    # client 0: EVAL -> wraps to TRAIN at 30; client 1: UN -> TRAIN at 30;
    # client 2 constant; client 3 ends TRAIN = initial, next change at 30 + 10.
    assert t.tolist() == [30.0, 30.0, np.inf, 40.0]
    assert s.tolist() == [TRAIN, TRAIN, TRAIN, UN]
    t, s = tr.next_change_after(np.array([30.0, 95.0, 7.0, 61.0]))
    assert t.tolist() == [40.0, 110.0, np.inf, 70.0]
    # a row exactly at the period end is never reached under repeat
    edge = AvailabilityTrace.from_client_lists([[0, 30]], [[TRAIN, UN]], duration_s=30, beyond_end="repeat")
    assert edge.state_at(np.array([0, 29.9, 30, 59])).tolist() == [TRAIN] * 4
    assert edge.next_change_after(1e6)[0].tolist() == [np.inf]
    # consistency: the state changes at the reported time and not before
    d = diurnal(30, seed=1, num_periods=1, slot_s=1800, eval_availability=0.3).with_beyond_end("repeat")
    t0 = np.random.default_rng(1).uniform(0, 3e5, d.num_clients)
    nt, ns = d.next_change_after(t0)
    fin = np.isfinite(nt)
    assert np.all(nt > t0)
    np.testing.assert_array_equal(d.state_at(nt[fin], np.flatnonzero(fin)), ns[fin])
    mid = t0 + (np.where(fin, nt, t0 + 1e5) - t0) * 0.999
    np.testing.assert_array_equal(d.state_at(mid), d.state_at(t0))


def test_one_client_queries_equal_the_vectorised_ones():
    """``state_of`` / ``next_change_of`` (the simulator's per-dispatch path) give exactly what the
    broadcast queries give: same times to the bit (wraps, period ends, the nextafter guard), same
    states, under hold and repeat, with per-client periods, at change times and between them."""
    rng = np.random.default_rng(7)
    traces = [_small_trace(), _small_trace("repeat"),
              diurnal(25, seed=2, num_periods=2, slot_s=900, eval_availability=0.3),
              slot_bernoulli(25, 0.5, num_slots=20, slot_s=600, seed=3),
              AvailabilityTrace.from_client_lists([[0, 5], [0, 5, 7], [0]], [[TRAIN, UN], [TRAIN, UN, EVAL], [UN]],
                                                  duration_s=20, client_duration_s=[10.0, 20.0, 3.0],
                                                  beyond_end="repeat")]
    for base in traces:
        for tr in (base.with_beyond_end("hold"), base.with_beyond_end("repeat")):
            at_changes = tr.times[rng.integers(0, tr.num_rows, 30)]
            ts = np.concatenate([[0.0, tr.duration_s, np.nextafter(tr.duration_s, 0)], at_changes,
                                 at_changes + 3 * tr.duration_s, rng.uniform(0, 4 * tr.duration_s, 40)])
            for c in range(tr.num_clients):
                nt, ns = tr.next_change_after(ts, np.full(ts.shape, c))
                st = tr.state_at(ts, np.full(ts.shape, c))
                for i, t in enumerate(ts.tolist()):
                    assert tr.state_of(t, c) == st[i]
                    one_t, one_s = tr.next_change_of(t, c)
                    assert (one_t, one_s) == (float(nt[i]), int(ns[i])), (tr.beyond_end, c, t)
    tr = _small_trace()
    for t2 in (tr, tr.with_beyond_end("repeat")):
        for query in (t2.next_change_of, t2.state_of):
            for bad in (4, -1):
                with pytest.raises(ValueError, match="client index"):
                    query(1.0, bad)
    with pytest.raises(ValueError, match="query times"):
        tr.state_of(float("nan"), 0)


def test_per_client_periods():
    tr = AvailabilityTrace.from_client_lists(
        [[0, 5], [0, 5]], [[TRAIN, UN], [TRAIN, UN]], duration_s=20,
        client_duration_s=[10.0, 20.0], beyond_end="repeat",
    )
    assert tr.state_at(12.0).tolist() == [TRAIN, UN]
    assert tr.next_change_after(6.0)[0].tolist() == [10.0, 20.0]


def test_changes_between_matches_next_change_loop():
    tr = slot_bernoulli(20, 0.5, num_slots=12, slot_s=100, seed=4)
    c, t, s = tr.changes_between(150.0, 950.0)
    assert np.all((t > 150) & (t <= 950)) and np.all(np.diff(t) >= 0)
    for k in range(tr.num_clients):
        mine = t[c == k]
        starts, _ = tr.intervals(k, Tier.AVL_TRAIN)
        un_starts, _ = tr.intervals(k, Tier.UN_AVL)
        every = np.sort(np.concatenate([starts, un_starts]))
        np.testing.assert_array_equal(mine, every[(every > 150) & (every <= 950)])
    np.testing.assert_array_equal(tr.state_at(t, c), s)


def test_intervals_restrict_clip_fraction():
    tr = _small_trace()
    s, e = tr.intervals(0, Tier.AVL_TRAIN)
    assert s.tolist() == [0.0] and e.tolist() == [10.0]
    s, e = tr.intervals(0, Tier.AVL_EVAL)
    assert s.tolist() == [20.0] and e.tolist() == [np.inf]
    s, e = tr.with_beyond_end("repeat").intervals(1, Tier.AVL_TRAIN)
    assert s.tolist() == [0.0] and e.tolist() == [20.0]  # the same-state row at 10 is merged
    sub = tr.restrict([3, 0])
    assert sub.num_clients == 2 and sub.state_at(25.0).tolist() == [TRAIN, EVAL]
    clipped = tr.clip(15.0)
    assert clipped.duration_s == 15.0 and clipped.state_at(1e9).tolist() == [UN, TRAIN, TRAIN, UN]
    frac = tr.fraction_in_state(Tier.AVL_TRAIN, [0.0, 10.0, 20.0])
    np.testing.assert_allclose(frac, [1.0, 0.5, 0.5])


# ------------------------------------------------------------------ validation
def test_validation_errors():
    ok = dict(num_clients=2, times=[0.0, 5.0, 0.0], states=[2, 0, 2], offsets=[0, 2, 3], duration_s=10)
    AvailabilityTrace(**ok)
    with pytest.raises(ValueError, match="unsorted"):
        AvailabilityTrace(**{**ok, "times": [0.0, 0.0, 7.0, 3.0], "states": [2, 2, 0, 2],
                             "offsets": [0, 1, 4]})
    with pytest.raises(ValueError, match="negative"):
        AvailabilityTrace(**{**ok, "times": [0.0, -5.0, 0.0]})
    with pytest.raises(ValueError, match="unknown state"):
        AvailabilityTrace(**{**ok, "states": [2, 3, 2]})
    with pytest.raises(ValueError, match="ragged"):
        AvailabilityTrace(**{**ok, "states": [2, 0]})
    with pytest.raises(ValueError, match="t=0"):
        AvailabilityTrace(**{**ok, "times": [1.0, 5.0, 0.0]})
    with pytest.raises(ValueError, match="at least one row"):
        AvailabilityTrace(**{**ok, "offsets": [0, 3, 3]})
    with pytest.raises(ValueError, match="after the trace end"):
        AvailabilityTrace(**{**ok, "duration_s": 4.0})
    with pytest.raises(ValueError, match="beyond_end"):
        AvailabilityTrace(**{**ok, "beyond_end": "loop"})
    with pytest.raises(ValueError, match="positive duration"):
        always_available(3).with_beyond_end("repeat")
    with pytest.raises(ValueError, match="unsorted times within client 1"):
        AvailabilityTrace.from_client_lists([[0], [0, 9, 3]], [[2], [2, 0, 2]])
    with pytest.raises(ValueError, match="ragged"):
        AvailabilityTrace.from_client_lists([[0, 1]], [[2]])
    with pytest.raises(ValueError, match="ragged"):
        AvailabilityTrace.from_rows([0, 0], [0.0], [2, 2])
    with pytest.raises(ValueError, match="unknown tier name"):
        AvailabilityTrace.from_client_lists([[0]], [["ONLINE"]])
    with pytest.raises(ValueError, match="initial_state=None"):
        AvailabilityTrace.from_rows([0], [5.0], [2], initial_state=None)
    with pytest.raises(ValueError, match=">= 0"):
        _small_trace().state_at(-1.0)
    with pytest.raises(ValueError, match="client indices"):
        _small_trace().state_at(1.0, [4])


def test_initial_state_rule():
    tr = AvailabilityTrace.from_rows([0, 2], [5.0, 0.0], [TRAIN, EVAL], num_clients=3)
    assert tr.state_at(0.0).tolist() == [UN, UN, EVAL]  # inserted UN_AVL at t=0
    assert tr.state_at(5.0).tolist() == [TRAIN, UN, EVAL]
    tr = AvailabilityTrace.from_rows([0], [5.0], [TRAIN], initial_state="AVL_EVAL")
    assert tr.state_at(0.0).tolist() == [EVAL]


# ------------------------------------------------------------------ generators
def test_slot_bernoulli_statistics_and_determinism():
    tr = slot_bernoulli(2000, 0.5, seed=7)
    assert np.all(tr.state_at(0.0) == TRAIN)
    assert np.all(tr.state_at(144 * 600.0) == UN) and tr.duration_s == 86400.0
    ts = np.arange(0.0, 86400.0, 600.0)
    mean = tr.fraction_in_state(Tier.AVL_TRAIN, ts).mean()
    assert abs(mean - (1 + 143 * 0.5) / 144) < 0.01
    assert abs(tr.fraction_in_state(Tier.AVL_TRAIN, ts[1:]).mean() - 0.5) < 0.01
    # consecutive equal slots are merged: no row repeats its predecessor's state
    same = (tr.row_clients[1:] == tr.row_clients[:-1]) & (tr.states[1:] == tr.states[:-1])
    assert not same.any()
    again = slot_bernoulli(2000, 0.5, seed=7)
    np.testing.assert_array_equal(again.times, tr.times)
    np.testing.assert_array_equal(again.states, tr.states)
    assert not np.array_equal(slot_bernoulli(2000, 0.5, seed=8).times, tr.times)
    hi = slot_bernoulli(2000, 0.9, seed=1)
    assert abs(hi.fraction_in_state(Tier.AVL_TRAIN, ts).mean() - 0.9) < 0.01


def test_always_available_and_diurnal():
    a = always_available(5)
    assert a.state_at(1e9).tolist() == [TRAIN] * 5
    assert a.next_change_after(0.0)[0].tolist() == [np.inf] * 5
    d = diurnal(3000, seed=2, num_periods=2, mean_availability=0.3, amplitude=0.2,
                phase_spread_s=0.0, eval_availability=0.5)
    ts = np.arange(0.0, d.duration_s, 1800.0)
    train = d.fraction_in_state(Tier.AVL_TRAIN, ts)
    assert abs(train.mean() - 0.3) < 0.03
    night = d.fraction_in_state(Tier.AVL_TRAIN, [3 * 3600.0 + 86400])[0]
    day = d.fraction_in_state(Tier.AVL_TRAIN, [15 * 3600.0 + 86400])[0]
    assert night > 0.4 and day < 0.2
    evals = d.fraction_in_state(Tier.AVL_EVAL, ts).mean()
    assert abs(evals - 0.5 * 0.7) < 0.05
    d2 = diurnal(3000, seed=2, num_periods=2, mean_availability=0.3, amplitude=0.2,
                 phase_spread_s=0.0, eval_availability=0.5)
    np.testing.assert_array_equal(d2.states, d.states)
    assert d.beyond_end == "repeat"


# ------------------------------------------------------------------ safe pickle
class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_restricted_unpickler_refuses_globals_and_loads_plain_data(tmp_path):
    for payload in (pickle.dumps(os.system), pickle.dumps(_Evil()), pickle.dumps({"a": _Evil()}),
                    pickle.dumps(np.arange(3))):
        with pytest.raises(pickle.UnpicklingError, match="refusing"):
            restricted_pickle_load(payload)
    plain = {
        1: {"active": [0, 5], "inactive": [2, 9], "finish_time": 10, "model": "x"},
        "k": (1.5, None, True),
    }
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(plain, protocol=4))
    assert restricted_pickle_load(path) == plain


# ------------------------------------------------------------------ FedScale
def _fedscale_rule(rec, t):
    x = t % rec["finish_time"]
    return any(a <= x <= i for a, i in zip(rec["active"], rec["inactive"]))


FEDSCALE = {
    5: {"duration": 100, "active": [0, 50], "inactive": [10, 60], "finish_time": 100, "model": "m"},
    2: {"duration": 40, "active": [20], "inactive": [30], "finish_time": 40, "model": "m"},
    9: {"duration": 50, "active": [5, 8, 30], "inactive": [12, 10, 50], "finish_time": 50, "model": "m"},
}


def test_fedscale_pickle_and_json(tmp_path):
    pkl = tmp_path / "behave.pkl"
    pkl.write_bytes(pickle.dumps(FEDSCALE))
    js = tmp_path / "behave.json"
    js.write_text(json.dumps({str(k): v for k, v in FEDSCALE.items()}))
    for path in (pkl, js):
        tr = load_fedscale_trace(path)
        assert tr.beyond_end == "repeat" and tr.client_ids.tolist() == [2, 5, 9]
        np.testing.assert_array_equal(tr.client_duration_s, [40.0, 100.0, 50.0])
        ts = np.concatenate([np.arange(0, 400, 0.5), [10.0, 10.000001, 60.0, 30.0, 12.0, 50.0]])
        got = tr.state_at(ts[:, None]) == TRAIN
        expect = np.array([[_fedscale_rule(FEDSCALE[i], t) for i in (2, 5, 9)] for t in ts])
        np.testing.assert_array_equal(got, expect)
    bad = tmp_path / "evil.pkl"
    bad.write_bytes(pickle.dumps({1: _Evil()}))
    with pytest.raises(pickle.UnpicklingError):
        load_fedscale_trace(bad)


# ------------------------------------------------------------------ files
def _assert_same(a: AvailabilityTrace, b: AvailabilityTrace):
    assert a.num_clients == b.num_clients and a.duration_s == b.duration_s
    assert a.beyond_end == b.beyond_end
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.external_ids, b.external_ids)


def test_csv_and_npz_round_trips(tmp_path):
    tr = diurnal(25, seed=5, num_periods=1, slot_s=1234.5, eval_availability=0.3)
    # non-round times and non-index client ids must survive the round trip exactly
    tr = AvailabilityTrace(
        num_clients=tr.num_clients, times=tr.times + 0.1 * (tr.times > 0), states=tr.states,
        offsets=tr.offsets, duration_s=tr.duration_s + 0.1, beyond_end=tr.beyond_end,
        client_ids=np.arange(25) * 7 + 100,
    )
    save_interval_csv(tr, tmp_path / "t.csv")
    _assert_same(tr, load_interval_csv(tmp_path / "t.csv"))
    save_interval_npz(tr, tmp_path / "t.npz")
    _assert_same(tr, load_interval_npz(tmp_path / "t.npz"))
    plain = _small_trace()
    save_interval_csv(plain, tmp_path / "p.csv")
    back = load_interval_csv(tmp_path / "p.csv")
    assert back.client_ids is None
    _assert_same(plain, back)
    fed = tmp_path / "f.pkl"
    fed.write_bytes(pickle.dumps(FEDSCALE))
    ft = load_fedscale_trace(fed)
    save_interval_npz(ft, tmp_path / "f.npz")
    fb = load_interval_npz(tmp_path / "f.npz")
    _assert_same(ft, fb)
    np.testing.assert_array_equal(fb.client_duration_s, ft.client_duration_s)
    with pytest.raises(ValueError, match="NPZ"):
        save_interval_csv(ft, tmp_path / "f.csv")


def test_csv_hand_written_any_order_and_codes(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("client,time_s,state\n7,10,0\n3,0,AVL_EVAL\n7,0,2\n7,10,avl_train\n")
    tr = load_interval_csv(path)
    assert tr.client_ids.tolist() == [3, 7] and tr.beyond_end == "hold" and tr.duration_s == 10.0
    assert tr.state_at(10.0).tolist() == [EVAL, TRAIN]  # same-time rows: last in file wins
    path.write_text("client,time_s\n1,0\n")
    with pytest.raises(ValueError, match="lacks columns"):
        load_interval_csv(path)


# ------------------------------------------------------------------ real data
def test_reference_traces_fall_back_to_the_shipped_copy(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    assert load_reference_trace("syn_0").num_clients == 300  # no data folder at all
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))  # a data folder without the traces
    assert load_reference_trace("syn_0").num_clients == 300
    with pytest.raises(FileNotFoundError, match="path="):  # an explicit path is the only place looked
        load_reference_trace("syn_0", tmp_path)
    with pytest.raises(ValueError, match="unknown reference trace"):
        load_reference_trace("syn_90", tmp_path)


@needs_data(REFERENCE_FILE)
def test_reference_trace_statistics():
    """Fractions sampled every 600 s over the first 24 h, t = 0, 600, ..., 85800; the data folder's copy when
    there is one, else the copy shipped with felix-jax (the same file: test_data_fetch.py)."""
    folder = DATA if DATA is not None and (DATA / REFERENCE_FILE).is_file() else SHIPPED_DIR
    ts = np.arange(0.0, 86400.0, 600.0)
    expected = {
        ("mobiperf_2st", Tier.AVL_TRAIN): 17.3,
        ("mobiperf_3st_50", Tier.AVL_EVAL): 36.5,
        ("syn_20", Tier.AVL_TRAIN): 89.2,
        ("syn_50", Tier.AVL_TRAIN): 50.6,
        ("syn_0", Tier.AVL_TRAIN): 100.0,
    }
    for (name, tier), pct in expected.items():
        tr = load_reference_trace(name)  # the data home, else the shipped copy
        got = 100 * tr.fraction_in_state(tier, ts).mean()
        assert abs(got - pct) <= 0.05 + 1e-9, (name, tier, got)
    for name in REFERENCE_TRACE_NAMES:
        tr = load_reference_trace(name, folder)
        assert tr.num_clients == 300 and tr.client_ids.tolist() == list(range(1, 301))
        assert np.all(tr.state_at(0.0) == TRAIN)
    assert np.all(load_reference_trace("syn_50", folder).state_at(86400.0) == UN)
    assert load_reference_trace("mobiperf_2st", folder).duration_s == 536263.0
    ref = load_reference_clients(folder)
    assert ref.training_delay_s.min() == 2 and ref.training_delay_s.max() == 56
    assert np.median(ref.training_delay_s) == 10 and abs(ref.training_delay_s.mean() - 12.1) < 0.05
    assert ref.num_samples.sum() == 49326 and np.median(ref.num_samples) == 114


# ------------------------------------------------------------ damaged files name themselves
def _small_reference_npz(path: Path) -> Path:
    """The reference file's layout for two clients (ids 1, 2) and one trace, syn_0."""
    np.savez(path, client=np.array([1, 2]), training_delay_s=np.array([3.0, 4.0]), num_samples=np.array([10, 20]),
             syn_0_client=np.array([1, 2]), syn_0_time_s=np.zeros(2), syn_0_state=np.full(2, TRAIN, np.int8))
    return path


def _truncated_copy(src: Path, dst: Path, keep: float = 0.6) -> Path:
    raw = src.read_bytes()
    dst.write_bytes(raw[: int(len(raw) * keep)])
    return dst


def test_truncated_reference_trace_names_its_file(tmp_path):
    from felix_jax.traces import DataFileError

    good = _small_reference_npz(tmp_path / "ref.npz")
    assert load_reference_trace("syn_0", good).num_clients == 2
    bad = _truncated_copy(good, tmp_path / "ref_truncated.npz")
    for load in (lambda: load_reference_trace("syn_0", bad), lambda: load_reference_clients(bad)):
        with pytest.raises(DataFileError, match="ref_truncated.npz: cannot read it as the reference trace archive"):
            load()
    with pytest.raises(DataFileError) as err:
        load_reference_trace("syn_50", good)  # the archive lacks syn_50's arrays
    assert err.value.path == str(good) and "syn_50_client" in str(err.value)


def test_damaged_interval_and_fedscale_files_name_their_file(tmp_path):
    from felix_jax.traces import DataFileError

    trace = _small_trace()
    save_interval_npz(trace, tmp_path / "t.npz")
    bad_npz = _truncated_copy(tmp_path / "t.npz", tmp_path / "t_cut.npz")
    with pytest.raises(DataFileError, match="t_cut.npz: cannot read it as an interval NPZ trace"):
        load_interval_npz(bad_npz)
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("client,time_s,state\n0,0.0,AVL_TRAIN\n0,1O.0,UN_AVL\n")  # letter O in a number
    with pytest.raises(DataFileError, match="t.csv: line 3: time_s '1O.0' is not a number"):
        load_interval_csv(csv_path)
    js = tmp_path / "behave.json"
    js.write_text('{"1": {"active": [0.0], "inactive": [5.0], "finish_ti')  # cut mid-record
    with pytest.raises(DataFileError, match="behave.json: cannot read it as a FedScale client_behave_trace"):
        load_fedscale_trace(js)
    pkl = tmp_path / "behave.pkl"
    pkl.write_bytes(pickle.dumps({1: {"active": [0.0], "inactive": [5.0], "finish_time": 10.0}})[:-7])
    with pytest.raises(DataFileError, match="behave.pkl"):
        load_fedscale_trace(pkl)
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_interval_csv(tmp_path / "nowhere.csv")


def test_damaged_flash_json_names_its_file(tmp_path):
    from felix_jax.traces import DataFileError, flash_profile

    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "flash_benchmark2score.json").write_text('{"phone a": 100, "phone b": 2')
    with pytest.raises(DataFileError, match="flash_benchmark2score.json: cannot read it as FLASH's benchmark"):
        flash_profile(3, path=tmp_path)
