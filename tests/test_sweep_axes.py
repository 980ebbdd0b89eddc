"""A sweep over a field of the scenario's world is an axis like the regime: each value has its own
reference cell and its own paired ratios (``--sweep alpha=...``, ``--sweep num_clients=...``);
``--reference STRATEGY`` picks the reference; a sweep over a strategy's knob stays variants."""

from __future__ import annotations

import csv
import html
import json

import pytest

from felix_jax.cli import main
from felix_jax.experiment import get_preset
from felix_jax.experiment.compare import cell_overrides
from felix_jax.experiment.sweep_axes import axis_keys, comparison_view, split_label
from tests.test_writers import finished_cell

# hours to target per (strategy, value), seeds 0 and 1: fedbuff takes 3x felix's hours at the first
# value, 2x at the second; felix at the second value is 2x / 4x faster than at the first
HOURS = {("felix", 0): (1.0, 2.0), ("fedbuff", 0): (3.0, 6.0), ("felix", 1): (0.5, 0.5), ("fedbuff", 1): (1.0, 1.0)}


def finished_sweep(out, key, values):
    """Every cell of ``--strategies felix,fedbuff --sweep KEY=values --seeds 0,1`` written by hand."""
    base = get_preset("tiny").with_overrides({"max_aggregations": "3", "target_accuracy": "0.3"})
    for st in ("felix", "fedbuff"):
        for i, v in enumerate(values):
            label = f"{st}@{key}={v}"
            for seed in (0, 1):
                sc = base.with_overrides({**cell_overrides(label), "availability": "avail50", "seed": seed})
                run_dir = finished_cell(out, sc, label, [0.1, 0.2, 0.3, 0.35])
                summary = json.loads((run_dir / "summary.json").read_text())
                summary["time_to_target_h"] = HOURS[st, i][seed]
                summary["time_to_target_s"] = HOURS[st, i][seed] * 3600
                (run_dir / "summary.json").write_text(json.dumps(summary))


def compare(out, key, values, *more):
    return main(["compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--sweep",
                 f"{key}={','.join(values)}", "--availability", "avail50", "--seeds", "0,1", "--set",
                 "max_aggregations=3", "--set", "target_accuracy=0.3", "--quiet", "--out", str(out), *more])


def pooled(out) -> dict:
    with open(out / "summary_pooled.csv", newline="") as f:
        return {(r["strategy"], r["availability"]): r for r in csv.DictReader(f)}


@pytest.mark.parametrize("key,values", [("alpha", ["0.05", "1.0"]), ("num_clients", ["6", "12"])])
def test_each_value_is_compared_with_the_reference_at_that_value(tmp_path, capsys, key, values):
    out = tmp_path / "cmp"
    finished_sweep(out, key, values)
    assert compare(out, key, values) == 0
    assert "all 8 cells" in capsys.readouterr().out  # nothing trained
    p = pooled(out)
    first, second = (f"avail50 {key}={v}" for v in values)
    assert set(p) == {(s, rg) for s in ("felix", "fedbuff") for rg in (first, second)}
    # fedbuff over felix, paired by seed at the same value: 3/1, 6/2 -> 3; 1/0.5, 1/0.5 -> 2
    assert float(p["fedbuff", first]["ratio_geomean"]) == pytest.approx(3.0)
    assert float(p["fedbuff", second]["ratio_geomean"]) == pytest.approx(2.0)
    assert p["felix", second]["ratio_geomean"] in ("", None)  # the reference itself
    assert json.loads((out / "comparison.json").read_text()) == {"reference": "felix", "axis_keys": [key]}
    page = html.unescape((out / "report.html").read_text())
    table = page[page.index("<table id='pooled'>"):]
    assert f"<td class='l'>{second}</td><td class='l'>fedbuff</td>" in table and "x2.00" in table
    # the summary keeps every cell's own label
    with open(out / "summary.csv", newline="") as f:
        assert {r["strategy"] for r in csv.DictReader(f)} == {f"{s}@{key}={v}" for s in ("felix", "fedbuff")
                                                               for v in values}


def test_reference_picks_the_strategy_others_are_compared_with(tmp_path, capsys):
    out = tmp_path / "cmp"
    finished_sweep(out, "alpha", ["0.05", "1.0"])
    assert compare(out, "alpha", ["0.05", "1.0"], "--reference", "fedbuff") == 0
    p = pooled(out)
    assert float(p["felix", "avail50 alpha=0.05"]["ratio_geomean"]) == pytest.approx(1 / 3)
    assert float(p["felix", "avail50 alpha=1.0"]["ratio_geomean"]) == pytest.approx(1 / 2)
    assert json.loads((out / "comparison.json").read_text())["reference"] == "fedbuff"
    assert "reference fedbuff" in html.unescape((out / "report.html").read_text())
    assert main(["report", str(out)]) == 0  # written again: the same reference, from comparison.json
    assert "reference fedbuff" in html.unescape((out / "report.html").read_text())


def test_an_unknown_reference_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "cmp"
    with pytest.raises(SystemExit) as e:
        compare(out, "alpha", ["0.05", "1.0"], "--reference", "oort")
    assert str(e.value) == ("felix-jax compare: --reference oort: not a strategy of this comparison (its "
                            "strategies: felix, fedbuff)")
    assert not out.exists()


def test_which_sweeps_are_axes_and_how_labels_split():
    assert axis_keys(["alpha", "num_clients", "timeout_s", "concurrency", "selector.fraction", "learning_rate"]) == \
        ["alpha", "num_clients", "learning_rate"]
    assert split_label("fedbuff@alpha=1.0;timeout_s=30", ["alpha"]) == ("fedbuff@timeout_s=30", "alpha=1.0")
    assert split_label("felix@alpha=1.0;num_clients=6", ["alpha", "num_clients"]) == ("felix",
                                                                                       "alpha=1.0 num_clients=6")
    rows = [{"strategy": s, "availability": "avail50", "seed": 0, "run_dir": "x"}
            for s in ("felix@alpha=0.05", "felix@alpha=1.0", "oort@alpha=0.05", "oort@alpha=1.0")]
    view = comparison_view(rows, [r["strategy"] for r in rows], ["avail50"], ["alpha"])
    assert view.strategies == ["felix", "oort"] and view.reference == "felix"
    assert view.regimes == ["avail50 alpha=0.05", "avail50 alpha=1.0"]
    assert [r["cell_strategy"] for r in view.rows] == [r["strategy"] for r in rows]
    # a knob: the variants stay strategies, the first the reference where felix itself is not compared
    knob = comparison_view(rows, [r["strategy"] for r in rows], ["avail50"], [])
    assert knob.strategies == [r["strategy"] for r in rows] and knob.reference == "felix@alpha=0.05"
