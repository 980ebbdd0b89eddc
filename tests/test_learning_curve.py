"""The measurement along the learning curve: the stop rule's crossing of every level (hand-computed,
a curve that dips back under), the paired ratio at each level, the power line, the per-sample test
record (``test_hits``) and what it reads on subsets, and what ``compare`` writes from them."""

import csv
import json
import math

import numpy as np
import pytest

from felix_jax.cohort import evaluate, evaluate_hits
from felix_jax.data.federated import held_out_to_device
from felix_jax.data.loaders import load_dataset
from felix_jax.experiment import get_preset
from felix_jax.experiment.curve import (crossing_times, highest_common_level, power_line, rule_levels,
                                        seeds_for_precision, speedup_along_curve, target_grid)
from felix_jax.experiment.registry import make_model
from felix_jax.experiment.runner import build_simulator, run
from felix_jax.experiment.stats import t_quantile_975
from felix_jax.experiment.test_hits import num_test_rows, read_test_hits, subset_accuracies
from felix_jax.fleet.config import StopRule
from felix_jax.fleet.snapshot import SnapshotPolicy
from felix_jax.options import OptionError


# ---------------------------------------------------------------- the rule along the curve
def test_rule_levels_by_hand():
    acc = [0.1, 0.5, 0.3, 0.6]
    # window 2: min(mean of the last 2, last): 0.1; min(0.3, 0.5); min(0.4, 0.3); min(0.45, 0.6)
    np.testing.assert_allclose(rule_levels(acc, window=2), [0.1, 0.3, 0.3, 0.45])
    # fewer than the window early on: the mean of those so far
    np.testing.assert_allclose(rule_levels(acc, window=20), [0.1, 0.3, 0.3, 0.375])


def test_a_mean_equal_to_the_target_reaches_it_on_every_python():
    """Ten accuracies of 0.1: summed left to right in floats (Python 3.11's sum) they make
    0.9999999999999999 and the mean falls under 0.1; the rule sums with math.fsum (correctly rounded,
    what 3.12's compensated sum also gives here), so the level is 0.1 and the target is reached wherever
    the rule runs. Means of 250-image accuracies land on a 0.01 grid this way often."""
    acc = [0.1] * 10
    naive = 0.0
    for a in acc:
        naive += a
    assert naive / 10 < 0.1  # the tie a plain float sum breaks the wrong way
    assert StopRule(target_accuracy=0.1, window=10).reached(acc)
    assert rule_levels(acc, window=10)[-1] == 0.1
    assert crossing_times(np.arange(10.0), acc, [0.1], window=10)[0] == 0.0  # every prefix's mean is 0.1


def test_crossing_times_by_hand_with_a_dip_back_under():
    times = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    acc = [0.125, 0.5, 0.5, 0.25, 0.625, 0.75]  # binary fractions: the means are exact
    # window 2 levels: 0.125, 0.3125, 0.5, 0.25 (a dip), 0.4375, 0.6875
    got = crossing_times(times, acc, [0.125, 0.3125, 0.4, 0.5, 0.6, 0.6875, 0.7], window=2)
    # 0.4 and 0.5 are first reached at t=20; the dip at t=30 does not undo it; 0.6 and 0.6875 at t=50
    np.testing.assert_array_equal(got[:6], [0.0, 10.0, 20.0, 20.0, 50.0, 50.0])
    assert math.isnan(got[6])  # never reached


@pytest.mark.parametrize("full_window", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_crossing_times_equal_the_stop_rule_checkpoint_by_checkpoint(seed, full_window):
    rng = np.random.default_rng(seed)
    acc = list(np.clip(np.cumsum(rng.normal(0.02, 0.03, 200)) + 0.1, 0, 1))
    times = np.arange(200) * 7.0
    for target in (0.12, 0.2, 0.3, float(np.round(max(acc), 3)), 0.999):
        rule = StopRule(target_accuracy=target, full_window=full_window)
        first = next((times[i] for i in range(200) if rule.reached(acc[:i + 1])), None)
        got = crossing_times(times, acc, [target], full_window=full_window)[0]
        assert (first is None and math.isnan(got)) or got == first


def test_a_full_window_rule_reaches_nothing_before_its_window():
    levels = rule_levels([0.5, 0.5, 0.5], window=2, full_window=True)
    assert levels[0] == -np.inf and list(levels[1:]) == [0.5, 0.5]
    assert crossing_times([0.0, 1.0, 2.0], [0.5, 0.5, 0.5], [0.5], window=2, full_window=True)[0] == 1.0


def test_target_grid():
    levels = {("a", 0): np.array([0.093, 0.2, 0.35]), ("b", 0): np.array([0.11, 0.15]), ("a", 1): np.array([0.1, 0.27])}
    # above every run's start (0.11) to the highest the reference ("a") reached (0.35), by 0.05
    np.testing.assert_allclose(target_grid(levels, [("a", 0), ("a", 1)], step=0.05), [0.15, 0.2, 0.25, 0.3, 0.35])
    assert len(target_grid(levels, [("b", 0)], step=0.05)) == 1  # 0.15 only
    assert len(target_grid({("a", 0): np.array([0.3, 0.3])}, [("a", 0)], step=0.05)) == 0
    # a full-window rule: no level before the first full window; the start is that window's level
    full = {("a", 0): np.array([-np.inf, -np.inf, 0.21, 0.4]), ("b", 0): np.array([-np.inf, 0.12, 0.3])}
    np.testing.assert_allclose(target_grid(full, [("a", 0)], step=0.05), [0.25, 0.3, 0.35, 0.4])
    # runs cut before their first full window have no level at all: no grid (not an error)
    short = {("a", 0): np.array([-np.inf, -np.inf]), ("b", 0): np.array([-np.inf])}
    assert len(target_grid(short, [("a", 0)], step=0.05)) == 0


def _curve_rows(times_by):
    return [{"strategy": st, "availability": "r", "seed": sd} for (st, _, sd) in times_by]


def test_speedup_along_curve_by_hand():
    t = np.arange(6) * 100.0
    curves = {  # window 1: the level is the accuracy itself
        ("felix", "r", 0): (t, [0.1, 0.3, 0.4, 0.5, 0.5, 0.5], 1),
        ("felix", "r", 1): (t, [0.1, 0.2, 0.3, 0.4, 0.5, 0.5], 1),
        ("base", "r", 0): (t, [0.1, 0.1, 0.3, 0.3, 0.4, 0.4], 1),
        ("base", "r", 1): (t, [0.1, 0.2, 0.2, 0.3, 0.3, 0.5], 1),
    }
    out = speedup_along_curve(_curve_rows(curves), ["felix", "base"], ["r"], "felix", step=0.1, curves=curves)
    by = {round(r["target"], 2): r for r in out}
    assert sorted(by) == [0.2, 0.3, 0.4, 0.5]  # above the start 0.1, to felix's top 0.5
    # 0.2: felix at 100 / 100, base at 200 / 100 -> ratios 2, 1
    assert by[0.2]["n"] == 2 and by[0.2]["ratio_geomean"] == pytest.approx(math.sqrt(2))
    half = t_quantile_975(1) * np.std(np.log([2.0, 1.0]), ddof=1) / math.sqrt(2)
    assert by[0.2]["ratio_ci95_low"] == pytest.approx(math.sqrt(2) * math.exp(-half))
    # 0.4: felix 200 / 300, base 400 / 500 -> ratios 2, 5/3
    assert by[0.4]["n"] == 2 and by[0.4]["ratio_geomean"] == pytest.approx(math.sqrt(2 * 5 / 3))
    # 0.5: felix 300 / 400, base never / 500 -> one ratio, 500/400, no interval
    assert by[0.5]["n"] == 1 and by[0.5]["ratio_geomean"] == pytest.approx(1.25) and by[0.5]["ratio_ci95_low"] is None
    assert (by[0.5]["reference_reached"], by[0.5]["strategy_reached"]) == (2, 1)
    assert by[0.5]["reference_hours_mean"] == pytest.approx(350 / 3600)
    assert highest_common_level(out, "r", "base") == pytest.approx(0.4)


def test_seeds_for_precision_and_power_line():
    half = math.log(1.1)
    for sd in (0.05, 0.2, 0.5):
        n = seeds_for_precision(sd)
        assert t_quantile_975(n - 1) * sd / math.sqrt(n) <= half  # enough
        assert n == 2 or t_quantile_975(n - 2) * sd / math.sqrt(n - 1) > half  # and the fewest
    assert seeds_for_precision(0.2) == 20  # t(0.975, 19) * 0.2 / sqrt(20) = 0.0936 <= 0.0953 < 0.0964 at 19
    assert power_line([1.2]) is None
    line = power_line([1.0, math.e ** 0.2, math.e ** -0.2])  # log ratios 0, 0.2, -0.2: sd 0.2
    assert "sd of log ratio 0.200 over 3 seeds" in line and "about 20 seeds" in line


# ---------------------------------------------------------------- the per-sample test record
def test_evaluate_hits_equals_evaluate_and_the_argmax():
    ds = load_dataset("digits")
    test = held_out_to_device(ds)
    model = make_model("mlp", ds.input_shape, ds.num_classes)
    import jax

    versions = [model.init(jax.random.key(k)) for k in range(3)]
    out = evaluate_hits(model, versions, test, chunk=100)  # 360 samples: a padded last chunk
    for params, (metrics, packed) in zip(versions, out):
        assert metrics == evaluate(model, params, test, chunk=100)
        bits = np.unpackbits(packed, count=len(ds.test_y)).astype(bool)
        logits = np.asarray(model.apply(params, test.inputs(np.arange(len(ds.test_y)))))
        np.testing.assert_array_equal(bits, logits.argmax(-1) == ds.test_y)
        assert metrics.accuracy == bits.sum() / len(ds.test_y)
    padded = evaluate_hits(model, versions[:2], test, chunk=100, pad_to=4)
    assert len(padded) == 2 and all(np.array_equal(a[1], b[1]) for a, b in zip(padded, out))


def _tiny(**sets):
    base = {"strategy": "felix", "availability": "avail50", "max_aggregations": "16", "stop_at_target": "false"}
    return get_preset("tiny").with_overrides({**base, **sets})


def _metrics(d):
    with open(d / "metrics.csv") as f:
        return [(float(r["time_s"]), float(r["accuracy"]), float(r["loss"])) for r in csv.DictReader(f)]


def test_a_run_with_test_hits_is_the_same_run_and_its_record_reads_any_subset(tmp_path):
    run(_tiny(test_hits="true"), tmp_path / "hits")
    run(_tiny(), tmp_path / "plain")
    run(_tiny(num_test="100"), tmp_path / "sub")
    assert _metrics(tmp_path / "hits") == _metrics(tmp_path / "plain")  # keeping the record changes nothing
    rec = read_test_hits(tmp_path / "hits")
    acc = [a for _, a, _ in _metrics(tmp_path / "hits")]
    assert rec.hits.shape == (len(acc), -(-360 // 8)) and rec.num_test == 360
    np.testing.assert_array_equal(subset_accuracies(rec), acc)
    ds = load_dataset("digits")
    rows = num_test_rows(None, 100, len(ds.train_y), len(ds.test_y))
    sub = [a for _, a, _ in _metrics(tmp_path / "sub")]
    # the run on a 100-sample test set measured exactly what the record reads on those rows
    np.testing.assert_array_equal(subset_accuracies(rec, rows), sub)
    assert [t for t, _, _ in _metrics(tmp_path / "sub")] == [float(t) for t in rec.time_s]
    assert not (tmp_path / "plain" / "test_hits.npz").exists()
    config = json.loads((tmp_path / "hits" / "config.json").read_text())
    assert config["scenario"]["test_hits"] is True and config["stop"]["keep_hits"] is True


def test_test_hits_under_eval_batch_and_across_a_resume(tmp_path):
    whole = build_simulator(_tiny(test_hits="true")).run()
    batched = build_simulator(_tiny(test_hits="true", eval_batch="4")).run()
    assert len(whole.test_hits) == len(whole.checkpoints)
    assert all(np.array_equal(a, b) for a, b in zip(whole.test_hits, batched.test_hits))

    class Killed(Exception):
        pass

    def on_saved(path):
        if path.name.startswith("snap-000008-"):
            raise Killed

    sim = build_simulator(_tiny(test_hits="true"))
    sim.snapshot = SnapshotPolicy(tmp_path, every_aggregations=4, on_saved=on_saved)
    with pytest.raises(Killed):
        sim.run()
    resumed = build_simulator(_tiny(test_hits="true"))
    resumed.restore(tmp_path)
    assert 0 < len(resumed.test_hits) < len(whole.test_hits)
    again = resumed.run()
    assert len(again.test_hits) == len(whole.test_hits)
    assert all(np.array_equal(a, b) for a, b in zip(whole.test_hits, again.test_hits))


def test_test_hits_is_refused_with_a_live_test_mix():
    with pytest.raises(OptionError, match="test_hits=true"):
        get_preset("digits-stream").with_overrides({"test_hits": "true"})
    get_preset("digits-stream").with_overrides({"test_hits": "true", "stream.live_eval": "false"})


def test_read_test_hits_names_a_missing_record(tmp_path):
    from felix_jax.traces.data_paths import DataFileError

    with pytest.raises(DataFileError, match="test_hits=true"):
        read_test_hits(tmp_path)


# ---------------------------------------------------------------- compare along the curve
def test_compare_past_the_target_writes_the_curve(tmp_path):
    from felix_jax.cli import main

    out = tmp_path / "c"
    assert main(["compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--availability", "avail50",
                 "--seeds", "0,1", "--set", "stop_at_target=false", "--set", "max_aggregations=12",
                 "--set", "target_accuracy=0.2",
                 "--out", str(out)]) in (0, None)
    with open(out / "speedup_vs_target.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["strategy"] for r in rows} == {"fedbuff"} and {r["reference"] for r in rows} == {"felix"}
    levels = [float(r["target"]) for r in rows]
    assert levels == sorted(levels) and all(abs(x * 100 - round(x * 100)) < 1e-6 for x in levels)
    # every row's ratio is the paired ratio of the runs' own crossings
    summaries = {(p.name.split("-")[0], p.name.rsplit("seed", 1)[1]): p for p in (out / "runs").iterdir()}
    from felix_jax.experiment.curve import read_curve

    r = rows[len(rows) // 2]
    ratios = []
    for sd in ("0", "1"):
        tf = crossing_times(*read_curve(summaries["felix", sd])[:2], [float(r["target"])])[0]
        tb = crossing_times(*read_curve(summaries["fedbuff", sd])[:2], [float(r["target"])])[0]
        if np.isfinite(tf) and np.isfinite(tb):
            ratios.append(tb / tf)
    if ratios:
        assert float(r["ratio_geomean"]) == pytest.approx(math.exp(np.mean(np.log(ratios))))
    table = (out / "table.txt").read_text()
    assert "speed-up along the learning curve" in table and "power, avail50 fedbuff" in table
    assert (out / "speedup_vs_target.png").is_file()
    assert "speedup_vs_target.png" in (out / "report.html").read_text()
