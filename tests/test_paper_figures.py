"""The paper's diagnostic figures (experiment/figures/paper.py) from hand-built runs."""

import json

import numpy as np

from felix_jax.experiment.paper_figures import FIGURES, plot_paper_figures, relative_late_weights


def _run(tmp_path, name, staleness, weights, **summary):
    d = tmp_path / name
    d.mkdir()
    (d / "distributions.json").write_text(json.dumps({"staleness": staleness, "agg_weights": weights}))
    return {"run_dir": str(d), "_summary": summary}


def test_late_weights_are_the_mean_weight_per_staleness_over_the_fresh_mean(tmp_path):
    # fresh weights 1 and 3 (mean 2); staleness 1: 1 and 2 (mean 1.5 -> 0.75); 3: 1 (0.5); 2: none;
    # 25 and 30 pool at max_staleness=4: (0.5 + 1.5) / 2 = 1 -> 0.5; -1 (padding) is left out
    a = _run(tmp_path, "a", [0, 1, 3, 25], [1.0, 1.0, 1.0, 0.5])
    b = _run(tmp_path, "b", [0, 1, 30, -1], [3.0, 2.0, 1.5, 9.0])
    rel = relative_late_weights([a, b], max_staleness=4)
    np.testing.assert_allclose(rel, [1.0, 0.75, np.nan, 0.5, 0.5])
    assert relative_late_weights([_run(tmp_path, "c", [1, 2], [1.0, 1.0])]) is None  # no fresh update


def test_the_figures_are_drawn_from_the_runs_there_are(tmp_path):
    rows = []
    for st, hours in (("felix", 0.4), ("felix-no-eval", 0.35), ("felix-no-tierfuse", None), ("oort-async-oracle", 0.5)):
        for seed in (0, 1):
            r = _run(tmp_path, f"{st}-{seed}", [0, 1, 2], [1.0, 0.9, 0.8], time_to_target_h=hours,
                     picked_utility_mean=50.0 + seed, picked_duration_mean_s=7.0, evals_per_aggregation=2.0,
                     train_picks_eval_utility_share=0.1)
            rows.append({**r, "strategy": st, "availability": "ref:syn_50", "seed": seed})
    out = tmp_path / "figures"
    paths = plot_paper_figures(rows, ["felix", "felix-no-eval", "felix-no-tierfuse", "oort-async-oracle"],
                               ["ref:syn_50", "ref:syn_0"], out)
    assert sorted(p.name for p in paths) == sorted(FIGURES) and all(p.stat().st_size > 10_000 for p in paths)
    # without felix-no-eval there is no eval-tier figure, and the old one is removed
    paths = plot_paper_figures([r for r in rows if r["strategy"] != "felix-no-eval"], ["felix", "felix-no-tierfuse"],
                               ["ref:syn_50"], out)
    assert sorted(p.name for p in paths) == ["late_weights.png", "selection.png"]
    assert not (out / "eval_tier.png").exists()
    assert plot_paper_figures([], ["felix"], ["ref:syn_50"], out) == []


def test_a_run_without_values_leaves_its_bar_empty_not_wrong(tmp_path):
    """No target reached, no utility, no fresh update: the figures are still drawn."""
    r = _run(tmp_path, "a", [1, 2], [0.5, 0.5], time_to_target_h=None, picked_utility_mean=None)
    rows = [{**r, "strategy": "felix", "availability": "ref:syn_50", "seed": 0}]
    paths = plot_paper_figures(rows, ["felix"], ["ref:syn_50"], tmp_path / "f")
    assert {p.name for p in paths} == {"selection.png", "late_weights.png"}


def test_every_panel_has_axis_labels(tmp_path, monkeypatch):
    import matplotlib.figure

    drawn = {}
    savefig = matplotlib.figure.Figure.savefig

    def keep(fig, path, **kw):
        drawn[path.name] = [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]
        return savefig(fig, path, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    rows = []
    for st in ("felix", "felix-no-eval", "felix-no-tierfuse"):
        r = _run(tmp_path, st, [0, 1], [1.0, 0.5], time_to_target_h=0.4, picked_utility_mean=5.0,
                 picked_duration_mean_s=7.0, evals_per_aggregation=2.0, train_picks_eval_utility_share=0.1)
        rows.append({**r, "strategy": st, "availability": "ref:syn_50", "seed": 0})
    plot_paper_figures(rows, ["felix", "felix-no-eval", "felix-no-tierfuse"], ["ref:syn_50"], tmp_path / "f")
    assert sorted(drawn) == sorted(FIGURES)
    for name, axes in drawn.items():
        for title, xlabel, ylabel in axes:
            assert xlabel and ylabel, (name, title)
