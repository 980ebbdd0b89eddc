"""Selector formulas (Oort, REFL IPS, TierSelect eval) against hand-computed values."""

import math

import numpy as np
import pytest

from felix_jax.policies.selectors import oort_math as oort
from felix_jax.policies.selectors import refl_math as refl
from felix_jax.policies.selectors import tierselect_math as ts
from felix_jax.traces.availability import Tier

# ---- Oort ------------------------------------------------------------------------------------------------


def test_staleness_bonus_by_hand_and_guards():
    # sqrt(0.1 * ln(100) / 10) = sqrt(0.1 * 4.60517019 / 10) = sqrt(0.04605170) = 0.21459660
    # sqrt(0.1 * ln(100) / 50) = sqrt(0.00921034) = 0.09597052
    np.testing.assert_allclose(oort.staleness_bonus(100, [10, 50]), [0.21459660, 0.09597052], atol=1e-8)
    np.testing.assert_allclose(oort.staleness_bonus(1, [1, 5]), [0.0, 0.0])  # ln(1) = 0
    np.testing.assert_allclose(oort.staleness_bonus(0, [3]), [0.0])  # round <= 1 guarded
    assert oort.staleness_bonus(100, [0])[0] == pytest.approx(math.sqrt(0.1 * math.log(100)))  # last_round 0 -> 1


def test_system_penalty_only_for_slow_clients():
    # T_pref = 10, alpha = 2: (10/20)^2 = 0.25, (10/40)^2 = 0.0625
    np.testing.assert_allclose(oort.system_penalty([5, 10, 20, 40], 10.0, 2.0), [1, 1, 0.25, 0.0625])
    np.testing.assert_allclose(oort.system_penalty([5, 1e6], math.inf), [1, 1])


def test_preferred_duration_percentile():
    d = np.arange(10, 0, -1)  # 1..10, shuffled order does not matter
    assert oort.preferred_duration(d, 30) == 4.0  # sorted[floor(10 * 0.3)] = sorted[3]
    assert oort.preferred_duration(d, 0) == 1.0
    assert oort.preferred_duration(d, 100) == math.inf


def test_oort_score_with_bonus_and_penalty_by_hand():
    # U = [10, 20] (clip value sorted[floor(2*0.9)] = 20: no clipping), round 100,
    # last rounds [10, 50], durations [5, 20], T_pref 10, alpha 2:
    #   client 0: (10 + 0.21459660) * 1          = 10.21459660
    #   client 1: (20 + 0.09597052) * (10/20)^2  = 20.09597052 * 0.25 = 5.02399263
    s = oort.oort_scores([10.0, 20.0], [10, 50], 100, [5.0, 20.0], 10.0, alpha=2.0, clip_bound=0.9)
    np.testing.assert_allclose(s, [10.21459660, 5.02399263], atol=1e-7)


def test_utility_clipping_at_order_statistic():
    u = np.arange(1.0, 21.0)  # 1..20
    # clip 0.9 -> sorted[floor(18)] = 19: only the top value is cut
    np.testing.assert_allclose(oort.clip_utilities(u, 0.9), np.r_[np.arange(1.0, 20.0), 19.0])
    np.testing.assert_allclose(oort.clip_utilities(u, 0.98), u)  # sorted[19] = 20
    s = oort.oort_scores(u, np.ones(20), 1, np.ones(20), 1.0, clip_bound=0.9)  # bonus 0, no penalty
    assert s[-1] == s[-2] == 19.0


@pytest.mark.parametrize("seed", range(20))
def test_order_statistic_by_partition_equals_the_sorted_pick(seed):
    """The clip's order statistic is taken by a partition: the value the full sort gives at
    ``min(floor(n q), n - 1)``, with ties, NaNs (last, as in the sort) and q at 0 and 1."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    u = np.round(rng.exponential(5.0, n), int(rng.integers(0, 3)))  # rounded: many ties
    if seed % 3 == 0:
        u[rng.random(n) < 0.1] = np.nan
    for q in (0.0, 0.5, 0.9, 0.98, 1.0, float(rng.random())):
        want = np.sort(u)[min(int(np.floor(n * q)), n - 1)]
        got = oort.order_statistic(u, q)
        assert got == want or (np.isnan(got) and np.isnan(want))
    assert np.isnan(oort.order_statistic([], 0.9))


def _exploit_cases(count):
    """Score vectors of every shape the exploit pick meets: spread, tied, negative, skewed (repeats
    within a draw), two-valued; with requests, cut-offs and FedScale's minimum candidate factor."""
    for seed in range(count):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2048, 12_000))
        kind = seed % 5
        if kind == 0:
            s = rng.exponential(1.0, n)
        elif kind == 1:
            s = np.round(rng.exponential(1.0, n), 1)
        elif kind == 2:
            s = rng.normal(0.0, 1.0, n)
        elif kind == 3:
            s = np.where(rng.random(n) < 0.99, 1e-3, 1e3) * rng.random(n)
        else:
            s = np.where(rng.random(n) < 0.5, 2.0, 0.0)
        yield (seed, s, int(rng.integers(1, 9)), float(rng.choice([0.0, 0.05, 0.7, 1.0])),
               float(rng.choice([0.0, 10.0])))


@pytest.mark.parametrize("forced_fallback", [False, True])
def test_exploit_pick_by_selection_draws_what_the_sorted_draw_draws(monkeypatch, forced_fallback):
    """Many scores, few picks: the exploited clients found by weighted selection (no sort) are those
    ``sample_by_score`` draws over ``exploit_candidates``, and the generator ends in the same state;
    with every draw sent back to the sorted way (a margin no draw clears), too."""
    if forced_fallback:
        monkeypatch.setattr(oort, "_EPS", 1.0)
    for seed, s, m, cut, factor in _exploit_cases(60):
        a, b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
        candidates = oort.exploit_candidates(s, m, cut, factor)
        want = oort.sample_by_score(a, candidates, s, min(m, len(candidates)))
        got = oort.exploit_pick(b, s, m, cut, factor)
        np.testing.assert_array_equal(got, want, err_msg=f"case {seed}")
        assert a.bit_generator.state == b.bit_generator.state


def test_exploit_pick_takes_the_sorted_way_for_few_scores_many_picks_or_non_finite_ones(monkeypatch):
    calls = []
    monkeypatch.setattr(oort, "_exploit_pick_by_selection", lambda *a: calls.append(a) or None)
    rng = np.random.default_rng(0)
    s = rng.exponential(1.0, 5000)
    oort.exploit_pick(rng, s[:100], 1)  # few scores
    oort.exploit_pick(rng, s, 20)  # many picks
    oort.exploit_pick(rng, np.r_[s, np.nan], 1)  # a NaN score
    assert calls == []
    oort.exploit_pick(rng, s, 1)
    assert len(calls) == 1


def test_oort_normalised_utility_variant():
    # U = [10, 20, 30]: lo = 0.999 * 10 = 9.99, span = 30 - 9.99 = 20.01, clip sorted[floor(2.7)] = 30;
    # (U - 9.99) / 20.01 = [0.01, 10.01, 20.01] / 20.01; round 1: no bonus
    s = oort.oort_scores([10.0, 20.0, 30.0], [1, 1, 1], 1, [1, 1, 1], 1.0, normalize_utility=True)
    np.testing.assert_allclose(s, [0.01 / 20.01, 10.01 / 20.01, 1.0])


def test_exploit_candidates_cut_off():
    scores = np.array([10, 1, 8, 0.2, 6, 0.5])
    # descending: 10 (0), 8 (2), 6 (4), 1 (1), 0.5 (5), 0.2 (3); score at exploit length 2: 6
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 2, 0.05), [0, 2, 4, 1, 5])  # >= 0.3
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 2, 0.1), [0, 2, 4, 1])  # >= 0.6
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 2, 0.7), [0, 2, 4])  # >= 4.2
    # exploit length past the end: the last score is the reference, 0.7 * 0.2 = 0.14 -> all
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 10, 0.7), [0, 2, 4, 1, 5, 3])
    assert oort.exploit_candidates(scores, 0, 0.05).size == 0


def test_sample_by_score_without_replacement_and_proportional():
    rng = np.random.default_rng(0)
    cand = np.array([3, 0, 2, 1])
    scores = np.array([1.0, 2.0, 3.0, 4.0])  # indexed by client
    for _ in range(200):
        pick = oort.sample_by_score(rng, cand, scores, 3)
        assert len(set(pick.tolist())) == 3 and set(pick.tolist()) <= set(cand.tolist())
    first = np.array([oort.sample_by_score(rng, cand, scores, 1)[0] for _ in range(10000)])
    freq = np.bincount(first, minlength=4) / first.size
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.02)
    # zero-score candidates come only after every positive one
    pick = oort.sample_by_score(rng, np.arange(4), np.array([0.0, 5.0, 0.0, 1.0]), 3)
    assert set(pick[:2].tolist()) == {1, 3} and pick[2] in (0, 2)
    with pytest.raises(ValueError):
        oort.sample_by_score(rng, cand, scores, 5)


def test_epsilon_schedule():
    assert oort.epsilon_schedule(0) == pytest.approx(0.9)
    assert oort.epsilon_schedule(1) == pytest.approx(0.882)  # 0.9 * 0.98
    assert oort.epsilon_schedule(2) == pytest.approx(0.86436)  # 0.9 * 0.98^2
    assert oort.epsilon_schedule(1000) == 0.2  # FeLiX code floor
    cfg = oort.OortConfig.fedscale()
    assert oort.epsilon_schedule(1000, cfg.exploration_factor, cfg.exploration_decay, cfg.exploration_min) == 0.3


def test_split_explore_exploit():
    assert oort.split_explore_exploit(13, 0.882, 100) == (12, 1)  # floor(13 * 0.118) = 1
    assert oort.split_explore_exploit(1, 0.2, 5) == (1, 0)  # single pick explores while it can
    assert oort.split_explore_exploit(13, 0.5, 2) == (2, 11)  # exploitation absorbs the shortfall
    assert oort.split_explore_exploit(13, 0.5, 0, num_explored=20) == (0, 13)
    assert oort.split_explore_exploit(13, 0.2, 3, num_explored=4) == (3, 4)  # population too small


def test_oort_config_defaults():
    c = oort.OortConfig()
    assert (c.exploration_factor, c.exploration_decay, c.exploration_min) == (0.9, 0.98, 0.2)
    assert (c.round_threshold, c.round_penalty, c.pacer_step, c.pacer_delta) == (30.0, 2.0, 20, 5.0)
    assert (c.clip_bound, c.cut_off, c.sample_window) == (0.9, 0.05, 5.0)
    o = oort.OortConfig.original_repo()
    assert (o.exploration_decay, o.exploration_min, o.round_threshold) == (0.95, 0.2, 10.0)
    assert (o.clip_bound, o.cut_off) == (0.98, 0.7)
    assert c.pacer() == oort.Pacer(step=20, delta=5.0)


def _run_pacer(pacer, state, utilities):
    for u in utilities:
        state = pacer.update(state, u)
    return state


def test_pacer_raises_threshold_after_a_flat_window():
    pacer = oort.Pacer(step=20, delta=5.0)
    state = _run_pacer(pacer, pacer.init(30.0), [1.0] * 39)
    assert state.threshold == 30.0  # no decision before round 2 * step
    state = pacer.update(state, 1.0)  # round 40: windows sum 20 vs 20 -> flat
    assert state.threshold == 35.0 and len(state.history) == 40
    state = _run_pacer(pacer, state, [1.0] * 19)
    assert state.threshold == 35.0  # decisions only every step rounds
    assert pacer.update(state, 1.0).threshold == 40.0
    near_cap = _run_pacer(pacer, pacer.init(98.0), [1.0] * 40)
    assert near_cap.threshold == 100.0


def test_pacer_keeps_or_lowers_on_change():
    pacer = oort.Pacer(step=20, delta=5.0)
    improving = _run_pacer(pacer, pacer.init(30.0), [1.0] * 20 + [2.0] * 20)  # +100%: not flat, not 5x
    assert improving.threshold == 30.0
    jump = _run_pacer(pacer, pacer.init(30.0), [1.0] * 20 + [200.0] * 20)  # change >= 5x previous
    assert jump.threshold == 25.0
    floor = _run_pacer(pacer, pacer.init(5.0), [1.0] * 20 + [200.0] * 20)
    assert floor.threshold == 5.0


# ---- REFL ------------------------------------------------------------------------------------------------


def test_will_leave_within_window():
    t, w = 100.0, 50.0
    times = np.array([120.0, 160.0, 150.0, np.inf, 130.0])
    states = np.array([Tier.UN_AVL, Tier.UN_AVL, Tier.AVL_EVAL, Tier.UN_AVL, Tier.AVL_TRAIN])
    np.testing.assert_array_equal(refl.will_leave_within(t, w, times, states), [True, False, True, False, False])


def test_thinning_at_accuracy_one_is_identity_and_flips_otherwise():
    rng = np.random.default_rng(1)
    pred = rng.random(10000) < 0.3
    np.testing.assert_array_equal(refl.thin_predictions(rng, pred, 1.0), pred)
    flipped = np.mean(refl.thin_predictions(rng, pred, 0.9) != pred)
    assert abs(flipped - 0.1) < 0.015


def test_subsample_groups_keeps_accuracy_share_of_each():
    pred = np.r_[np.ones(10, bool), np.zeros(20, bool)]
    keep = refl.subsample_groups(np.random.default_rng(0), pred, 0.9)
    assert keep[pred].sum() == 9 and keep[~pred].sum() == 18


def test_ips_order_priority_first_random_within():
    prio = np.array([False, True, False, True, True, False])
    eligible = np.array([True, True, True, True, False, True])
    orders = [refl.ips_order(np.random.default_rng(s), prio, eligible) for s in range(20)]
    for o in orders:
        assert set(o[:2].tolist()) == {1, 3} and set(o[2:].tolist()) == {0, 2, 5}
    assert len({tuple(o) for o in orders}) > 1
    np.testing.assert_array_equal(refl.ips_order(np.random.default_rng(7), prio),
                                  refl.ips_order(np.random.default_rng(7), prio))


def test_adaptive_selection_size():
    assert refl.adaptive_selection_size(13, 3) == 10
    assert refl.adaptive_selection_size(13, 20) == 1
    assert refl.adaptive_selection_size(13, 20, min_fraction=0.5) == 7  # ceil(6.5)
    assert refl.adaptive_selection_size(13, 0) == 13


# ---- TierSelect eval selector ----------------------------------------------------------------------------


def test_eval_budget():
    assert ts.eval_budget(10) == 15 and ts.eval_budget(7) == 10  # int(10.5)


def test_eval_selection_stalest_first_and_filters():
    T, E, U = int(Tier.AVL_TRAIN), int(Tier.AVL_EVAL), int(Tier.UN_AVL)
    #                      0     1     2     3      4     5     6     7
    trained = np.array([True, True, True, True, False, True, True, True])
    tier = np.array([T, E, T, U, T, T, E, T])
    busy = np.array([False, False, True, False, False, False, False, False])
    last = np.array([10, 0, 0, 0, 0, 80, 10, 5])
    # round 100, min_age 35: client 2 busy, 3 UN_AVL, 4 never trained, 5 too fresh (age 20)
    # eligible 0 (10), 1 (0), 6 (10), 7 (5) -> stalest first, ties by id: 1, 7, 0, 6
    np.testing.assert_array_equal(ts.select_for_eval(trained, tier, busy, last, 100, budget=15), [1, 7, 0, 6])
    np.testing.assert_array_equal(ts.select_for_eval(trained, tier, busy, last, 100, budget=3), [1, 7, 0])
    assert ts.select_for_eval(trained, tier, busy, last, 100, budget=0).size == 0
    # age exactly min_age is old enough: client 5 at round 115
    assert 5 in ts.select_for_eval(trained, tier, busy, last, 115, budget=15)
    assert 5 not in ts.select_for_eval(trained, tier, busy, last, 114, budget=15)
    # the same from the staleness order the view keeps: keys round * N + id of the trained clients,
    # 0:10*8+0=80, 1:0*8+1=1, 2:2, 3:3, 5:645, 6:86, 7:47 -> ascending 1, 2, 3, 47, 80, 86, 645
    keys = np.array([1, 2, 3, 47, 80, 86, 645])
    np.testing.assert_array_equal(ts.select_for_eval_in_order(keys, tier, busy, 100, 15), [1, 7, 0, 6])
    np.testing.assert_array_equal(ts.select_for_eval_in_order(keys, tier, busy, 100, 3), [1, 7, 0])
    assert ts.select_for_eval_in_order(keys, tier, busy, 100, 0).size == 0
    assert 5 in ts.select_for_eval_in_order(keys, tier, busy, 115, 15)
    assert 5 not in ts.select_for_eval_in_order(keys, tier, busy, 114, 15)


@pytest.mark.parametrize("seed", range(20))
def test_partitioned_selections_equal_the_full_sorts(seed):
    """select_for_eval's budget cut and T_pref's order statistic equal sorting everything."""
    from felix_jax.policies.selectors.oort_math import preferred_duration
    from felix_jax.policies.selectors.tierselect_math import eval_eligible, select_for_eval

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    tier, busy = rng.integers(0, 3, n), rng.random(n) < 0.3
    ur = rng.integers(-1, 8, n)  # many ties in the round: broken by id
    budget = int(rng.integers(0, n + 3))
    ok = np.flatnonzero(eval_eligible(True, tier, busy, ur, 10, 3))
    want = np.array(sorted(ok.tolist(), key=lambda i: (ur[i], i))[:budget], np.int64)
    np.testing.assert_array_equal(select_for_eval(True, tier, busy, ur, 10, budget, 3), want)
    d = rng.choice([1.0, 2.0, 5.0, 7.5], n) if seed % 2 else rng.exponential(10.0, n)
    thr = float(rng.uniform(0, 100))
    assert preferred_duration(d, thr) == np.sort(d)[min(int(n * thr / 100.0), n - 1)]
