"""Oort against its authors' code: FedScale's ``thirdparty/oort`` and the Oort repository's ``oort/oort.py``.

Expected values are literals worked out by hand (or with plain float arithmetic
in the comments), and the 60-round trajectory is checked against a small
reimplementation of the rules inside this file, not against the project's code.
"""

import dataclasses
import math

import numpy as np
import pytest

from felix_jax.fleet.clientmap import ClientMap
from felix_jax.policies.selectors import oort_math as oort
from felix_jax.policies.selectors.base import SelectionContext
from felix_jax.policies.selectors.oort import make_oort_selector


# ---- configurations ---------------------------------------------------------------------------------------


def test_variants_are_named_and_take_overrides():
    assert set(oort.OORT_VARIANTS) == {"felix", "fedscale", "fedscale_async", "original_repo"}
    assert oort.OORT_VARIANTS["fedscale_async"]() == oort.OortConfig.fedscale(split_rounding="binomial_explore")
    assert oort.OORT_VARIANTS["felix"]() == oort.OortConfig()
    assert oort.OORT_VARIANTS["fedscale"](exploration_min=0.25).exploration_min == 0.25
    assert oort.OORT_VARIANTS["original_repo"](cut_off=0.5).cut_off == 0.5
    with pytest.raises(ValueError):
        oort.OortConfig(split_rounding="round")


def test_original_repo_uses_the_repository_defaults():
    o = oort.OortConfig.original_repo()
    # the repository's argument defaults: decay 0.95, floor 0.2, round threshold 10, clip 0.98, cut-off 0.7
    assert (o.exploration_factor, o.exploration_decay, o.exploration_min) == (0.9, 0.95, 0.2)
    assert (o.round_threshold, o.clip_bound, o.cut_off, o.sample_window) == (10.0, 0.98, 0.7, 5.0)
    assert (o.decay_before_use, o.split_rounding, o.shortfall) == (True, "floor_exploit", "random")
    assert (o.explore_by_prior, o.t_pref_over, o.normalize_utility, o.min_candidates_factor) == (
        True, "registered", True, 0.0)
    f = oort.OortConfig.fedscale()
    assert (f.exploration_decay, f.exploration_min, f.round_threshold, f.clip_bound, f.cut_off) == (
        0.98, 0.3, 30.0, 0.9, 0.05)
    assert (f.decay_before_use, f.split_rounding, f.shortfall, f.min_candidates_factor, f.abs_scores) == (
        True, "floor_explore", "exploit", 10.0, True)
    c = oort.OortConfig()
    assert (c.decay_before_use, c.split_rounding, c.explore_by_prior, c.t_pref_over, c.normalize_utility) == (
        False, "floor_exploit", False, "explored", False)


# ---- epsilon and the split ----------------------------------------------------------------------------------


def _eps(cfg, call):
    return oort.epsilon_schedule(call, cfg.exploration_factor, cfg.exploration_decay, cfg.exploration_min,
                                 cfg.decay_before_use)


def test_epsilon_sequence_of_each_variant():
    felix, fedscale, repo = oort.OortConfig(), oort.OortConfig.fedscale(), oort.OortConfig.original_repo()
    # FeLiX: 0.9 at the first call, then x0.98
    assert [_eps(felix, c) for c in range(3)] == pytest.approx([0.9, 0.882, 0.86436])
    # FedScale decays before use: 0.9 * 0.98 = 0.882, 0.9 * 0.98^2 = 0.86436, 0.9 * 0.98^3 = 0.8470728
    assert [_eps(fedscale, c) for c in range(3)] == pytest.approx([0.882, 0.86436, 0.8470728])
    assert _eps(fedscale, 1000) == 0.3
    # Oort repository: 0.9 * 0.95 = 0.855, 0.81225, 0.7716375; call 28 -> 0.9 * 0.95^29 = 0.2033420,
    # call 29 -> 0.9 * 0.95^30 = 0.1931749 < floor 0.2
    assert [_eps(repo, c) for c in range(3)] == pytest.approx([0.855, 0.81225, 0.7716375])
    assert _eps(repo, 28) == pytest.approx(0.2033420, abs=1e-7)
    assert _eps(repo, 29) == 0.2


def test_split_rounding_of_each_peer():
    split = oort.split_explore_exploit
    # floor on exploitation (FeLiX, Oort repository): exploit = int(k (1 - eps))
    assert split(10, 0.9, 100, 100, "floor_exploit") == (10, 0)  # 10 * (1 - 0.9) = 0.9999999999999998 -> 0
    assert split(13, 0.882, 100, 100, "floor_exploit") == (12, 1)  # 13 * 0.118 = 1.534 -> 1
    assert split(20, 0.3, 100, 100, "floor_exploit") == (6, 14)  # 20 * 0.7 = 14.0
    assert split(7, 0.3, 100, 100, "floor_exploit") == (3, 4)  # 7 * 0.7 = 4.8999999999999995 -> 4
    # floor on exploration (FedScale): explore = int(k eps), exploit = k - explore
    assert split(10, 0.9, 100, 100, "floor_explore") == (9, 1)  # 10 * 0.9 = 9.0
    assert split(13, 0.882, 100, 100, "floor_explore") == (11, 2)  # 13 * 0.882 = 11.466 -> 11
    assert split(7, 0.3, 100, 100, "floor_explore") == (2, 5)  # 7 * 0.3 = 2.1 -> 2
    assert split(1, 0.882, 100, 100, "floor_explore") == (0, 1)  # a single pick exploits
    assert split(1, 0.882, 100, 100, "floor_exploit") == (1, 0)  # ... or explores
    # too few unexplored: exploitation absorbs (FeLiX, FedScale per the paper), or the slots stay free (Oort repo)
    assert split(13, 0.5, 2, 20, "floor_exploit", absorb=True) == (2, 11)
    assert split(13, 0.5, 2, 20, "floor_exploit", absorb=False) == (2, 6)
    # nothing explored yet: exploration takes every slot
    assert split(10, 0.3, 50, 0, "floor_explore") == (10, 0)


# ---- T_pref ---------------------------------------------------------------------------------------------------


def test_t_pref_index_is_the_peers_int_of_n_times_threshold():
    d = np.arange(180, 0, -1.0)  # 1..180
    # int(180 * 35 / 100.) = int(63.0) = 63 -> sorted[63] = 64 (floor(180 * 0.35) would give index 62)
    assert oort.preferred_duration(d, 35) == 64.0
    assert oort.preferred_duration(d, 30) == 55.0  # int(54.0) = 54 -> 55
    assert oort.preferred_duration(np.arange(1.0, 11.0), 10) == 2.0  # int(1.0) = 1 -> 2
    assert oort.preferred_duration(np.arange(1.0, 11.0), 99.9) == 10.0  # int(9.99) = 9 -> 10
    assert oort.preferred_duration([], 30) == math.inf
    # the same index on durations already sorted (the view keeps them so): one lookup
    assert oort.preferred_duration_sorted(np.arange(1.0, 181.0), 35) == 64.0
    assert oort.preferred_duration_sorted(np.arange(1.0, 11.0), 99.9) == 10.0
    assert oort.preferred_duration_sorted(np.arange(1.0, 11.0), 100) == math.inf
    assert oort.preferred_duration_sorted(np.zeros(0), 30) == math.inf


def _ctx(view, rnd=1, seed=0, eligible=None):
    eligible = np.ones(view.num_clients, bool) if eligible is None else eligible
    return SelectionContext(view, eligible, rnd, 0.0, np.random.default_rng(seed))


def _explore(view, clients, utility, rnd, durations):
    for c in clients:
        view.record_utility(c, utility, rnd)
        view.record_training(c, durations[c])


def test_t_pref_over_registered_or_explored_clients():
    n = 20
    registered = np.arange(n, 0, -1.0)  # client i registered with duration 20 - i
    view = ClientMap.create(np.full(n, 100), registered_duration_s=registered)
    _explore(view, [0, 1, 2, 3], 5.0, 0, registered + 1000.0)  # explored clients turned out slower
    for name, expected in (
        # all 20 clients: observed 1020, 1019, 1018, 1017 and registered 16..1; int(20 * 30 / 100.) = 6 -> 7
        ("fedscale", 7.0),
        # the four explored only: 1017, 1018, 1019, 1020; int(4 * 30 / 100.) = int(1.2) = 1 -> 1018
        ("felix", 1018.0),
    ):
        sel = make_oort_selector(oort.OORT_VARIANTS[name]())
        _, state = sel.select(sel.init(), _ctx(view), 2)
        assert state.t_pref == expected, name
    # the Oort repository starts at the 10th percentile: int(20 * 10 / 100.) = 2 -> 3
    sel = make_oort_selector(oort.OortConfig.original_repo())
    assert sel.select(sel.init(), _ctx(view), 2)[1].t_pref == 3.0
    # without registered durations the never-explored clients drop out of the population
    bare = ClientMap.create(np.full(n, 100))
    _explore(bare, [0, 1, 2, 3], 5.0, 0, registered + 1000.0)
    sel = make_oort_selector(oort.OortConfig.fedscale())
    assert sel.select(sel.init(), _ctx(bare), 2)[1].t_pref == 1018.0


# ---- exploration window -------------------------------------------------------------------------------------


def test_exploration_prior_and_window_ranking():
    sizes = np.array([100, 400, 300, 200, 50, 400, 250])
    durations = np.array([1.0, 4.0, 1.0, 1.0, 1.0, 1.0, np.nan])
    # T_pref 2, alpha 2: client 1 is slower, (2 / 4)^2 = 0.25 -> 100; unknown duration (6) is not penalised
    prior = oort.exploration_prior(sizes, durations, 2.0, 2.0)
    np.testing.assert_allclose(prior, [100, 100, 300, 200, 50, 400, 250])
    # descending, ties by index: 5 (400), 2 (300), 6 (250), 3 (200), 0 (100), 1 (100), 4 (50)
    np.testing.assert_array_equal(oort.exploration_window(prior, 1, 5.0), [5, 2, 6, 3, 0])
    np.testing.assert_array_equal(oort.exploration_window(prior, 2, 5.0), [5, 2, 6, 3, 0, 1, 4])  # 10 > 7
    np.testing.assert_array_equal(oort.exploration_window(prior, 1, 2.5), [5, 2])  # int(2.5)
    # prior capped at 250 (the peers' min(size, local_steps * batch_size)): 100, 62.5, 250, 200, 50, 250, 250
    capped = oort.exploration_prior(sizes, durations, 2.0, 2.0, prior_cap=250)
    np.testing.assert_allclose(capped, [100, 62.5, 250, 200, 50, 250, 250])
    np.testing.assert_array_equal(oort.exploration_window(capped, 1, 5.0), [2, 5, 6, 3, 0])


def test_exploration_draws_from_the_window_by_prior():
    sizes = np.arange(1, 51) * 10  # client i holds 10 (i + 1) samples; top five: 46..50 x 10
    view = ClientMap.create(sizes)
    sel = make_oort_selector(oort.OortConfig.fedscale())
    counts = np.zeros(50)
    for seed in range(4000):
        # FedScale at k = 1: explore int(0.882) = 0, nothing explored -> the one pick explores;
        # window int(5 * 1) = 5: clients 45..49, drawn with p = size / 2400
        clients, _ = sel.select(sel.init(), _ctx(view, seed=seed), 1)
        counts[clients] += 1
    assert counts[:45].sum() == 0
    np.testing.assert_allclose(counts[45:] / counts.sum(), np.array([460, 470, 480, 490, 500]) / 2400, atol=0.025)
    # the FeLiX default explores uniformly
    felix = make_oort_selector(oort.OortConfig())
    picks = {int(felix.select(felix.init(), _ctx(view, seed=s), 1)[0][0]) for s in range(300)}
    assert len(picks & set(range(45))) > 20


# ---- exploitation -----------------------------------------------------------------------------------------------


def test_candidate_floor_of_fedscale():
    scores = np.r_[[100.0, 90.0, 80.0], np.ones(27)]
    # exploit length 2: reference sorted[2] = 80, cut-off 0.05 * 80 = 4 -> 3 clients qualify
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 2, 0.05), [0, 1, 2])
    # FedScale keeps going until more than 10 x 2 are kept: 21
    np.testing.assert_array_equal(oort.exploit_candidates(scores, 2, 0.05, 10.0), np.arange(21))
    assert len(oort.exploit_candidates(scores, 3, 0.05, 10.0)) == 30  # 31 > 30 clients: all
    # more above the cut-off than the floor: the cut-off decides
    many = np.r_[np.full(25, 10.0), np.ones(5)]
    assert len(oort.exploit_candidates(many, 1, 0.05, 10.0)) == 30  # 0.05 * 10 = 0.5: all 30 qualify
    assert len(oort.exploit_candidates(many, 1, 0.5, 10.0)) == 25  # 5 < 25 qualify, floor 11 < 25


def test_normaliser_with_a_zero_utility_client():
    u = np.array([0.0, 10.0, 20.0, 30.0])
    # positive rewards only: lo = 0.999 * 10 = 9.99, hi = 30, span 20.01, clip sorted[floor(3 * 0.9)] = 30
    expected = np.array([-9.99, 0.01, 10.01, 20.01]) / 20.01
    np.testing.assert_allclose(oort.normalised_utilities(u, u, 0.9), expected)
    # the zero-utility client does not move the others
    np.testing.assert_allclose(oort.normalised_utilities(u[1:], u[1:], 0.9), expected[1:])
    # a never-explored client's prior (50) widens the range: span 50 - 9.99 = 40.01, clip sorted[floor(3.6)] = 50
    pop = np.r_[u, 50.0]
    np.testing.assert_allclose(oort.normalised_utilities(u[1:], pop, 0.9), np.array([0.01, 10.01, 20.01]) / 40.01)
    # clipping at the population's order statistic: pop 1..10, clip 0.9 -> sorted[9] = 10, 0.5 -> sorted[5] = 6
    pop = np.arange(1.0, 11.0)
    np.testing.assert_allclose(oort.normalised_utilities([8.0], pop, 0.5), [(6 - 0.999) / (10 - 0.999)])
    # scores: round 1 (no bonus), no penalty
    s = oort.oort_scores(u, np.ones(4), 1, np.ones(4), 10.0, normalize_utility=True)
    np.testing.assert_allclose(s, expected)


def test_original_repo_fills_a_shortfall_at_random_then_stops_exploring():
    n = 12
    view = ClientMap.create(np.full(n, 100), registered_duration_s=np.ones(n))
    _explore(view, range(2, n), 3.0, 0, np.ones(n))  # clients 0 and 1 never explored
    sel = make_oort_selector(oort.OortConfig.original_repo())
    # call 0: eps 0.855, exploit int(5 * 0.145) = int(0.725) = 0, explore min(2, 5) = 2, 3 filled at random
    clients, state = sel.select(sel.init(), _ctx(view, rnd=1), 5)
    assert len(clients) == 5 and {0, 1} <= set(clients.tolist()) and state.exploited.size == 0
    assert not state.exhausted
    _explore(view, [0, 1], 3.0, 1, np.ones(n))
    # call 1: nothing left unexplored; eps 0.81225, exploit int(5 * 0.18775) = 0: all 5 at random, and
    # epsilon is 0 from now on
    clients, state = sel.select(state, _ctx(view, rnd=1), 5)
    assert len(clients) == 5 and state.exploited.size == 0 and state.exhausted
    # call 2: eps 0 -> all 5 exploited
    clients, state = sel.select(state, _ctx(view, rnd=1), 5)
    assert len(clients) == 5 and state.exploited.size == 5
    # FedScale (per the paper): exploitation takes the free slots instead
    fed = make_oort_selector(oort.OortConfig.fedscale())
    view = dataclasses.replace(view, utility_round=np.where(np.arange(n) < 2, -1, view.utility_round))  # 0, 1 unexplored
    clients, state = fed.select(fed.init(), _ctx(view, rnd=1), 5)
    assert {0, 1} <= set(clients.tolist()) and state.exploited.size == 3


# ---- pacer input ------------------------------------------------------------------------------------------------


def test_pacer_records_exploited_trainers_only():
    n = 10
    view = ClientMap.create(np.full(n, 100))
    _explore(view, range(n), 3.0, 0, np.ones(n))  # everyone explored: the FeLiX split exploits all 2 picks
    sel = make_oort_selector(oort.OortConfig())
    picked, state = sel.select(sel.init(), _ctx(view, rnd=0), 2)
    assert state.pacer.history == (0.0,)  # the first call records an empty window
    a, b = (int(c) for c in picked)
    # a trains and reports 7; b has not replied yet; c, not picked, sends an eval reply with 1000
    c = next(i for i in range(n) if i not in (a, b))
    view.record_utility(a, 7.0, 0)
    view.record_training(a, view.duration_s[a])
    view.record_utility(c, 1000.0, 0)
    _, state = sel.select(state, _ctx(view, rnd=1), 2)
    assert state.pacer.history == (0.0, 7.0 / 1.0001)  # sum 7 over (1 + 1e-4) reporting exploited clients
    assert oort.pacer_input([2.0, 4.0]) == 6.0 / 2.0001
    assert oort.pacer_input([]) == 0.0


# ---- a 60-round trajectory against a reimplementation of the rules --------------------------------------------


N, K, ROUNDS = 250, 10, 60
DURATIONS = 1.0 + (np.arange(N) * 37) % N  # a permutation of 1..250


def _utility(rnd):  # same for every client reporting in round rnd; exact in binary
    # records 1..20 sum to about 18 (the first two are empty), records 21..40 to about 20 * 0.875 = 17.5:
    # flat, the threshold rises at call 40; records 41..60 (16 each) jump more than 5x: it falls at call 60
    return 1.0 if rnd < 19 else (0.875 if rnd < 39 else 16.0)


def _expected_trajectory(eps0, decay, floor, before, rounding, absorb, threshold0, registered):
    """The peers' rules written out: (T_pref, #explored, #exploited, threshold) per call.

    ``registered``: T_pref over every client's duration (all known from registration);
    otherwise T_pref is returned as None (it depends on which clients were explored).
    """
    threshold, history, out = threshold0, [], []
    unexplored, exhausted, last_exploit = N, False, 0
    for rnd in range(ROUNDS):
        # pacer record: mean utility of last call's exploited clients (all reported), sum / (m + 1e-4)
        history.append(0.0 if rnd == 0 else _utility(rnd - 1) * last_exploit / (last_exploit + 1e-4))
        c = len(history)
        if c >= 40 and c % 20 == 0:
            prev, cur = sum(history[-40:-20]), sum(history[-20:])
            if abs(cur - prev) <= 0.1 * prev:
                threshold = min(100.0, threshold + 5.0)
            elif abs(cur - prev) >= 5 * prev:
                threshold = max(5.0, threshold - 5.0)
        t_pref = None
        if registered:
            t_pref = float(np.sort(DURATIONS)[min(int(N * threshold / 100.0), N - 1)]) if threshold < 100 else math.inf
        eps = 0.0 if exhausted else max(floor, eps0 * decay ** (rnd + (1 if before else 0)))
        explored = N - unexplored
        target = int(K * (1.0 - eps)) if rounding == "floor_exploit" else K - int(K * eps)
        exploit = min(target, explored)
        explore = min(unexplored, K - exploit)
        if absorb:
            exploit = min(K - explore, explored)
        if not absorb and unexplored == 0:
            exhausted = True
        unexplored -= explore
        last_exploit = exploit
        out.append((t_pref, explore, exploit, threshold))
    return out


@pytest.mark.parametrize("variant, params", [
    ("felix", (0.9, 0.98, 0.2, False, "floor_exploit", True, 30.0, False)),
    ("fedscale", (0.9, 0.98, 0.3, True, "floor_explore", True, 30.0, True)),
    ("original_repo", (0.9, 0.95, 0.2, True, "floor_exploit", False, 10.0, True)),
])
def test_sixty_round_trajectory(variant, params):
    expected = _expected_trajectory(*params)
    thresholds = [e[3] for e in expected]
    # the schedule makes the pacer move both ways
    assert thresholds[38] < thresholds[39] and thresholds[58] > thresholds[59]
    view = ClientMap.create(100 + np.arange(N), registered_duration_s=DURATIONS)
    sel = make_oort_selector(oort.OORT_VARIANTS[variant]())
    state, rng = sel.init(), np.random.default_rng(3)
    for rnd in range(ROUNDS):
        was_explored = view.utility_round >= 0
        ctx = SelectionContext(view, np.ones(N, bool), rnd, 0.0, rng)
        clients, state = sel.select(state, ctx, K)
        t_pref, n_explore, n_exploit, threshold = expected[rnd]
        assert len(clients) == K and len(set(clients.tolist())) == K, rnd
        assert int((~was_explored[clients]).sum()) == n_explore, (variant, rnd)
        assert state.pacer.threshold == threshold, (variant, rnd)
        if t_pref is None:  # FeLiX: T_pref over the observed durations of the explored clients
            d = np.sort(DURATIONS[was_explored])
            t_pref = float(d[min(int(d.size * threshold / 100.0), d.size - 1)]) if d.size else math.inf
        assert state.t_pref == t_pref, (variant, rnd)
        _explore(view, clients, _utility(rnd), rnd, DURATIONS)
