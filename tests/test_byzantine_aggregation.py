"""Krum, Multi-Krum and Bulyan (policies/aggregators/byzantine.py) against hand-computed selections on small
sets of 2-D points (ties included), against a brute-force reading of the papers' definitions on random sets,
through the aggregator's hooks as the server calls them, with masks (rows the update guard rejected), one
compilation whatever the mask, and the refusal of an aggregation_goal too small for f."""

from __future__ import annotations

import itertools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.experiment.scenario import Scenario
from felix_jax.options import OptionError
from felix_jax.policies import make_aggregator
from felix_jax.policies.aggregators import BufferInfo, bulyan_update, multi_krum_update
from felix_jax.policies.aggregators.byzantine import (BulyanConfig, KrumConfig, MultiKrumConfig, bulyan_selection,
                                                      krum_scores, krum_selection, plain_mean_reason,
                                                      squared_distances, too_few_updates)

# four points of a unit square and one outlier: every square point's 2 (= n - f - 2, f = 1) nearest
# neighbours are at squared distance 1 and 1, so the four tie at s = 2; the outlier's nearest are
# (1,1) at 162 and (1,0) or (0,1) at 181: s = 343
SQUARE = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [10.0, 10.0]])
ALL5 = jnp.ones(5, bool)


def rows(mask) -> list[int]:
    return [int(i) for i in np.flatnonzero(np.asarray(mask))]


# ---------------------------------------------------------------- Krum and Multi-Krum by hand
def test_krum_scores_of_the_square_and_its_outlier():
    distances = squared_distances(SQUARE)
    np.testing.assert_array_equal(distances, [[0, 1, 1, 2, 200], [1, 0, 2, 1, 181], [1, 2, 0, 1, 181],
                                              [2, 1, 1, 0, 162], [200, 181, 181, 162, 0]])
    np.testing.assert_array_equal(krum_scores(distances, ALL5, 1), [2, 2, 2, 2, 343])
    # f = 0: n - f - 2 = 3 neighbours: 1 + 1 + 2 for each square point, 162 + 181 + 181 for the outlier
    np.testing.assert_array_equal(krum_scores(distances, ALL5, 0), [4, 4, 4, 4, 524])


def test_krum_picks_the_lowest_score_and_the_earlier_row_of_a_tie():
    assert rows(krum_selection(SQUARE, ALL5, f=1)) == [0]  # four tie at 2: the first
    np.testing.assert_array_equal(multi_krum_update(SQUARE, ALL5, f=1, m=1), [0.0, 0.0])
    reordered = SQUARE[jnp.array([4, 3, 1, 2, 0])]  # the same points, (1,1) now first of the tied
    assert rows(krum_selection(reordered, ALL5, f=1)) == [1]
    np.testing.assert_array_equal(multi_krum_update(reordered, ALL5, f=1, m=1), [1.0, 1.0])


def test_krum_without_a_tie():
    # (0,0) (2,0) (0,1) (1,1) (9,9), f = 1: s = 1+2, 2+4, 1+1, 1+2, 128+130 -> (0,1) alone has the lowest
    points = jnp.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [9.0, 9.0]])
    np.testing.assert_array_equal(krum_scores(squared_distances(points), ALL5, 1), [3, 6, 2, 3, 258])
    np.testing.assert_array_equal(multi_krum_update(points, ALL5, f=1, m=1), [0.0, 1.0])
    # Multi-Krum m = 3: the scores 2, 3, 3 -> rows 2, 0, 3 (the tie at 3 in row order): their mean
    assert rows(krum_selection(points, ALL5, f=1, m=3)) == [0, 2, 3]
    np.testing.assert_allclose(multi_krum_update(points, ALL5, f=1, m=3), [1 / 3, 2 / 3], rtol=1e-6)


def test_multi_krum_averages_the_m_lowest_scores_default_n_minus_f():
    np.testing.assert_array_equal(multi_krum_update(SQUARE, ALL5, f=1), [0.5, 0.5])  # m = 5 - 1: the square
    assert rows(krum_selection(SQUARE, ALL5, f=1, m=None)) == [0, 1, 2, 3]
    np.testing.assert_array_equal(multi_krum_update(SQUARE, ALL5, f=1, m=2), [0.5, 0.0])  # rows 0, 1 of the tie
    np.testing.assert_allclose(multi_krum_update(SQUARE, ALL5, f=1, m=5), [2.4, 2.4], rtol=1e-6)  # m = n: the mean


def test_a_rejected_row_is_no_ones_neighbour_and_never_selected():
    # the guard rejected the outlier's row (zeroed): K' = 4 < 2f + 3 at f = 1 -> nothing selected
    keep = ALL5.at[4].set(False)
    assert rows(krum_selection(SQUARE, keep, f=1)) == []
    np.testing.assert_array_equal(multi_krum_update(SQUARE, keep, f=1), [0.0, 0.0])
    # at f = 0 the four are enough (n >= 3): 2 neighbours each, 1 + 1 apiece, a four-way tie -> row 0
    assert rows(krum_selection(SQUARE, keep, f=0)) == [0]
    assert rows(krum_selection(SQUARE, keep, f=0, m=None)) == [0, 1, 2, 3]
    # a rejected row of any value changes nothing
    far = SQUARE.at[0].set(jnp.array([-1e6, 3e5]))
    keep0 = ALL5.at[0].set(False)
    np.testing.assert_array_equal(krum_selection(far, keep0, f=0, m=None), krum_selection(SQUARE, keep0, f=0, m=None))


def test_krum_needs_2f_plus_3_updates():
    for accepted in range(1, 8):
        keep = jnp.arange(7) < accepted
        points = jnp.concatenate([SQUARE, jnp.array([[0.5, 0.5], [2.0, 0.0]])])
        assert bool(krum_selection(points, keep, f=1).any()) == (accepted >= 5), accepted
        assert bool(krum_selection(points, keep, f=2).any()) == (accepted >= 7), accepted


# ---------------------------------------------------------------- Bulyan by hand
SEVEN = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0], [10.0, 10.0], [-9.0, 3.0]])


def test_bulyan_selects_theta_by_iterated_krum_then_beta_nearest_the_median():
    """n = 7, f = 1: theta = 5, beta = 3. Iterated Krum (neighbours n - f - 2, at least one):
    n=7 (4 nbrs): s = 12, 9, 9, 6, 20, ... -> row 3; n=6 (3): rows 0,1,2,4 -> 10, 8, 8, 18 -> row 1 (tie with 2);
    n=5 (2): 9, 6, 13, 309, 175 -> row 2; n=4 (1): 8, 8, 128, 90 -> row 0 (tie with 4); n=3 (1): 122, 128, 122
    -> row 4 (tie with 6). Selected rows 0-4: x = y = (0, 1, 0, 1, 2), median 1, distances (1, 0, 1, 0, 1):
    the 3 nearest are rows 1 and 3, then row 0 (the first of the ties at 1): (1 + 1 + 0) / 3."""
    assert rows(bulyan_selection(SEVEN, jnp.ones(7, bool), f=1)) == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(bulyan_update(SEVEN, jnp.ones(7, bool), f=1), [2 / 3, 2 / 3], rtol=1e-6)


def test_bulyans_beta_nearest_the_median_need_not_trim_both_ends():
    # the second step alone, over theta = 5 selected values 0, 1, 2, 100, 200 (f = 1, beta = 3): median 2,
    # the 3 nearest are 0, 1, 2 (both far ones dropped at the top, none at the bottom), where a trimmed mean
    # would keep 1, 2, 100
    from felix_jax.policies.aggregators.byzantine import closest_to_median_mean

    values = jnp.array([0.0, 1.0, 2.0, 100.0, 200.0, 7.0, 7.0])
    keep = jnp.array([True] * 5 + [False] * 2)
    assert float(closest_to_median_mean(values, keep, f=1)) == 1.0
    # an even theta: the median is the mean of the two middle values, (1 + 2) / 2, and beta = 2: 1 and 2
    assert float(closest_to_median_mean(jnp.array([0.0, 1.0, 2.0, 100.0]), jnp.ones(4, bool), f=1)) == 1.5


def test_bulyan_needs_4f_plus_3_updates():
    points = jnp.concatenate([SEVEN, jnp.array([[0.5, 0.5]])])
    for accepted in range(1, 9):
        keep = jnp.arange(8) < accepted
        assert int(bulyan_selection(points, keep, f=1).sum()) == (accepted - 2 if accepted >= 7 else 0), accepted
    assert rows(bulyan_selection(SQUARE, ALL5, f=0)) == [0, 1, 2, 3, 4]  # f = 0: theta = n, all of them
    np.testing.assert_allclose(bulyan_update(SQUARE, ALL5, f=0), [2.4, 2.4], rtol=1e-6)  # beta = n: the mean


# ---------------------------------------------------------------- the papers' definitions, brute force
def reference_krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    n = len(x)
    neighbours = max(n - f - 2, 1)
    return np.array([sorted(((x[i] - x[j]) ** 2).sum() for j in range(n) if j != i)[:min(neighbours, n - 1)]
                     for i in range(n)]).sum(axis=1)


def reference_multi_krum(x: np.ndarray, f: int, m: int) -> np.ndarray:
    return x[np.argsort(reference_krum_scores(x, f), kind="stable")[:m]].mean(axis=0)


def reference_bulyan(x: np.ndarray, f: int) -> np.ndarray:
    remaining, chosen = list(range(len(x))), []
    for _ in range(len(x) - 2 * f):  # theta = n - 2f by Krum over what is left
        pick = remaining[int(np.argmin(reference_krum_scores(x[remaining], f)))]
        chosen.append(pick)
        remaining.remove(pick)
    s = x[sorted(chosen)]
    beta = len(s) - 2 * f  # theta - 2f
    out = []
    for c in range(x.shape[1]):  # M_c = argmin over beta-subsets R of sum_{X in R} |X_c - median_c|
        med = np.median(s[:, c])
        best = min(itertools.combinations(range(len(s)), beta), key=lambda r: np.abs(s[list(r), c] - med).sum())
        out.append(s[list(best), c].mean())
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_rules_equal_the_papers_definitions_on_random_sets(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(11, 3)).astype(np.float32)
    x[rng.choice(11, 2, replace=False)] *= 30  # two Byzantine-looking updates
    keep = jnp.ones(11, bool)
    for f in (0, 1, 2, 3, 4):  # n = 11 >= 2f + 3
        np.testing.assert_allclose(krum_scores(squared_distances(jnp.asarray(x)), keep, f),
                                   reference_krum_scores(x.astype(np.float64), f), rtol=1e-5)
        for m in (1, 3, 11 - f):
            np.testing.assert_allclose(multi_krum_update(jnp.asarray(x), keep, f=f, m=m),
                                       reference_multi_krum(x, f, m), rtol=1e-5, atol=1e-6)
    for f in (0, 1, 2):  # n = 11 >= 4f + 3
        np.testing.assert_allclose(bulyan_update(jnp.asarray(x), keep, f=f), reference_bulyan(x, f),
                                   rtol=1e-5, atol=1e-6)


def test_a_pytree_update_is_one_vector_and_its_rejected_rows_are_left_out():
    rng = np.random.default_rng(5)
    flat = rng.normal(size=(8, 5)).astype(np.float32)
    tree = {"w": jnp.asarray(flat[:, :4].reshape(8, 2, 2)), "b": jnp.asarray(flat[:, 4])}
    keep = jnp.array([True, True, False, True, True, True, True, True])
    kept = flat[np.asarray(keep)]
    out = multi_krum_update(tree, keep, f=1, m=2)
    want = reference_multi_krum(kept, 1, 2)
    np.testing.assert_allclose(np.concatenate([np.asarray(out["w"]).ravel(), np.asarray(out["b"]).ravel()]),
                               want, rtol=1e-5)
    out = bulyan_update(tree, keep, f=1)
    want = reference_bulyan(kept, 1)
    np.testing.assert_allclose(np.concatenate([np.asarray(out["w"]).ravel(), np.asarray(out["b"]).ravel()]),
                               want, rtol=1e-5, atol=1e-6)
    assert out["w"].shape == (2, 2) and out["w"].dtype == jnp.float32


# ---------------------------------------------------------------- through the aggregator's hooks
def server_update(agg, deltas, keep: np.ndarray):
    """What the server does with a buffer (fleet/simulator.py ``aggregate``): rejected rows zeroed and
    marked staleness -1 for ``augment_info``, the weights of the accepted rows, combine over the rows kept
    and weighted > 0."""
    k = len(keep)
    deltas = jax.tree_util.tree_map(lambda d: jnp.where(jnp.asarray(keep).reshape((-1,) + (1,) * (d.ndim - 1)),
                                                        d, 0), deltas)
    info = BufferInfo(np.where(keep, 0, -1), np.ones(k), np.zeros(k), np.zeros(k), np.zeros(k))
    info = agg.augment_info(info, deltas)
    info = info._make(None if v is None else np.asarray(v)[keep] for v in info)
    weights = np.zeros(k)
    weights[keep] = agg.weights(info)
    return weights, agg.combine(deltas, jnp.asarray(keep & (weights > 0)), jnp.asarray(weights, jnp.float32))


def test_the_aggregators_weigh_their_selection_and_combine_it():
    keep = np.ones(5, bool)
    weights, update = server_update(make_aggregator("krum"), SQUARE, keep)
    np.testing.assert_array_equal(weights, [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(update, [0.0, 0.0])
    weights, update = server_update(make_aggregator("multi-krum"), SQUARE, keep)
    np.testing.assert_array_equal(weights, [1, 1, 1, 1, 0])  # the outlier: weight 0 in events.csv
    np.testing.assert_array_equal(update, [0.5, 0.5])
    keep7 = np.ones(7, bool)
    weights, update = server_update(make_aggregator("bulyan"), SEVEN, keep7)
    np.testing.assert_array_equal(weights, [1, 1, 1, 1, 1, 0, 0])
    np.testing.assert_allclose(update, bulyan_update(SEVEN, jnp.asarray(keep7), f=1))
    # the guard rejected row 3 of the eight: K' = 7 >= 4f + 3 still
    eight = jnp.concatenate([SEVEN, jnp.array([[0.5, 0.5]])])
    keep8 = np.array([True, True, True, False, True, True, True, True])
    weights, update = server_update(make_aggregator("bulyan"), eight, keep8)
    assert weights[3] == 0 and weights.sum() == 5
    np.testing.assert_allclose(update, bulyan_update(eight, jnp.asarray(keep8), f=1))
    # too few accepted (K' = 4 < 5): no weight, so the server takes no step
    weights, _ = server_update(make_aggregator("multi-krum"), SQUARE, np.array([True] * 4 + [False]))
    assert not weights.any()


def test_the_rules_compile_once_whatever_the_mask():
    masks = [ALL5, ALL5.at[1].set(False), ALL5.at[4].set(False).at[0].set(False), jnp.zeros(5, bool)]
    krum_selection(SQUARE, masks[0], f=1, m=None)
    bulyan_selection(SQUARE, masks[0], f=0)
    before = krum_selection._cache_size(), bulyan_selection._cache_size()
    for mask in masks[1:]:
        krum_selection(SQUARE, mask, f=1, m=None)
        bulyan_selection(SQUARE, mask, f=0)
    assert (krum_selection._cache_size(), bulyan_selection._cache_size()) == before


class JitVariantsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_the_aggregators_combine_with_and_without_jit(self):
        agg = make_aggregator("multi-krum", f=1)
        keep = jnp.array([True, True, True, True, False])
        combine = self.variant(agg.combine)
        chex.assert_trees_all_close(combine(SQUARE, keep, keep.astype(jnp.float32)), jnp.array([0.5, 0.5]))


# ---------------------------------------------------------------- options and refusals
def test_too_few_updates_for_f_is_said_in_one_line():
    assert too_few_updates(KrumConfig(f=1), "krum", 5) is None
    assert "2f + 3 = 5" in too_few_updates(KrumConfig(f=1), "krum", 4)
    assert too_few_updates(MultiKrumConfig(f=2), "multi-krum", 7) is None
    assert "4f + 3 = 7" in too_few_updates(BulyanConfig(f=1), "bulyan", 6)
    assert "m=6" in too_few_updates(MultiKrumConfig(f=1, m=6), "multi-krum", 5)
    assert plain_mean_reason(MultiKrumConfig(f=0), 5) and plain_mean_reason(MultiKrumConfig(f=1, m=5), 5)
    assert plain_mean_reason(KrumConfig(f=0), 5) is None


def test_a_scenario_refuses_an_aggregation_goal_too_small_for_f():
    base = Scenario(dataset="digits", model="mlp", num_clients=12, concurrency=8)
    with pytest.raises(OptionError, match=r"aggregator krum with f=1 needs at least 2f \+ 3 = 5 .*aggregation_goal=2"):
        base.with_overrides({"strategy": "krum", "aggregation_goal": "2"})
    with pytest.raises(OptionError, match=r"bulyan with f=1 needs at least 4f \+ 3 = 7"):
        base.with_overrides({"strategy": "bulyan", "aggregation_goal": "6"})
    with pytest.raises(OptionError, match=r"multi-krum with f=2"):  # the option reached from the scenario
        base.with_overrides({"strategy": "fedbuff", "aggregator.name": "multi-krum", "aggregator.f": "2",
                             "aggregation_goal": "6"})
    sc = base.with_overrides({"strategy": "felix", "aggregator.name": "bulyan", "aggregation_goal": "7"})
    assert sc.resolve_strategy().aggregator == BulyanConfig(f=1)
    assert sc.resolve_strategy().strategy.label == "felix[aggregator=bulyan]"
    with pytest.raises(OptionError, match=r"aggregator.f=-1"):
        base.with_overrides({"strategy": "krum", "aggregator.f": "-1", "aggregation_goal": "6"})


# ---------------------------------------------------------------- runs
@pytest.mark.parametrize("strategy,goal", [("krum", 6), ("multi-krum", 6), ("bulyan", 7)])
def test_a_three_aggregation_run_of_each_strategy(strategy, goal, tmp_path, capsys):
    from felix_jax.cli import main

    out = tmp_path / strategy
    assert main(["run", "--preset", "tiny", "--set", f"strategy={strategy}", "--set", "max_aggregations=3",
                 "--set", f"aggregation_goal={goal}", "--set", f"concurrency={goal}", "--quiet", "--out",
                 str(out)]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aggregations"] == 3 and summary["model_steps"] == 3
    selected = {"krum": 1, "multi-krum": goal - 1, "bulyan": goal - 2}[strategy]  # f = 1
    assert summary["updates_accepted"] == 3 * selected
    assert summary["zero_weight_updates"] == 3 * (goal - selected)
    config = json.loads((out / "config.json").read_text())
    assert config["strategy"]["aggregator"] == strategy and config["policies"]["aggregator"]["f"] == 1


def test_compare_puts_multi_krum_on_felix_selectors(tmp_path, capsys):
    from felix_jax.cli import main

    out = tmp_path / "c"
    assert main(["compare", "--scenario", "tiny", "--strategies", "fedbuff,felix@aggregator.name=multi-krum",
                 "--availability", "avail100", "--set", "max_aggregations=2", "--set", "aggregation_goal=5",
                 "--set", "concurrency=5", "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    cell = out / "runs" / "felix+aggregator.name-multi-krum-avail100-seed0"
    config = json.loads((cell / "config.json").read_text())
    assert config["strategy"]["label"] == "felix[aggregator=multi-krum]"
    assert config["policies"]["aggregator"] == {"f": 1, "m": None, "server_lr": 0.3}
