"""Population scale: the incremental server view equals the full recomputation.

Property tests (hypothesis) on random traces, hold and repeat, with shared and
per-client periods, and random sequences of event times: at every event the
incremental view (``ViewTracker``) equals ``refresh_view``'s recomputation from
``trace.state_at(now)``, notification counts equal ``notifications_between``,
and the next wake-up equals the earliest ``next_change_after``.
"""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from felix_jax.fleet.clientmap import ClientMap
from felix_jax.fleet.knowledge import Knowledge, ViewTracker, notifications_between, refresh_view
from felix_jax.traces import AvailabilityTrace, Tier
from felix_jax.traces.availability import ChangeCursor
from tests.conftest import REFERENCE_FILE, needs_data

STATES = [int(t) for t in Tier]


@st.composite
def traces(draw, grid: bool = True):
    """A random trace: a few clients, a few rows each, hold or repeat, maybe per-client periods."""
    n = draw(st.integers(1, 6))
    duration = draw(st.sampled_from([4.0, 7.5, 10.0, 24.0]))
    beyond = draw(st.sampled_from(["hold", "repeat"]))
    if grid:  # quarter seconds: every sum k * period + offset is exact in float
        time = st.integers(0, int(4 * duration)).map(lambda q: q / 4)
    else:
        time = st.floats(0.0, duration, allow_nan=False, allow_infinity=False)
    client, times, states = [], [], []
    for c in range(n):
        rows = draw(st.lists(st.tuples(time, st.sampled_from(STATES)), min_size=0, max_size=8))
        rows.sort(key=lambda r: r[0])
        for t, s in rows:
            client.append(c)
            times.append(t)
            states.append(s)
    periods = None
    if beyond == "repeat" and draw(st.booleans()):
        periods = np.array([draw(st.integers(1, int(4 * duration)).map(lambda q: q / 4)) for _ in range(n)])
    return AvailabilityTrace.from_rows(np.array(client, np.int64), np.array(times, float),
                                       np.array(states, np.int64), num_clients=n, duration_s=duration,
                                       beyond_end=beyond, client_duration_s=periods,
                                       initial_state=draw(st.sampled_from(STATES)))


def event_times(grid: bool = True):
    step = (st.integers(0, 40).map(lambda q: q / 4) if grid
            else st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False))
    return st.lists(st.tuples(step, st.sampled_from(["refresh", "count", "wake"])), min_size=1, max_size=25)


def full_view(trace, now, sees_eval_tier):
    view = ClientMap.create(np.ones(trace.num_clients, np.int64))
    refresh_view(Knowledge.ORACLE, view, trace, now, sees_eval_tier)
    return view.tier


def check_tracker(trace, steps, knowledge, sees_eval_tier):
    view = ClientMap.create(np.ones(trace.num_clients, np.int64))
    rng = np.random.default_rng(0)
    view.set_tier(slice(None), rng.integers(0, 3, trace.num_clients))  # a none-view holds what replies taught it
    blind = view.tier.copy()
    tracker = ViewTracker(knowledge, trace, sees_eval_tier)
    now = last_notify = 0.0
    for dt, op in steps:
        now += dt
        if op == "refresh":
            tracker.refresh(view, now, last_notify)
            view.check_index(0)  # the maintained trainable / evaluable sets follow the tier writes
            if knowledge is Knowledge.NONE:
                np.testing.assert_array_equal(view.tier, blind)
            else:
                np.testing.assert_array_equal(view.tier, full_view(trace, now, sees_eval_tier), err_msg=f"t={now}")
        elif op == "count" and knowledge is Knowledge.TIERTRACK and now > last_notify:
            assert tracker.notifications(now, last_notify) == notifications_between(trace, last_notify, now)
            last_notify = now
        elif op == "wake" and knowledge is not Knowledge.NONE:
            nt, _ = trace.next_change_after(now)
            assert tracker.next_change(now, last_notify) == float(np.min(nt))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), event_times(), st.sampled_from(list(Knowledge)), st.booleans())
def test_incremental_view_equals_full_recomputation(trace, steps, knowledge, sees_eval_tier):
    check_tracker(trace, steps, knowledge, sees_eval_tier)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(grid=False), event_times(grid=False), st.booleans())
def test_incremental_view_on_arbitrary_float_times(trace, steps, sees_eval_tier):
    check_tracker(trace, steps, Knowledge.TIERTRACK, sees_eval_tier)


@settings(max_examples=200, deadline=None)
@given(traces(), st.lists(st.integers(0, 60).map(lambda q: q / 4), min_size=1, max_size=20))
def test_cursor_yields_changes_between(trace, steps):
    cursor = ChangeCursor(trace, 0.0)
    t = 0.0
    for dt in steps:
        t1 = t + dt
        got = cursor.advance(t1)
        want, _, _ = trace.changes_between(t, t1) if t1 > t else (np.zeros(0, np.int64), None, None)
        np.testing.assert_array_equal(got, want)  # same clients, same (time, client) order
        t = t1
    assert cursor.consumed == notifications_between(trace, 0.0, t)


def test_cursor_on_a_large_slotted_trace_touches_only_what_changes():
    from felix_jax.traces import slot_bernoulli

    trace = slot_bernoulli(20_000, 0.5, num_slots=12, slot_s=60.0, seed=3)
    tracker = ViewTracker(Knowledge.ORACLE, trace, False)
    view = ClientMap.create(np.ones(trace.num_clients, np.int64))
    for now in [0.0, 10.0, 59.9, 60.0, 61.0, 200.0, 200.0, 719.0, 720.0, 5000.0]:
        tracker.refresh(view, now, 0.0)
        np.testing.assert_array_equal(view.tier, full_view(trace, now, False))
    assert math.isinf(tracker.next_change(5000.0, 0.0))  # hold after the last slot: nothing changes


@pytest.mark.parametrize("knowledge", ["oracle", "tiertrack"])
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_simulator_view_equals_recomputation_at_every_refresh(knowledge, mode):
    from felix_jax.traces import slot_bernoulli
    from tests.test_fleet import make_sim

    trace = slot_bernoulli(16, 0.5, num_slots=12, slot_s=10.0, seed=1).with_beyond_end("repeat")
    sim = make_sim(trace, np.linspace(5.0, 40.0, 16), mode=mode, knowledge=knowledge, concurrency=4, goal=2,
                   max_aggregations=25, max_s=3000.0)
    seen = []
    inner = sim.refresh_view

    def checked():
        inner()
        np.testing.assert_array_equal(sim.view.tier, full_view(trace, sim.now, sim.cfg.sees_eval_tier))
        sim.view.check_index(sim.round)
        seen.append(sim.now)

    sim.refresh_view = checked
    rec = sim.run()
    assert len(seen) > 10 and rec.end_time_s > 150.0  # past the 120 s period: repeats
    if knowledge == "tiertrack":
        assert rec.accounting.control_messages == notifications_between(trace, 0.0, rec.end_time_s)


@pytest.mark.parametrize("strategy", ["felix", "oort", "oort-async", "oort-async-oracle", "fedbuff"])
def test_maintained_selection_sets_equal_recomputation_at_every_selection(strategy):
    """Every knowledge mode, sync and async, with and without an eval tier: before each selection the
    view's maintained sets (trainable, evaluable, once-per-round, explored, trained, the explored
    durations in order, the trained clients in staleness order) equal their recomputation from the
    view's arrays."""
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.runner import build_simulator

    sim = build_simulator(get_preset("tiny").with_overrides({
        "strategy": strategy, "availability": "avail50", "slot_s": "60", "max_aggregations": "15",
        "target_accuracy": "none"}))
    inner, checks = sim.select_and_dispatch, []

    def checked(k, kind="train"):
        sim.view.check_index(sim.round)
        checks.append(kind)
        return inner(k, kind)

    sim.select_and_dispatch = checked
    sim.run()
    sim.view.check_index(sim.round)
    assert len(checks) >= 15  # sync: one selection a round


# ---------------------------------------------------------------- populations larger than the data
def test_pool_partition_serves_more_clients_than_samples():
    from felix_jax.data.partition import pool_partition

    labels = np.repeat(np.arange(10), 10)  # 100 samples
    sizes = np.arange(5000) % 7 + 1
    part = pool_partition(labels, sizes, alpha=0.1, seed=3)
    again = pool_partition(labels, sizes, alpha=0.1, seed=3)
    np.testing.assert_array_equal(part.index_table, again.index_table)  # seeded
    assert part.num_clients == 5000 and part.index_table.shape == (5000, 7) and part.num_samples == 100
    np.testing.assert_array_equal(part.counts, sizes)
    mask = part.valid_mask()
    assert part.index_table[mask].max() < 100 and (part.index_table[~mask] == 0).all()
    rows = np.where(mask, part.index_table, np.iinfo(np.int32).max)
    assert (np.diff(rows, axis=1) >= 0).all()  # each row ascending, as every partition lists it
    # Dirichlet(0.1) label skew: most clients hold mostly one class
    big = np.flatnonzero(sizes == 7)
    def top_share(p):
        return np.mean([np.bincount(labels[p.client_indices(c)], minlength=10).max() / 7 for c in big])

    assert top_share(part) > 0.6 > 0.45 > top_share(pool_partition(labels, sizes, alpha=100.0, seed=3))
    capped = pool_partition(labels, sizes, alpha=0.1, seed=3, max_count=4)
    assert capped.max_count == 4 and capped.counts.max() == 4


@needs_data(REFERENCE_FILE)  # partition=pool starts from the paper's per-client sizes
def test_pool_scenario_runs_a_population_larger_than_the_data():
    from felix_jax.experiment.runner import build_simulator
    from felix_jax.experiment.scenario import Scenario

    sc = Scenario(dataset="digits", model="mlp", partition="pool", num_clients=5000, availability="avail50",
                  strategy="felix", concurrency=20, aggregation_goal=5, target_accuracy=None, max_aggregations=3,
                  batch_size=4, local_mode="steps", local_steps=1)
    sim = build_simulator(sc)
    assert sim.engine.data.num_clients == 5000 > 1437
    rec = sim.run()
    assert rec.stop_reason == "max_aggregations"
    with pytest.raises(ValueError, match="pool"):
        Scenario(partition="pools")


# ---------------------------------------------------------------- per-event costs at scale, same results
def naive_changes(trace):
    """Per client, in Python: reachable rows, the last of each same-time group, state changes only."""
    times, states, offsets = [], [], [0]
    for c in range(trace.num_clients):
        lo, hi = trace.offsets[c], trace.offsets[c + 1]
        period = trace.duration_s if trace.client_duration_s is None else trace.client_duration_s[c]
        rows = [(float(t), int(s)) for t, s in zip(trace.times[lo:hi], trace.states[lo:hi])
                if trace.beyond_end == "hold" or t < period]
        rows = [r for i, r in enumerate(rows) if i + 1 == len(rows) or rows[i + 1][0] != r[0]]
        rows = [r for i, r in enumerate(rows) if i == 0 or rows[i - 1][1] != r[1]]
        times += [t for t, _ in rows]
        states += [s for _, s in rows]
        offsets.append(len(times))
    return np.array(times, float), np.array(states, np.int8), np.array(offsets, np.int64)


@settings(max_examples=200, deadline=None)
@given(traces())
def test_compact_changes_equal_a_per_client_compaction(trace):
    t, s, o = naive_changes(trace)
    np.testing.assert_array_equal(trace._ct, t)
    np.testing.assert_array_equal(trace._cs, s)
    np.testing.assert_array_equal(trace._co, o)


def test_unsorted_times_name_their_client():
    with pytest.raises(ValueError, match="within client 1: row 3"):
        AvailabilityTrace(num_clients=2, times=[0.0, 0.0, 5.0, 3.0], states=[0, 0, 1, 2], offsets=[0, 1, 4],
                          duration_s=9.0)


@pytest.mark.parametrize("seed", range(20))
def test_eval_selection_over_trained_clients_equals_the_full_pass(seed):
    from felix_jax.policies.selectors.base import SelectionContext
    from felix_jax.policies.selectors.tierselect_eval import TierSelectEvalConfig, make_tierselect_eval
    from felix_jax.policies.selectors.tierselect_math import select_for_eval

    rng = np.random.default_rng(seed)
    n, busy_p = (300, 0.3) if seed % 2 else (5000, 0.97)  # the latter: the staleness walk reads many chunks
    view = dataclasses.replace(ClientMap.create(rng.integers(1, 50, n)), tier=rng.integers(0, 3, n).astype(np.int8),
                               busy=rng.random(n) < busy_p,
                               times_trained=np.where(rng.random(n) < 0.4, rng.integers(1, 4, n), 0),
                               utility_round=np.where(rng.random(n) < 0.7, rng.integers(0, 10, n), -1))
    current, k, min_age = 12, int(rng.integers(0, 40)), int(rng.integers(0, 6))
    ctx = SelectionContext(view, view.evaluable(), current, 0.0, rng)
    got, _ = make_tierselect_eval(TierSelectEvalConfig(min_age=min_age)).select(None, ctx, k)
    want = select_for_eval(view.times_trained > 0, view.tier, view.busy, view.utility_round, current, k, min_age)
    np.testing.assert_array_equal(got, want[ctx.eligible[want]])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=80), st.sampled_from([np.float64, np.int64]),
       st.sampled_from([4, 1024]), st.integers(-3, 16), st.integers(-3, 20))
def test_sorted_values_equal_a_sorted_list(ops, dtype, load, a, b):
    """The view's sorted multisets (T_pref's durations, the staleness order): inserts and removals, with
    duplicates, chunks split and merged (load 4), always equal the sorted list of what is in, and every
    read the selectors make (len, an index, a slice, searchsorted) is the sorted array's."""
    from felix_jax.fleet.clientmap import _SortedValues

    held = [dtype(3), dtype(3), dtype(1)]
    sv = _SortedValues(np.array(held, dtype), load=load)
    seq = sv.values()  # live: later writes show through it
    for add, v in ops * 20:
        if add or dtype(v) not in held:
            sv.add(dtype(v))
            held.append(dtype(v))
        else:
            sv.remove(dtype(v))
            held.remove(dtype(v))
    want = np.sort(np.array(held, dtype))
    np.testing.assert_array_equal(np.asarray(seq), want)
    assert np.asarray(seq).dtype == dtype and seq.dtype == dtype and len(seq) == len(sv) == want.size
    assert all(len(c) <= 2 * load for c in sv._chunks) and sum(map(len, sv._chunks)) == want.size
    np.testing.assert_array_equal(seq[a:b], want[a:b])
    for i in (a, b, -1, 0):
        if -want.size <= i < want.size:
            assert seq[i] == want[i]
        else:
            with pytest.raises(IndexError):
                seq[i]
    for x in (a, b, 3, 12):
        for side in ("left", "right"):
            assert seq.searchsorted(dtype(x), side=side) == np.searchsorted(want, dtype(x), side=side)
    with pytest.raises(KeyError):
        sv.remove(dtype(99))


def test_sorted_values_cost_does_not_grow_with_the_count():
    """An insert and a removal touch one chunk: at 10^6 values they copy ~10^3, not the values after the
    slot (a single buffer moved half a million values an operation on average)."""
    from felix_jax.fleet.clientmap import _SortedValues

    sv = _SortedValues(np.arange(0, 2_000_000, 2, dtype=np.int64), load=1024)
    before = [id(c) for c in sv._chunks]
    sv.add(np.int64(1_000_001))
    sv.remove(np.int64(4))
    after = [id(c) for c in sv._chunks]
    assert sum(x != y for x, y in zip(before, after)) == 2  # two chunks rewritten, the rest untouched
    assert max(map(len, sv._chunks)) <= 2048 and len(sv) == 1_000_000


@pytest.mark.parametrize("knowledge,interruption,frees_slot",
                         [("tiertrack", "resume", False), ("none", "abandon", False), ("oracle", "resume", True),
                          ("tiertrack", "abandon", True)])
def test_in_flight_count_equals_the_tasks_in_flight(knowledge, interruption, frees_slot):
    import dataclasses

    from felix_jax.traces import slot_bernoulli
    from tests.test_fleet import make_sim

    trace = slot_bernoulli(16, 0.5, num_slots=12, slot_s=10.0, seed=2).with_beyond_end("repeat")
    sim = make_sim(trace, np.linspace(5.0, 60.0, 16), knowledge=knowledge, concurrency=5, goal=2,
                   max_aggregations=30, max_s=3000.0, timeout_s=40.0)
    sim.cfg = dataclasses.replace(sim.cfg, interruption=interruption, timeout_frees_slot=frees_slot)
    checks = []
    inner = sim.mode.refill

    def checked(s):
        for kind in ("train", "eval"):
            assert s.in_flight_count(kind) == len(s.in_flight(kind))
        checks.append(s.in_flight_count("train"))
        inner(s)

    sim.mode.refill = checked
    sim.run()
    assert len(checks) > 20 and max(checks) > 0
    sim._in_flight_n = None  # as after restore(): counted from the tasks
    assert sim.in_flight_count("train") == len(sim.in_flight("train"))


@pytest.mark.parametrize("seed", range(6))
def test_block_counts_follow_every_write_and_find_the_ranked_ids(seed):
    """The view's per-block counts of its trainable / evaluable / once-per-round masks stay equal to
    their recomputation over random writes across many blocks, and the ids at random ranks found from
    them are the walk's (and ``flatnonzero``'s)."""
    from felix_jax.fleet.clientmap import BLOCK_ROWS, block_counts
    from felix_jax.policies.selectors.oort import _ids_at_ranks, _ids_at_ranks_counted

    rng = np.random.default_rng(seed)
    n = int(rng.integers(BLOCK_ROWS, 6 * BLOCK_ROWS))
    view = ClientMap.create(np.ones(n, np.int64))
    view.set_tier(slice(None), rng.integers(0, 3, n))
    view.trainable(0, True)  # the once-per-round set exists from here on
    for step in range(30):
        many = rng.random(n) < rng.uniform(0, 0.3)  # a slot boundary's worth, or a few clients
        clients = np.flatnonzero(many) if step % 3 == 0 else rng.choice(n, int(rng.integers(1, 40)), replace=False)
        view.set_tier(clients, rng.integers(0, 3, clients.size))
        for c in rng.choice(n, 5, replace=False).tolist():
            view.set_busy(c, bool(rng.random() < 0.5))
            view.mark_selected(c, 0)
        for c in rng.choice(n, int(rng.integers(0, 60)), replace=False).tolist():  # explored, some twice
            view.record_utility(c, float(rng.random()), 0)
        view.check_index(0)  # the explored counts of each mask too
    for mask in (view.trainable(0, False), view.evaluable(), view.trainable(0, True)):
        counts, rows = view.block_counts(mask)
        assert rows == BLOCK_ROWS
        np.testing.assert_array_equal(counts, block_counts(np.asarray(mask)))
        explored = np.asarray(mask) & (view.utility_round >= 0)
        num_x, counts_x, rows_x = view.explored_block_counts(mask)
        assert rows_x == BLOCK_ROWS and num_x == int(np.count_nonzero(explored)) > 0
        np.testing.assert_array_equal(counts_x, block_counts(explored))
        ids = np.flatnonzero(mask)
        ranks = rng.choice(ids.size, min(64, ids.size), replace=False)
        found = _ids_at_ranks_counted(lambda a, b: mask[a:b], counts, rows, ranks)
        np.testing.assert_array_equal(found, ids[ranks])
        np.testing.assert_array_equal(found, _ids_at_ranks(lambda a, b: mask[a:b], ranks))
    assert view.block_counts(np.asarray(view.evaluable()).copy()) is None  # not a mask the view keeps
    assert view.explored_block_counts(np.asarray(view.evaluable()).copy()) is None


@pytest.mark.parametrize("seed", range(6))
def test_oort_picks_the_same_from_the_views_explored_counts_as_from_the_explored_ids(seed):
    """Oort reads how many eligible clients are explored, and where the unexplored ones are, from the
    view's maintained counts when the eligible mask is one the view keeps, and lists the explored
    eligible ids otherwise: over random fleets, explorations and requests (exploring, exploiting and
    both), every variant picks the same clients with the same state either way."""
    from felix_jax.fleet.clientmap import BLOCK_ROWS
    from felix_jax.policies.selectors.base import SelectionContext
    from felix_jax.policies.selectors.oort import make_oort_selector
    from felix_jax.policies.selectors.oort_math import OORT_VARIANTS

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3 * BLOCK_ROWS))
    view = ClientMap.create(rng.integers(1, 200, n), rng.uniform(5, 50, n))
    view.set_tier(slice(None), np.where(rng.random(n) < rng.uniform(0.2, 1.0), Tier.AVL_TRAIN, Tier.UN_AVL))
    for c in rng.choice(n, int(rng.integers(0, n)), replace=False).tolist():
        view.record_utility(c, float(rng.random() * 10), int(rng.integers(0, 5)))
        view.record_training(c, float(rng.uniform(5, 60)))
    for name, variant in OORT_VARIANTS.items():
        sel = make_oort_selector(variant())
        states = [sel.init(), sel.init()]
        for call in range(12):
            k, r = int(rng.integers(1, 40)), 5 + call // 3
            once = bool(rng.random() < 0.5)
            kept = view.trainable(r, once)
            got = []
            for i, mask in enumerate((kept, np.asarray(kept).copy())):
                ctx = SelectionContext(view, mask, r, 0.0, np.random.default_rng([seed, call]),
                                       num_eligible=view.num_trainable(r, once))
                clients, states[i] = sel.select(states[i], ctx, k)
                got.append(clients)
            np.testing.assert_array_equal(got[0], got[1], err_msg=f"{name}, call {call}")
            assert repr(states[0]) == repr(states[1])
            for c in got[0][:3].tolist():  # some picks report back: explored from now on
                view.record_utility(c, float(rng.random() * 10), r)


def test_view_columns_are_int32_and_staleness_keys_do_not_overflow():
    """The view's integer columns are int32 (16 bytes a client less than int64); the staleness keys
    ``utility_round * N + id`` are int64, so rounds near 2**31 order correctly, maintained or rebuilt."""
    n = 8
    view = ClientMap.create(np.arange(1, n + 1))
    for name in ("num_samples", "utility_round", "last_selected_round", "times_trained"):
        assert getattr(view, name).dtype == np.int32, name
    rounds = [2 ** 31 - 1 - 3 * i for i in range(n)]  # round * N passes 2**31 many times over
    for c, r in enumerate(rounds):
        view.record_training(c, 1.0)
        view.record_utility(c, 0.5, r)
    view.check_index(rounds[0])  # the maintained order equals its rebuild from the int32 arrays
    keys = np.asarray(view.staleness_order())
    assert keys.dtype == np.int64 and view.staleness_order().dtype == np.int64
    np.testing.assert_array_equal(keys // n, sorted(rounds))
    np.testing.assert_array_equal(keys % n, np.argsort(rounds, kind="stable"))
    with pytest.raises(ValueError, match="2\\*\\*31"):
        ClientMap.create(np.array([1, 2 ** 31]))


@pytest.mark.parametrize("seed", range(8))
def test_once_per_round_mask_follows_rounds_without_a_pass_over_n(seed):
    """The once-per-round set moves to a new round by rewriting only the clients picked since the last
    round's mask (no pass over N): over random picks, tier and busy writes, rounds that advance by
    zero, one or several (the mask asked for at some rounds only, picks made before a round's mask is
    asked), whole-fleet rewrites, and a round that goes back, it equals its recomputation from the arrays."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3 * 4096))
    view = ClientMap.create(np.ones(n, np.int64))
    view.set_tier(slice(None), rng.integers(0, 3, n))
    r = 0
    view.trainable(r, True)
    for step in range(60):
        r += int(rng.choice([0, 0, 1, 1, 2, 3]))
        if step == 40:
            r -= 2  # a round before the mask's (a restored or hand-driven view): recomputed
        for c in rng.choice(n, int(rng.integers(1, 30)), replace=False).tolist():
            view.mark_selected(c, r)
            view.set_busy(c, bool(rng.random() < 0.5))
        if step % 4 == 0:
            clients = rng.choice(n, int(rng.integers(1, n)), replace=False)
            view.set_tier(clients, rng.integers(0, 3, clients.size))
        elif step % 7 == 0:  # every client at once (a slot boundary's whole-array rewrite)
            view.set_tier(slice(None), rng.integers(0, 3, n))
        if rng.random() < 0.6:
            view.check_index(r)
            assert view.num_trainable(r, True) == int(np.count_nonzero(
                view.trainable(r, False) & (view.last_selected_round != r)))
    index = view._index()
    assert len(index.once_marked) <= 30 * 60  # only the picks are listed, never the population


@pytest.mark.parametrize("seed", range(8))
def test_random_selector_by_rank_picks_what_choice_over_the_eligible_ids_picks(seed):
    """FedAvg / FedBuff's uniform pick finds its clients by rank (the view's block counts, or the walk
    for a mask the view does not keep): the same clients, from the same stream, as ``rng.choice`` over
    ``flatnonzero(eligible)``, with or without the caller's count of the eligible clients."""
    from felix_jax.fleet.clientmap import BLOCK_ROWS
    from felix_jax.policies.selectors.base import SelectionContext
    from felix_jax.policies.selectors.random_selector import make_random_selector

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5 * BLOCK_ROWS))
    view = ClientMap.create(np.ones(n, np.int64))
    view.set_tier(slice(None), np.where(rng.random(n) < rng.uniform(0.01, 1.0), Tier.AVL_TRAIN, Tier.UN_AVL))
    select = make_random_selector().select
    for mask in (view.trainable(0, False), np.asarray(view.trainable(0, False)).copy()):
        ids = np.flatnonzero(mask)
        for k in (1, 7, 300, ids.size + 5):
            for counted in (None, ids.size):
                ctx = SelectionContext(view, mask, 0, 0.0, np.random.default_rng(seed), num_eligible=counted)
                got, _ = select(None, ctx, k)
                want = np.sort(np.random.default_rng(seed).choice(ids, min(k, ids.size), replace=False)) \
                    if ids.size else np.zeros(0, np.int64)
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(10))
def test_oort_exploration_by_rank_draws_what_choice_over_the_ids_draws(seed):
    from felix_jax.policies.selectors.oort import _ids_at_ranks

    rng = np.random.default_rng(seed)
    mask = rng.random(int(rng.integers(1, 120_000))) < rng.uniform(0.01, 1.0)
    ids = np.flatnonzero(mask)
    k = int(rng.integers(1, min(65, max(ids.size, 1)) + 1)) if ids.size else 0
    a = np.random.default_rng(seed).choice(ids, k, replace=False)
    b = _ids_at_ranks(lambda start, stop: mask[start:stop], np.random.default_rng(seed).choice(ids.size, k, replace=False))
    np.testing.assert_array_equal(a, b)
