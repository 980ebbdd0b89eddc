"""Aggregators with their own rule (``Aggregator.combine``): the built-in coordinate-wise trimmed mean
and median by hand, rejected rows left out (not averaged in as zeros), one compilation whatever the
mask, the server using the rule end to end under one corrupted client, and a plugin file's median
run by ``compare`` from the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax import plugins
from felix_jax.fleet.simulator import FleetSimulator, PolicyError
from felix_jax.options import OptionError
from felix_jax.plugin_calls import PluginError
from felix_jax.policies import Aggregator, make_aggregator
from felix_jax.policies.aggregators import (AGGREGATORS, BufferInfo, median_update, trimmed_mean_update)
from felix_jax.policies.aggregators.robust import trimmed_count

ROOT = Path(__file__).resolve().parents[1]
ALL5 = jnp.ones(5, bool)


def column(*values) -> jax.Array:
    """(K,) one scalar coordinate per update."""
    return jnp.asarray(values, jnp.float32)


def combine(name: str, deltas, keep, **options):
    agg = make_aggregator(name, **options)
    return agg.combine(deltas, jnp.asarray(keep), jnp.where(jnp.asarray(keep), 1.0, 0.0))


# ---------------------------------------------------------------- the rules, by hand
def test_the_trimmed_mean_drops_one_value_at_each_end_of_five():
    out = combine("trimmed-mean", column(1, 2, 3, 4, 100), ALL5, trim=0.2)
    assert float(out) == 3.0  # (2 + 3 + 4) / 3: the outlier 100 and the lowest 1 dropped
    assert float(combine("trimmed-mean", column(100, 4, 1, 3, 2), ALL5, trim=0.2)) == 3.0  # order-free
    assert float(combine("trimmed-mean", column(1, 2, 3, 4, 100), ALL5, trim=0.0)) == 22.0  # trim 0: the mean
    assert float(combine("median", column(1, 2, 3, 4, 100), ALL5)) == 3.0


def test_a_two_leaf_tree_is_trimmed_per_coordinate():
    deltas = {"w": jnp.array([[1.0, -50.0], [2.0, 0.0], [3.0, 1.0], [4.0, 2.0], [100.0, 3.0]]),
              "b": jnp.array([[[5.0]], [[-5.0]], [[0.0]], [[1.0]], [[2.0]]])}
    out = combine("trimmed-mean", deltas, ALL5)
    assert out["w"].shape == (2,) and out["b"].shape == (1, 1)
    np.testing.assert_allclose(out["w"], [3.0, 1.0])  # (2+3+4)/3; (0+1+2)/3: -50 and 3 dropped
    np.testing.assert_allclose(out["b"], [[1.0]])  # (0+1+2)/3: 5 and -5 dropped
    med = combine("median", deltas, ALL5)
    np.testing.assert_allclose(med["w"], [3.0, 1.0])
    np.testing.assert_allclose(med["b"], [[1.0]])


def test_rejected_rows_are_left_out_not_averaged_in_as_zeros():
    # the update guard zeroed row 2: K' = 4, trim 0.25 drops floor(1.0) = 1 at each end of [1, 2, 4, 100]
    deltas, keep = column(1, 2, 0, 4, 100), jnp.array([True, True, False, True, True])
    assert float(combine("trimmed-mean", deltas, keep, trim=0.25)) == 3.0  # (2 + 4) / 2
    # were the zero a value: [0, 1, 2, 4, 100] drops 0 and 100 and gives 7/3
    assert float(combine("trimmed-mean", deltas, ALL5, trim=0.25)) == pytest.approx(7 / 3)
    assert float(combine("median", deltas, keep)) == 3.0  # K' = 4: the mean of the two middle values
    # a rejected row of any value (not only zero) changes nothing
    assert float(combine("trimmed-mean", column(1, 2, -1e9, 4, 100), keep, trim=0.25)) == 3.0


def test_three_accepted_updates_trim_none_at_0_2():
    deltas, keep = column(1, 2, 0, 0, 100), jnp.array([True, True, False, False, True])
    assert float(combine("trimmed-mean", deltas, keep, trim=0.2)) == pytest.approx(103 / 3)  # floor(0.6) = 0
    assert float(combine("trimmed-mean", deltas, keep, trim=0.4)) == 2.0  # floor(1.2) = 1: the middle one
    assert float(combine("median", deltas, keep)) == 2.0
    assert float(combine("trimmed-mean", column(7, 0, 0, 0, 0), ALL5.at[1:].set(False))) == 7.0  # K' = 1


def test_the_trimmed_count_is_floor_of_trim_times_accepted_exactly():
    assert [trimmed_count(0.2, k) for k in range(11)] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2]
    assert trimmed_count(0.29, 100) == 29  # 0.29 * 100 is 28.999... in floating point
    assert trimmed_count(0.49, 100) == 49 and trimmed_count(0.49, 2) == 0  # always one value left


# K' = 1 .. 6 accepted rows of 6 (the first K' of VALUES; the rest rejected, pushed out of the sort).
# Each entry: trim -> (the count dropped at each end for K' = 1..6, the trimmed means by hand).
VALUES = (8.0, 1.0, 32.0, 2.0, 16.0, 4.0)
HAND = {
    0.2: ((0, 0, 0, 0, 1, 1), (8, 4.5, 41 / 3, 43 / 4, 26 / 3, 7.5)),
    0.25: ((0, 0, 0, 1, 1, 1), (8, 4.5, 41 / 3, 5, 26 / 3, 7.5)),
    0.3333333333: ((0, 0, 0, 1, 1, 1), (8, 4.5, 41 / 3, 5, 26 / 3, 7.5)),
    0.4999999999: ((0, 0, 1, 1, 2, 2), (8, 4.5, 8, 5, 8, 6)),
}
MEDIANS = (8, 4.5, 8, 5, 8, 6)  # K' = 1..6: [8], [1 8], [1 8 32], [1 2 8 32], [1 2 8 16 32], [1 2 4 8 16 32]


@pytest.mark.parametrize("trim", sorted(HAND))
def test_the_trimmed_mean_at_every_k_from_1_to_6_by_hand(trim):
    """floor(trim x K') dropped at each end, exactly: 0.4999999999 at K' = 2 and 0.3333333333 at K' = 3
    drop nothing (a rounding allowance dropped one at each end and left nothing: a zero update)."""
    counts, means = HAND[trim]
    for accepted in range(1, 7):
        keep = jnp.arange(6) < accepted
        assert trimmed_count(trim, accepted) == counts[accepted - 1], (trim, accepted)
        out = combine("trimmed-mean", column(*VALUES), keep, trim=trim)
        assert float(out) == pytest.approx(means[accepted - 1], rel=1e-6), (trim, accepted)
        kept = sorted(VALUES[:accepted])[counts[accepted - 1]:accepted - counts[accepted - 1]]
        assert float(out) == pytest.approx(sum(kept) / len(kept), rel=1e-6)  # the same, from the sorted values


def test_the_median_at_every_k_from_1_to_6_by_hand():
    for accepted in range(1, 7):
        keep = jnp.arange(6) < accepted
        assert float(combine("median", column(*VALUES), keep)) == MEDIANS[accepted - 1], accepted


def test_the_reviewers_two_updates_at_trim_just_below_a_half_give_their_mean_not_zero():
    deltas = jnp.asarray([[1.0, 2.0], [3.0, 6.0]])
    out = trimmed_mean_update(deltas, jnp.ones(2, bool), trim=0.4999999999)
    np.testing.assert_array_equal(np.asarray(out), [2.0, 4.0])  # was [0, 0]: both rows dropped, nothing left


def test_a_decimal_trim_counts_as_written_not_as_its_binary_float():
    assert trimmed_count(0.3, 10) == 3 and trimmed_count(0.3, 20) == 6  # 3/10 x K', exactly
    assert trimmed_count(0.29, 100) == 29 and trimmed_count(0.07, 100) == 7 and trimmed_count(0.14, 50) == 7
    assert trimmed_count(0.3333333333, 3) == 0 and trimmed_count(0.3333333333, 6) == 1  # 1.9999999998
    assert trimmed_count(0.4999999999, 2) == 0 and trimmed_count(0.4999999999, 3) == 1
    assert [trimmed_count(0.4999999999, k) for k in range(0, 8)] == [0, 0, 0, 1, 1, 2, 2, 3]  # (K'-1) // 2 at most


def test_plain_mean_reason_names_the_rules_that_reduce_to_the_mean():
    from felix_jax.policies.aggregators.robust import MedianConfig, TrimmedMeanConfig, plain_mean_reason

    assert [plain_mean_reason(MedianConfig(), k) is not None for k in range(1, 5)] == [True, True, False, False]
    assert [plain_mean_reason(TrimmedMeanConfig(trim=0.25), k) is not None for k in range(1, 6)] == \
        [True, True, True, False, False]
    assert plain_mean_reason(TrimmedMeanConfig(trim=0.0), 100) == "trim=0 drops floor(0 x 100) = 0 values at each end"
    assert plain_mean_reason(object(), 2) is None  # not a robust rule's config


def test_the_rules_compile_once_whatever_the_mask():
    deltas = {"w": jnp.arange(20.0).reshape(5, 4), "b": jnp.arange(5.0)}
    masks = [ALL5, jnp.array([True, False, True, True, False]), jnp.array([False] * 4 + [True])]
    trimmed_mean_update(deltas, masks[0], trim=0.2)
    median_update(deltas, masks[0])
    before = trimmed_mean_update._cache_size(), median_update._cache_size()
    agg = make_aggregator("trimmed-mean", trim=0.2)
    for keep in masks:
        agg.combine(deltas, keep, keep.astype(jnp.float32))
        median_update(deltas, keep)
    assert (trimmed_mean_update._cache_size(), median_update._cache_size()) == before


def test_the_robust_rules_weigh_updates_alike_and_the_weighted_mean_ones_set_no_combine():
    info = BufferInfo(staleness=np.array([0, 3, 9]), num_samples=np.ones(3), utility=np.ones(3),
                      loss_mean=np.ones(3), delta_norms=np.ones(3))
    for name in ("trimmed-mean", "median"):
        agg = make_aggregator(name)
        assert agg.combine is not None and agg.server_lr == 0.3
        np.testing.assert_array_equal(agg.weights(info), [1.0, 1.0, 1.0])
    for name in ("fedavg", "fedbuff", "fedasync", "refl_saa", "tierfuse"):
        assert AGGREGATORS[name]().combine is None, name  # their server step is the weighted mean, unchanged


def test_trim_outside_its_range_is_refused_in_one_line():
    for value, text in ((0.5, "0.5"), (-0.1, "-0.1")):
        with pytest.raises(OptionError) as caught:
            make_aggregator("trimmed-mean", trim=value)
        assert str(caught.value) == f"aggregator.trim={text}: must be in [0, 0.5)"
    with pytest.raises(OptionError, match=r"^aggregator\.trim: unknown option"):
        make_aggregator("median", trim=0.2)


def test_run_list_shows_the_robust_rules_and_their_options(capsys):
    from felix_jax.cli import main

    assert main(["run", "--list"]) in (0, None)
    text = capsys.readouterr().out
    assert re.search(r"aggregator trimmed-mean:\n\s+trim: float = 0\.2 \(in \[0, 0\.5\)\)\n"
                     r"\s+server_lr: float = 0\.3 \(a finite number > 0\)", text), text
    assert re.search(r"aggregator median:\n\s+server_lr: float = 0\.3", text)


# ---------------------------------------------------------------- the server's contract
def test_a_combine_that_returns_the_wrong_shape_is_a_policy_error():
    deltas = {"w": jnp.ones((3, 2)), "b": jnp.ones((3,))}
    keep, weights = np.array([True, False, True]), np.array([1.0, 0.0, 1.0])
    seen = {}

    def stacked(d, k, w):  # forgets to reduce over K
        seen.update(keep=np.asarray(k), weights=np.asarray(w))
        return d

    fake = types.SimpleNamespace(aggregator=Aggregator("stacked", lambda info: None, combine=stacked))
    with pytest.raises(PolicyError, match=r"^aggregator stacked's combine returned a leaf of shape \(3,\) where "
                                          r"the update needs \(\) \(the delta's without K\)$"):
        FleetSimulator._combined_update(fake, deltas, keep, weights)
    assert seen["keep"].dtype == bool and seen["keep"].tolist() == [True, False, True]
    assert seen["weights"].dtype == np.float32
    fake = types.SimpleNamespace(aggregator=Aggregator("one", lambda info: None, combine=lambda d, k, w: d["w"][0]))
    with pytest.raises(PolicyError, match=r"^aggregator one's combine returned a tree"):
        FleetSimulator._combined_update(fake, deltas, keep, weights)
    ok = types.SimpleNamespace(aggregator=make_aggregator("trimmed-mean"))
    out = FleetSimulator._combined_update(ok, deltas, keep, weights)
    assert out["w"].shape == (2,) and out["b"].shape == ()


def test_a_plugins_combine_is_jitted_and_its_errors_name_it():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class LrConfig:
        server_lr: float = 0.3

    traced = []

    def mean_of_kept(deltas, keep, weights):
        traced.append(1)  # runs once per trace: jitted, not op by op
        return jax.tree_util.tree_map(lambda d: (d * keep[:, None]).sum(0) / keep.sum(), deltas)

    @plugins.aggregator("test-robust-kept-mean", config=LrConfig)
    def make_kept_mean(config):
        return Aggregator("test-robust-kept-mean", lambda info: np.ones(len(info.staleness)),
                          server_lr=config.server_lr, combine=mean_of_kept)

    def broken(deltas, keep, weights):
        raise ValueError("no rule yet")

    @plugins.aggregator("test-robust-broken", config=LrConfig)
    def make_broken(config):
        return Aggregator("test-robust-broken", lambda info: np.ones(len(info.staleness)), combine=broken)

    agg = make_aggregator("test-robust-kept-mean")
    deltas = {"w": jnp.array([[1.0, 2.0], [3.0, 4.0], [50.0, 60.0]])}
    for keep in (jnp.array([True, True, False]), jnp.array([False, True, True])):
        agg.combine(deltas, keep, keep.astype(jnp.float32))
    np.testing.assert_allclose(agg.combine(deltas, jnp.array([True, True, False]), jnp.ones(3))["w"], [2.0, 3.0])
    assert len(traced) == 1
    with pytest.raises(PluginError, match=r"^aggregator 'test-robust-broken'\.combine failed at .*"
                                          r"test_robust_aggregation\.py:\d+: ValueError: no rule yet$"):
        make_aggregator("test-robust-broken").combine(deltas, jnp.ones(3, bool), jnp.ones(3))


# ---------------------------------------------------------------- end to end
def corrupt_client(sim, client: int, scale: float) -> list[int]:
    """Every delta ``client`` uploads arrives scaled by ``scale`` (a Byzantine client), the rest as trained.
    Returns the list the corrupted updates are counted in (one entry per buffer that held one)."""
    take, aggregate = sim.executor.take_deltas, sim.aggregate
    clients, corrupted = [], []

    def aggregate_noting_clients(updates):
        clients[:] = [u.task.client for u in updates]
        return aggregate(updates)

    def take_corrupted(outcomes):
        s = np.where(np.asarray(clients) == client, scale, 1.0).astype(np.float32)
        if (s != 1.0).any():
            corrupted.append(int((s != 1.0).sum()))
        return jax.tree_util.tree_map(lambda d: d * jnp.asarray(s).reshape((-1,) + (1,) * (d.ndim - 1)),
                                      take(outcomes))

    sim.aggregate, sim.executor.take_deltas = aggregate_noting_clients, take_corrupted
    return corrupted


def test_the_trimmed_mean_keeps_learning_under_one_corrupted_client_where_fedbuff_does_not():
    """FeLiX's selectors with the trimmed mean against the same with FedBuff's weighted mean, one client
    of 12 sending -1000x its update and the update guard's norm rule off (it would reject such an update:
    this is the rule's own robustness). K = 5, trim 0.2: the corrupted value is dropped per coordinate."""
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.build import build_simulator

    plugins.strategy("test-felix-trimmed", mode="async", knowledge="tiertrack", selector="oort",
                     aggregator="trimmed-mean", eval_selector="tierselect-eval")
    base = get_preset("tiny").with_overrides({
        "target_accuracy": "none", "concurrency": "8", "aggregation_goal": "5", "max_aggregations": "12",
        "availability": "avail100", "update_guard.max_norm_ratio": "none"})
    final = {}
    for strategy in ("test-felix-trimmed", "felix-no-tierfuse"):
        sim = build_simulator(base.with_overrides({"strategy": strategy}))
        corrupted = corrupt_client(sim, client=0, scale=-1e3)
        rec = sim.run()
        assert len(corrupted) >= 3 and max(corrupted) == 1, (strategy, corrupted)  # one per buffer at most
        assert sim.acct.rejected_updates_norm == 0
        final[strategy] = rec.checkpoints[-1].accuracy
    assert final["test-felix-trimmed"] >= 0.4, final  # 0.544 when written (0.469 with no client corrupted)
    assert final["felix-no-tierfuse"] <= 0.15, final  # 10 classes: chance


# ---------------------------------------------------------------- a plugin's median from the command line
def docs_median_plugin() -> str:
    """The worked ``my_median.py`` of docs/file-formats.md ("Plugins"), as the reader copies it."""
    text = (ROOT / "docs" / "file-formats.md").read_text()
    found = re.search(r"```python\n(# my_median\.py\n.*?)```", text, re.S)
    assert found, "docs/file-formats.md lost its my_median.py example"
    return found.group(1)


def test_a_plugin_file_median_runs_under_compare_by_relative_paths(tmp_path):
    (tmp_path / "my_median.py").write_text(docs_median_plugin())
    proc = subprocess.run([sys.executable, "-m", "felix_jax.cli", "compare", "--scenario", "tiny", "--set",
                           "plugins=my_median.py", "--strategies", "my-median-strategy,my-trimmed-strategy,felix",
                           "--availability",
                           "avail100", "--set", "max_aggregations=3", "--set", "target_accuracy=none", "--quiet",
                           "--out", "c"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = tmp_path / "c" / "runs"
    for cell in ("my-median-strategy-avail100-seed0", "my-trimmed-strategy-avail100-seed0", "felix-avail100-seed0"):
        summary = json.loads((runs / cell / "summary.json").read_text())
        assert summary["aggregations"] == 3, cell
    config = json.loads((runs / "my-median-strategy-avail100-seed0" / "config.json").read_text())
    assert config["policies"]["aggregator"] == {"server_lr": 0.3}
    trimmed = json.loads((runs / "my-trimmed-strategy-avail100-seed0" / "config.json").read_text())
    assert trimmed["policies"]["aggregator"]["trim"] == 0.2 and trimmed["strategy"]["aggregator"] == "trimmed-mean"
