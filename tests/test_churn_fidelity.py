"""Where churn decides: the trace start offset, the oracle's departure semantics, FedScale's Oort
in async refills, and what the eval tier did (every number here is hand-computed or compared with
an independent construction)."""

import json
import math

import numpy as np
import pytest

from felix_jax.experiment import Scenario
from felix_jax.experiment.runner import run as run_experiment
from felix_jax.experiment.registry import make_trace
from felix_jax.fleet import FleetConfig
from felix_jax.options import OptionError
from felix_jax.policies import make_selector, selector_config
from felix_jax.policies.selectors.base import SelectionContext
from felix_jax.policies.selectors.oort_math import split_explore_exploit
from felix_jax.fleet.clientmap import ClientMap
from felix_jax.traces import AvailabilityTrace
from tests.conftest import REFERENCE_FILE, needs_data
from tests.test_fleet import E, T, U, make_sim, trace_of


# ------------------------------------------------------------------ the trace start offset
def _random_trace(rng, n, beyond_end, per_client_period):
    """Integer change times (exact in float64), so a shift by an integer is exact too."""
    lists_t, lists_s = [], []
    duration = 100
    for _ in range(n):
        k = int(rng.integers(0, 8))
        times = [0] + sorted(int(x) for x in rng.integers(1, duration, k))
        lists_t.append(times)
        lists_s.append([int(x) for x in rng.integers(0, 3, len(times))])
    periods = None
    if per_client_period:
        periods = np.array([max(max(t) + 1, int(rng.integers(50, duration + 1))) for t in lists_t], float)
    tr = AvailabilityTrace.from_client_lists(lists_t, lists_s, duration_s=float(duration), beyond_end=beyond_end)
    if periods is not None:
        tr = AvailabilityTrace(tr.num_clients, tr.times, tr.states, tr.offsets, tr.duration_s, beyond_end,
                               client_duration_s=periods)
    return tr


@pytest.mark.parametrize("beyond_end,per_client", [("hold", False), ("repeat", False), ("repeat", True)])
@pytest.mark.parametrize("start", [0, 1, 37, 100, 250])
def test_shifted_trace_reads_the_original_later(beyond_end, per_client, start):
    rng = np.random.default_rng(start + 7 * per_client)
    tr = _random_trace(rng, 20, beyond_end, per_client)
    sh = tr.shifted(float(start))
    ts = np.arange(0, 400, 0.5)
    np.testing.assert_array_equal(sh.state_at(ts[:, None]), tr.state_at(ts[:, None] + start))
    for c in range(tr.num_clients):  # the one-client queries the simulator uses agree too
        for t in (0.0, 3.0, 49.5, 99.0, 150.0):
            assert sh.state_of(t, c) == tr.state_of(t + start, c)
            nt, ns = sh.next_change_of(t, c)
            if math.isfinite(nt):
                assert sh.state_of(nt, c) == ns == tr.state_of(nt + start, c)
                assert tr.state_of(nt + start - 0.25, c) == sh.state_of(t, c) or nt - t <= 0.25
    assert sh.beyond_end == beyond_end


def test_shifted_refuses_a_bad_offset():
    tr = trace_of([(0, T)])
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="start_s"):
            tr.shifted(bad)
    assert tr.shifted(0.0) is tr


@pytest.mark.parametrize("beyond_end,per_client", [("hold", False), ("repeat", False), ("repeat", True)])
@pytest.mark.parametrize("speedup", [0.5, 2.0, 3.0, 4.0])
def test_a_time_scaled_trace_reads_the_original_faster(beyond_end, per_client, speedup):
    # integer change times and power-of-two or small speedups at sample times between changes: the
    # division is exact or the samples lie far from any change, so states compare exactly
    rng = np.random.default_rng(11 + int(speedup * 2) + per_client)
    tr = _random_trace(rng, 20, beyond_end, per_client)
    fast = tr.time_scaled(speedup)
    ts = np.arange(0, 400, 0.5) + 0.25 / speedup / 4  # never on a change of either trace
    np.testing.assert_array_equal(fast.state_at(ts[:, None]), tr.state_at(ts[:, None] * speedup))
    assert fast.duration_s == tr.duration_s / speedup and fast.beyond_end == beyond_end
    if per_client:
        np.testing.assert_array_equal(fast.client_duration_s, tr.client_duration_s / speedup)
    # a change 30 s into the original comes 10 s into the three-times-faster one
    three = trace_of([(0, T), (30, U), (60, E)]).time_scaled(3.0)
    assert [three.state_of(t, 0) for t in (0.0, 9.9, 10.0, 19.9, 20.0)] == [T, T, U, U, E]
    assert three.next_change_of(0.0, 0) == (10.0, U)
    assert tr.time_scaled(1.0) is tr
    for bad in (0.0, -2.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="speedup"):
            tr.time_scaled(bad)


@needs_data(REFERENCE_FILE)
def test_a_speedup_applies_after_the_start_offset():
    # run time t reads the trace at start + speedup * t
    fast = make_trace("ref:mobiperf_3st_50", 300, seed=0, start_s=600.0, speedup=3.0, horizon_s=7200.0)
    plain = make_trace("ref:mobiperf_3st_50", 300, seed=0)
    ts = np.array([0.0, 100.25, 1000.25, 7000.25])
    np.testing.assert_array_equal(fast.state_at(ts[:, None]), plain.state_at(600.0 + 3.0 * ts[:, None]))
    assert fast.duration_s == (plain.duration_s - 600.0) / 3.0


def test_a_speedup_run_equals_the_run_on_a_hand_scaled_trace_file(tmp_path):
    per_client = [[(0, "AVL_TRAIN"), (30 + 6 * c, "UN_AVL"), (90 + 12 * c, "AVL_EVAL"), (150 + 12 * c, "AVL_TRAIN")]
                  for c in range(12)]
    _write_csv(tmp_path / "orig.csv", [(c, t, s) for c, rows in enumerate(per_client) for t, s in rows],
               600, "repeat")
    _write_csv(tmp_path / "fast.csv", [(c, t / 2, s) for c, rows in enumerate(per_client) for t, s in rows],
               300, "repeat")
    base = {"max_aggregations": 25, "target_accuracy": None, "strategy": "felix", "eval_selector.min_age": 2}
    sc = Scenario(name="tiny", model="mlp", num_clients=12, concurrency=4, aggregation_goal=2, learning_rate=0.1)
    run_experiment(sc.with_overrides({**base, "availability": str(tmp_path / "orig.csv"), "trace_speedup": 2}),
                   tmp_path / "a", plot=False)
    run_experiment(sc.with_overrides({**base, "availability": str(tmp_path / "fast.csv")}), tmp_path / "b",
                   plot=False)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    assert json.loads((tmp_path / "a" / "config.json").read_text())["scenario"]["trace_speedup"] == 2
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["interrupted_tasks"] > 0
    for bad in (0, -1, "inf"):
        with pytest.raises(OptionError, match="trace_speedup"):
            sc.with_overrides({"trace_speedup": bad})


def _write_csv(path, rows, duration, beyond_end):
    lines = [f"# duration_s={duration}", f"# beyond_end={beyond_end}", "client,time_s,state"]
    lines += [f"{c},{t},{s}" for c, t, s in rows]
    path.write_text("\n".join(lines) + "\n")


def _hand_shift_repeat(per_client_rows, period, start):
    """The trace as seen from ``start``, by hand: rotate each client's period by start mod period."""
    phase = start % period
    out = []
    for c, rows in enumerate(per_client_rows):
        state_at_phase = [s for t, s in rows if t <= phase][-1]
        new = [(0, state_at_phase)]
        new += [(t - phase, s) for t, s in rows if t > phase]
        new += [(t + period - phase, s) for t, s in rows if t < phase]
        out += [(c, t, s) for t, s in new]
    return out


def test_an_offset_run_equals_the_run_on_a_hand_shifted_trace_file(tmp_path):
    # 12 clients (the tiny preset), 200 s cycles of train / eval / away, each client its own phase
    period, start = 200, 530
    per_client = []
    for c in range(12):
        a, b = 10 + 7 * c, 60 + 9 * c
        per_client.append([(0, "AVL_TRAIN"), (a, "UN_AVL"), (b, "AVL_EVAL"), (b + 20, "AVL_TRAIN")])
    _write_csv(tmp_path / "orig.csv", [(c, t, s) for c, rows in enumerate(per_client) for t, s in rows],
               period, "repeat")
    _write_csv(tmp_path / "shifted.csv", _hand_shift_repeat(per_client, period, start), period, "repeat")
    base = {"max_aggregations": 25, "target_accuracy": None, "strategy": "felix", "eval_selector.min_age": 2}
    sc = Scenario(name="tiny", model="mlp", num_clients=12, concurrency=4, aggregation_goal=2, learning_rate=0.1)
    run_experiment(sc.with_overrides({**base, "availability": str(tmp_path / "orig.csv"),
                                      "trace_start_s": start}), tmp_path / "a", plot=False)
    run_experiment(sc.with_overrides({**base, "availability": str(tmp_path / "shifted.csv")}), tmp_path / "b",
                   plot=False)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["scenario"]["trace_start_s"] == start
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["interrupted_tasks"] > 0  # churn is at work in this run


def test_offset_keeps_synthetic_slots_independent():
    # avail50: the first slot is forced available; from an offset of one slot on it is not
    base = make_trace("avail50", 400, seed=3, slot_s=600.0, horizon_s=3600.0)
    shifted = make_trace("avail50", 400, seed=3, slot_s=600.0, horizon_s=3600.0, start_s=600.0)
    assert base.state_at(0.0).min() == T  # everyone trains in the first slot
    np.testing.assert_array_equal(shifted.state_at(0.0), base.state_at(600.0))
    assert (shifted.state_at(0.0) == T).mean() < 0.7


@needs_data(REFERENCE_FILE)
def test_offset_applies_to_a_reference_trace():
    ref = make_trace("ref:syn_50", 300, seed=0, start_s=1800.0)
    np.testing.assert_array_equal(ref.state_at(np.array([0.0, 10.0, 700.0])[:, None]),
                                  make_trace("ref:syn_50", 300, seed=0).state_at(np.array([1800.0, 1810.0, 2500.0])[:, None]))


def test_trace_start_is_validated_and_listed():
    with pytest.raises(OptionError, match="trace_start_s"):
        Scenario(trace_start_s=-5.0)
    with pytest.raises(OptionError, match="oracle_departure"):
        Scenario(oracle_departure="maybe")


# ------------------------------------------------------------------ the oracle's departure
# client 0 leaves at 5 mid-task (10 s of work) and returns at 400; client 1 is always there
LEAVES = trace_of([(0, T), (5, U), (400, T)], [(0, T)])


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_oracle_keeps_or_frees_the_slot_of_a_client_that_left(mode):
    kw = dict(knowledge="oracle", concurrency=1, max_aggregations=1, seed=2, mode=mode, goal=1,
              aggregator="fedbuff" if mode == "async" else "fedavg")
    keep = make_sim(LEAVES, [10.0, 10.0], oracle_departure="keep_slot", **kw).run()
    free = make_sim(LEAVES, [10.0, 10.0], oracle_departure="free_slot", **kw).run()
    # keep_slot: the task holds its slot until client 0 resumes at 400 with 5 s left (the 90 s timer
    # fires but frees nothing); free_slot: client 1 is dispatched at the departure, done at 15
    assert keep.aggregation_times == [0.0, 405.0]
    assert free.aggregation_times == [0.0, 15.0]
    assert keep.accounting.detached_tasks == 0 and free.accounting.detached_tasks == 1
    assert [c for _, c, _, _ in free.accounting.dispatch_log] == [0, 1]


def test_oracle_departure_defaults_to_keeping_the_slot():
    assert FleetConfig().oracle_departure == "keep_slot" == Scenario().oracle_departure
    assert not FleetConfig(knowledge="oracle").detaches_on_departure
    assert FleetConfig(knowledge="oracle", oracle_departure="free_slot").detaches_on_departure
    assert FleetConfig(knowledge="tiertrack").detaches_on_departure


def test_felix_oracle_is_felix_with_oracle_knowledge():
    from felix_jax.experiment.strategies import STRATEGIES

    felix, oracle = STRATEGIES["felix"], STRATEGIES["felix-oracle"]
    assert oracle.knowledge.value == "oracle" and felix.knowledge.value == "tiertrack"
    assert (oracle.mode, oracle.selector, oracle.aggregator, oracle.eval_selector) == (
        felix.mode, felix.selector, felix.aggregator, felix.eval_selector)


# ------------------------------------------------------------------ FedScale's Oort in async refills
def test_binomial_split_takes_the_drawn_explore_count():
    assert split_explore_exploit(1, 0.9, 10, 5, "binomial_explore", explore_draw=1) == (1, 0)
    assert split_explore_exploit(1, 0.9, 10, 5, "binomial_explore", explore_draw=0) == (0, 1)
    assert split_explore_exploit(13, 0.5, 3, 50, "binomial_explore", explore_draw=6) == (3, 10)
    assert split_explore_exploit(1, 0.9, 10, 5, "floor_explore") == (0, 1)  # FedScale's own split
    with pytest.raises(ValueError, match="explore_draw"):
        split_explore_exploit(2, 0.9, 10, 5, "binomial_explore")


def _replies_to_explore_all(variant, n=300, replies=1500, seed=0):
    """Drive the selector as an async server does: one client per refill, its reply recorded."""
    rng = np.random.default_rng(seed)
    view = ClientMap.create(np.full(n, 40), rng.uniform(5, 60, n))
    view.set_tier(slice(None), np.full(n, T, np.int8))
    sel = make_selector("oort", selector_config("oort", "selector", variant=variant))
    state = sel.init()
    for r in range(replies):
        rnd = r // 10
        ctx = SelectionContext(view, view.trainable(rnd, False), rnd, float(r), rng, None,
                               view.num_trainable(rnd, False))
        (c,), state = sel.select(state, ctx, 1)
        view.record_utility(int(c), float(rng.uniform(1, 100)), rnd)
        view.record_training(int(c), float(rng.uniform(5, 60)))
        if len(view.explored_ids()) == n:
            return r + 1
    return None, len(view.explored_ids())


def test_fedscale_async_explores_every_client_as_the_felix_variant_does():
    felix = _replies_to_explore_all("felix")
    assert felix == 300  # a single pick explores while unexplored clients are left
    assert isinstance(_replies_to_explore_all("fedscale_async"), int)  # all 300 within 1,500 replies
    plain = _replies_to_explore_all("fedscale")
    assert plain[0] is None and plain[1] < 100  # FedScale's int(k * eps) at k = 1: explores almost nobody


def test_the_async_fedscale_ablation_runs_the_async_split():
    sel = Scenario(strategy="oort-async-oracle-fedscale").resolve_strategy().selector
    assert sel.split_rounding == "binomial_explore" and sel.normalize_utility
    assert Scenario(strategy="oort-oracle-fedscale").resolve_strategy().selector.split_rounding == "floor_explore"


# ------------------------------------------------------------------ what the eval tier did
def test_eval_tier_summary_counts_match_a_hand_traced_run():
    """c=2, K=1, 10 s tasks; client 1 moves to AVL_EVAL at 10 and back to AVL_TRAIN at 25.

    t=0 both train (no utility yet: 2 unexplored picks). t=10 client 0 replies (v1) and is sent
    again (utility from round 0: age 1); client 1 replies (v2), cannot train in AVL_EVAL, gets an
    eval task (on AVL_EVAL). t=20 client 0 replies (v3), trains again (age 1), and client 1 gets the
    round's eval (on AVL_EVAL). t=25 client 1 is back: a train pick on the utility its eval reply
    refreshed in round 3 (age 0). t=30 client 0's reply is the 4th aggregation.
    """
    from felix_jax.policies.selectors.tierselect_eval import TierSelectEvalConfig, make_tierselect_eval

    tr = trace_of([(0, T)], [(0, T), (10, E), (25, T)])
    sim = make_sim(tr, [10.0, 10.0], knowledge="tiertrack", concurrency=2, max_aggregations=4,
                   eval_selector=make_tierselect_eval(TierSelectEvalConfig(min_age=0)), eval_budget=1,
                   sees_eval_tier=True)
    rec = sim.run()
    a = rec.accounting
    assert rec.aggregation_times == [0.0, 10.0, 10.0, 20.0, 30.0]
    assert [(t, c, k) for t, c, k, _ in a.dispatch_log if k == "train"] == [
        (0.0, 0, "train"), (0.0, 1, "train"), (10.0, 0, "train"), (20.0, 0, "train"), (25.0, 1, "train")]
    assert (a.dispatched_eval, a.evals_on_avl_eval, a.evals_on_avl_train) == (2, 2, 0)
    assert (a.train_picks_unexplored, a.train_picks_eval_utility) == (2, 1)
    assert list(a.utility_age) == [-1, -1, 1, 1, 0]
    s = a.summary()
    assert (s["utility_age_p50"], s["utility_age_p95"]) == (1.0, 1.0)
    assert s["train_picks_eval_utility_share"] == 1 / 5
    assert s["picked_duration_mean_s"] == 10.0
    # late: client 1's first reply (from v0, at v1) and client 0's at 20 (sent at v1, arrives at v2)
    assert s["late_update_share"] == 2 / 4
    # FedBuff weights 1/sqrt(1 + staleness) of staleness [0, 1, 1, 0]: fresh 1, late 1/sqrt(2)
    assert list(a.staleness) == [0, 1, 1, 0]
    assert s["agg_weight_fresh_mean"] == pytest.approx(1.0)
    assert s["agg_weight_late_mean"] == pytest.approx(2 ** -0.5)


def test_a_run_whose_eval_tier_did_nothing_says_so(tmp_path):
    sc = Scenario(name="tiny", model="mlp", num_clients=12, concurrency=4, aggregation_goal=2, learning_rate=0.1,
                  strategy="felix", max_aggregations=12, target_accuracy=None)  # min_age 35 > 12 rounds
    run_experiment(sc, tmp_path / "r", plot=False)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (s["dispatched_eval"], s["evals_per_aggregation"], s["train_picks_eval_utility_share"]) == (0, 0.0, 0.0)
    assert s["evals_on_avl_eval"] == s["evals_on_avl_train"] == 0


def test_run_list_prints_every_scenario_field_with_type_default_and_meaning(capsys):
    import dataclasses

    from felix_jax.cli import main
    from felix_jax.experiment.scenario import FIELD_HELP

    names = [f.name for f in dataclasses.fields(Scenario)]
    assert list(FIELD_HELP) == names  # the table cannot drift from the scenario
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    for name in names:
        line = next((x for x in out.splitlines() if x.split()[:1] == [name]), None)
        assert line is not None and " = " in line and line.rstrip().endswith(FIELD_HELP[name]), name
    assert "trace_start_s" in out and "oracle_departure" in out and "felix-oracle" in out
