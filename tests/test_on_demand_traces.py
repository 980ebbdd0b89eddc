"""Traces as functions (traces/on_demand.py, traces/pcg64.py): the same answers as the tables.

* ``pcg64``: draw ``n`` of ``np.random.default_rng(seed)`` computed without the ones before it,
  bit for bit against numpy;
* ``SlotTrace`` against ``slot_bernoulli``'s table, ``CyclicTrace`` against ``restrict(arange(N) % M)``:
  ``state_at`` / ``next_change_after`` / ``state_of`` / ``next_change_of`` equal on random queries
  (hypothesis), at and next to change times, after random ``shifted`` / ``time_scaled`` chains;
* whole runs: ``trace_form=function`` gives the same ``metrics.csv`` and dispatches as the table.
"""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from felix_jax.experiment.registry import TABLE_ROWS_LIMIT, make_trace
from felix_jax.traces import always_available, pcg64, slot_bernoulli
from felix_jax.traces.availability import ChangeCursor
from felix_jax.traces.on_demand import CyclicTrace, SlotCursor, SlotTrace
from tests.test_scale import traces as table_traces


@pytest.mark.parametrize("seed", [0, 1, 2 ** 31 + 5])
def test_random_access_draws_equal_numpy(seed):
    n, stride = 70_000, 3  # past numpy's 2^15-client chunks of slot_bernoulli
    ref = np.random.default_rng(seed).random(n * stride).reshape(n, stride)
    state, inc = pcg64.seed_state(seed)
    base_hi, base_lo = pcg64.strided_states((state, inc), n, stride)
    for k in range(stride):
        (a_hi, c_hi), (a_lo, c_lo) = pcg64.split([*pcg64.jump(k + 1, inc)])
        hi, lo = pcg64.affine(a_hi, a_lo, c_hi, c_lo, base_hi, base_lo)
        np.testing.assert_array_equal(pcg64.uniform(hi, lo), ref[:, k])


@pytest.mark.parametrize("p", [0.0, 1e-300, 0.1, 0.5, 1 / 3, 0.9, 1 - 2 ** -53, 1.0])
def test_integer_threshold_is_the_float_comparison(p):
    rng = np.random.default_rng(5)
    hi, lo = rng.integers(0, 2 ** 64, (2, 200_000), dtype=np.uint64)
    # and states at the threshold: with the top 6 bits of hi zero there is no rotation, so the
    # output word is hi ^ lo, and hi = 0, lo = m << 11 draws exactly m * 2**-53 (m = T - 1, T, T + 1)
    t = int(pcg64.threshold(p))
    edge = np.array([m << 11 for m in (t - 1, t, t + 1) if 0 <= m < 2 ** 53], dtype=np.uint64)
    hi, lo = np.concatenate([hi, np.zeros(edge.size, np.uint64)]), np.concatenate([lo, edge])
    np.testing.assert_array_equal(pcg64.below(hi, lo, pcg64.threshold(p)), pcg64.uniform(hi, lo) < p)
    assert t == min(int(np.ceil(p * 2 ** 53)), 2 ** 53)


@pytest.mark.parametrize("seed", range(4))
def test_in_place_column_kernel_equals_the_step_by_step_draw(seed):
    """``pcg64.Column`` (a whole slot's draws in scratch buffers) gives ``below(affine(...))``'s
    booleans: random maps and states, lengths off the chunk size, states whose low-word sum carries,
    and thresholds at 0, 1/2, an odd p and 1."""
    rng = np.random.default_rng(seed)
    chunk = int(rng.integers(1, 300))
    n = int(rng.integers(1, 5 * chunk))
    s_hi, s_lo = rng.integers(0, 2 ** 64, (2, n), dtype=np.uint64)
    s_lo[: n // 3] = np.uint64(2 ** 64 - 1) - rng.integers(0, 4, n // 3, dtype=np.uint64)  # carries
    kernel = pcg64.Column(chunk)
    for _ in range(3):
        (a_hi, a_lo), (c_hi, c_lo) = (rng.integers(0, 2 ** 64, 2, dtype=np.uint64) for _ in range(2))
        for p in (0.0, 0.5, 1 / 3, 1.0):
            t = pcg64.threshold(p)
            want = pcg64.below(*pcg64.affine(a_hi, a_lo, c_hi, c_lo, s_hi, s_lo), t)
            got = kernel.below((a_hi, a_lo), (c_hi, c_lo), s_hi, s_lo, t, np.empty(n, bool))
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_one_draw_in_python_integers_is_numpys_draw(p):
    # the scalar path of one-client queries against numpy's own stream: draw k of client c is
    # rng.random() number c * stride + k, below p or not
    n, stride = 300, 7
    ref = np.random.default_rng(11).random(n * stride).reshape(n, stride) < p
    state, inc = pcg64.seed_state(11)
    base_hi, base_lo = pcg64.strided_states((state, inc), n, stride)
    t = int(pcg64.threshold(p))
    for k in range(stride):
        a, c = pcg64.jump(k + 1, inc)
        got = [pcg64.below_one(pcg64.join(base_hi[i], base_lo[i]), a, c, t) for i in range(n)]
        np.testing.assert_array_equal(got, ref[:, k])


def test_jump_composes_like_steps():
    state, inc = pcg64.seed_state(3)
    a, c = pcg64.jump(5, inc)
    s = state
    for _ in range(5):  # s <- s * MULT + inc, five times, by hand
        s = (s * pcg64.MULT + inc) % (1 << 128)
    assert (a * state + c) % (1 << 128) == s
    assert pcg64.jump(0, inc) == (1, 0)
    with pytest.raises(ValueError, match="forward"):
        pcg64.jump(-1, inc)
    with pytest.raises(TypeError, match="Generator"):
        pcg64.seed_state(np.random.default_rng(0))


def _queries(table, rng, n_random=120):
    """Times at random, at change times, just before them and a few periods on; random clients."""
    d = max(table.duration_s, 1e-3)
    ct = table._ct
    picks = ct[rng.integers(0, ct.size, 40)]
    ts = np.concatenate([rng.random(n_random) * 3 * d, picks, np.nextafter(picks, -np.inf).clip(0),
                         picks + d * rng.integers(1, 3, picks.size)])
    return ts, rng.integers(0, table.num_clients, ts.size)


def _assert_same(table, fn, rng):
    ts, cs = _queries(table, rng)
    np.testing.assert_array_equal(fn.state_at(ts, cs), table.state_at(ts, cs))
    for got, want in zip(fn.next_change_after(ts, cs), table.next_change_after(ts, cs)):
        np.testing.assert_array_equal(got, want)
    t0 = float(ts[0])
    np.testing.assert_array_equal(fn.state_at(t0), table.state_at(t0))  # every client at once
    for t in np.concatenate([ts[:4], ts[-120:-116], ts[-80:-76]]):  # one time, some clients (a refresh):
        # random times, change times and the times just before them
        np.testing.assert_array_equal(fn.state_at(t, cs), table.state_at(t, cs))
        np.testing.assert_array_equal(fn.state_at(float(t), cs[:1]), table.state_at(float(t), cs[:1]))
    for got, want in zip(fn.next_change_after(t0), table.next_change_after(t0)):
        np.testing.assert_array_equal(got, want)
    for t, c in zip(ts[:25], cs[:25]):
        assert fn.state_of(t, c) == table.state_of(t, c)
        assert fn.next_change_of(t, c) == table.next_change_of(t, c)
    assert fn.duration_s == table.duration_s and fn.beyond_end == table.beyond_end


transforms = st.lists(st.one_of(
    st.tuples(st.just("shift"), st.floats(0.0, 5e4, allow_nan=False)),
    st.tuples(st.just("shift"), st.integers(0, 40).map(lambda k: k * 30.0)),  # exactly at slot starts
    st.tuples(st.just("scale"), st.sampled_from([0.5, 1.0, 3.0, 7.3]))), max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), slots=st.integers(1, 40), slot_s=st.sampled_from([30.0, 600.0, 0.7, 1e-3]),
       p=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), beyond=st.sampled_from(["hold", "repeat"]),
       first=st.booleans(), end=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2 ** 32 - 1), chain=transforms,
       query_seed=st.integers(0, 1000))
def test_slot_trace_answers_as_its_table(n, slots, slot_s, p, beyond, first, end, seed, chain, query_seed):
    table = slot_bernoulli(n, p, num_slots=slots, slot_s=slot_s, seed=seed, beyond_end=beyond,
                           first_slot_available=first, end_state=end)
    fn = SlotTrace(n, p, slots, slot_s, seed, beyond_end=beyond, first_slot_available=first, end_state=end)
    for kind, value in chain:
        table = table.shifted(value) if kind == "shift" else table.time_scaled(value)
        fn = fn.shifted(value) if kind == "shift" else fn.time_scaled(value)
    _assert_same(table, fn, np.random.default_rng(query_seed))
    m = fn.materialized()
    np.testing.assert_array_equal(m._ct, table._ct)
    np.testing.assert_array_equal(m._cs, table._cs)
    np.testing.assert_array_equal(m._co, table._co)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=table_traces(grid=False), n=st.integers(1, 30), chain=transforms, query_seed=st.integers(0, 1000))
def test_cyclic_trace_answers_as_the_copied_rows(base, n, chain, query_seed):
    table = base.restrict(np.arange(n) % base.num_clients)
    fn = CyclicTrace(base, n)
    for kind, value in chain:
        table = table.shifted(value) if kind == "shift" else table.time_scaled(value)
        fn = fn.shifted(value) if kind == "shift" else fn.time_scaled(value)
    _assert_same(table, fn, np.random.default_rng(query_seed))
    if table.client_duration_s is not None:
        np.testing.assert_array_equal(fn.client_duration_s, table.client_duration_s)


def test_cursor_walks_the_same_changes():
    table = slot_bernoulli(500, 0.5, num_slots=50, slot_s=30.0, seed=4, beyond_end="repeat").shifted(45.0)
    fn = SlotTrace(500, 0.5, 50, 30.0, 4, beyond_end="repeat").shifted(45.0)
    a, b = ChangeCursor(table, 10.0), ChangeCursor(fn, 10.0)
    for t in np.linspace(11.0, 4000.0, 37):
        np.testing.assert_array_equal(b.advance(t), a.advance(t))
        assert b.peek_time() == a.peek_time()
    assert a.consumed == b.consumed > 10_000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 60), slots=st.integers(1, 30), slot_s=st.sampled_from([30.0, 600.0, 0.7]),
       p=st.sampled_from([0.0, 0.5, 0.9, 1.0]), beyond=st.sampled_from(["hold", "repeat"]), first=st.booleans(),
       seed=st.integers(0, 2 ** 32 - 1), chain=transforms, walk_seed=st.integers(0, 1000))
def test_slot_cursor_walks_the_generic_cursors_changes(n, slots, slot_s, p, beyond, first, seed, chain, walk_seed):
    """A slot trace's own cursor (slot by slot, from whole-slot columns) against the generic cursor's
    per-client chains on the table: the same clients in the same order, peeks and counts."""
    table = slot_bernoulli(n, p, num_slots=slots, slot_s=slot_s, seed=seed, beyond_end=beyond, first_slot_available=first)
    fn = SlotTrace(n, p, slots, slot_s, seed, beyond_end=beyond, first_slot_available=first)
    for kind, value in chain:
        table = table.shifted(value) if kind == "shift" else table.time_scaled(value)
        fn = fn.shifted(value) if kind == "shift" else fn.time_scaled(value)
    rng = np.random.default_rng(walk_seed)
    span = max(fn.duration_s, 1e-3) * (3 if beyond == "repeat" else 1.2)
    t0 = float(rng.random() * span / 4)
    a, b = ChangeCursor(table, t0), fn.change_cursor(t0)
    ct = table._ct[table._ct > t0]
    stops = np.concatenate([t0 + rng.random(12) * span, ct[:8], np.nextafter(ct[:8], -np.inf)])
    for t in np.sort(stops):
        np.testing.assert_array_equal(b.advance(t), a.advance(t))
        assert b.peek_time() == a.peek_time()
    assert b.consumed == a.consumed


@pytest.mark.parametrize("beyond, chain", [("repeat", ()), ("repeat", (("shift", 1234.5),)), ("hold", ()),
                                           ("repeat", (("scale", 7.3), ("shift", 100.0)))])
def test_long_rows_answer_one_client_queries_as_the_table(beyond, chain):
    # past 256 slot positions one-client queries draw blocks ahead instead of the whole row
    table = slot_bernoulli(40, 0.9, num_slots=600, slot_s=30.0, seed=9, beyond_end=beyond)
    fn = SlotTrace(40, 0.9, 600, 30.0, 9, beyond_end=beyond)
    for kind, value in chain:
        table = table.shifted(value) if kind == "shift" else table.time_scaled(value)
        fn = fn.shifted(value) if kind == "shift" else fn.time_scaled(value)
    rng = np.random.default_rng(1)
    ts, cs = _queries(table, rng, n_random=300)
    for t, c in zip(ts, cs):
        assert fn.state_of(t, c) == table.state_of(t, c)
        assert fn.next_change_of(t, c) == table.next_change_of(t, c)


def test_slot_cursor_is_the_registry_traces_cursor():
    # the run's slot regimes (repeat, 600 s and 30 s slots, offsets of whole and half seconds) get the
    # slot-by-slot cursor; slot times off the exact grid fall back to the generic one
    for trace in (make_trace("avail50", 300, 0, 600.0, 3600.0, form="function"),
                  make_trace("avail90", 300, 0, 30.0, 3600.0, form="function").shifted(1234.5)):
        assert isinstance(trace.change_cursor(0.0), SlotCursor)
    off_grid = SlotTrace(10, 0.5, 20, 30.0, 0, beyond_end="repeat").time_scaled(7.3)
    assert type(off_grid.change_cursor(0.0)) is ChangeCursor


def test_memory_is_per_client_stream_positions_only():
    fn = SlotTrace(100_000, 0.5, num_slots=2880, slot_s=30.0, seed=0, beyond_end="repeat")
    # 16 bytes a client (two uint64) and the per-slot tables: no (clients x slots) array
    assert fn.nbytes < 100_000 * 16 + 2880 * 64
    table_rows = 100_000 * (2 + 2879 * 0.5)
    assert table_rows * 9 > 50 * fn.nbytes


def test_trace_bytes_estimate_by_hand():
    """The memory check's trace estimate, worked out by hand. avail50, 1,000 clients, 600 s slots
    over a day: 144 slots, 1,000 x (2 + 143 x 2 x 0.5 x 0.5) = 73,500 rows, 26 bytes each while built;
    as a function: 24 bytes a client and the column budget (2**27 bytes, more than 2 columns of
    1,000). 30 s slots: 2,880 wanted, capped at a week of 600 s slots (1,008): 505,500 rows."""
    from felix_jax.experiment.registry import trace_bytes_estimate

    assert trace_bytes_estimate("avail50", 1000, 600.0, 86400.0, "table") == 73_500 * 26
    assert trace_bytes_estimate("avail50", 1000, 600.0, 86400.0, "auto") == 73_500 * 26  # under 2**24 rows
    assert trace_bytes_estimate("avail50", 1000, 600.0, 86400.0, "function") == 1000 * 24 + 2 ** 27
    assert trace_bytes_estimate("avail50", 1000, 30.0, 86400.0, "table") == 505_500 * 26
    # 10^8 clients as a function: two columns of 10^8 bytes pass the budget
    assert trace_bytes_estimate("avail50", 10 ** 8, 30.0, 86400.0, "auto") == 10 ** 8 * 24 + 2 * 10 ** 8
    assert trace_bytes_estimate("avail90", 1000, 600.0, 86400.0, "table") == pytest.approx(
        1000 * (2 + 143 * 2 * 0.9 * 0.1) * 26)
    assert trace_bytes_estimate("avail100", 1000, form="table") == 2 * 1000 * 26
    assert trace_bytes_estimate("avail100", 1000, form="function") == 0
    assert trace_bytes_estimate("mobiperf", 1000, form="table") == 0  # a file: checked when it is read


def test_make_trace_forms():
    # auto keeps the table while it is small, so a recorded run's trace (and its snapshot digest) is unchanged
    assert make_trace("avail50", 200, 3, 30.0, 3600.0, form="auto").form == "table"
    assert make_trace("avail50", 200, 3, 30.0, 3600.0, form="function").form == "function"
    assert make_trace("avail100", 10, 3, form="function").form == "cyclic"
    big = int(TABLE_ROWS_LIMIT / (2 + 143 * 0.5)) + 1000
    assert make_trace("avail50", big, 3, 600.0, 3600.0, form="auto").form == "function"
    with pytest.raises(ValueError, match="trace form"):
        make_trace("avail50", 10, 3, form="lazy")
    a = make_trace("avail90", 300, 7, 60.0, 7200.0, start_s=90.0, speedup=2.0, form="table")
    b = make_trace("avail90", 300, 7, 60.0, 7200.0, start_s=90.0, speedup=2.0, form="function")
    _assert_same(a, b, np.random.default_rng(0))
    c = CyclicTrace(always_available(1, 86400.0), 50)
    _assert_same(always_available(50, 86400.0), c, np.random.default_rng(1))


def test_restrict_and_digest():
    fn = SlotTrace(30, 0.5, 20, 60.0, 9, beyond_end="repeat").shifted(100.0)
    table = slot_bernoulli(30, 0.5, num_slots=20, slot_s=60.0, seed=9, beyond_end="repeat").shifted(100.0)
    sub, want = fn.restrict([4, 4, 29]), table.restrict([4, 4, 29])
    np.testing.assert_array_equal(sub._ct, want._ct)
    np.testing.assert_array_equal(sub._cs, want._cs)
    other = SlotTrace(30, 0.5, 20, 60.0, 10, beyond_end="repeat").shifted(100.0)
    assert fn.digest_parts() != other.digest_parts()  # another seed is another trace
    assert fn.digest_parts() != SlotTrace(30, 0.5, 20, 60.0, 9, beyond_end="repeat").digest_parts()


@pytest.mark.parametrize("strategy,availability,extra", [
    ("felix", "avail50", {}),
    ("oort-async-oracle", "avail90", {"trace_start_s": 1234.5, "trace_speedup": 3.0}),
])
def test_runs_equal_under_both_forms(tmp_path, strategy, availability, extra):
    from felix_jax.experiment.runner import run
    from felix_jax.experiment.presets import get_preset

    outs = []
    for form in ("table", "function"):
        sc = dataclasses.replace(get_preset("tiny"), strategy=strategy, availability=availability,
                                 num_clients=120, max_aggregations=6, trace_form=form, **extra)
        out = tmp_path / form
        run(sc, out, plot=False)
        outs.append(out)
    assert (outs[0] / "metrics.csv").read_bytes() == (outs[1] / "metrics.csv").read_bytes()
    assert (outs[0] / "events.csv").read_bytes() == (outs[1] / "events.csv").read_bytes()
    recorded = json.loads((outs[1] / "config.json").read_text())
    assert recorded["scenario"]["trace_form"] == "function"
