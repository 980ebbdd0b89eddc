"""``compare``'s option sweeps (cells ``STRATEGY@KEY=VALUE``, ``--sweep KEY=v1,v2``), its figures
(time to target, units on every axis, file regimes by name, legends, headroom, relative weights) and
its progress lines, on results folders written by hand (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from felix_jax.experiment.figures import comparison as comparison_figures
from felix_jax.experiment.figures import curve as curve_figures
from felix_jax.experiment.compare import (cell_dir, cell_overrides, comparison_eta, comparison_table, parse_sweep,
                                          plot_comparison, regime_label, strategy_styles, sweep_strategies)

TRACE = "/data/a/very/long/folder/of/someone/my_phones_trace.csv"


# ------------------------------------------------------------------ sweeps
def test_a_sweep_crosses_every_strategy_with_each_value():
    assert parse_sweep("timeout_s=30, 90") == ("timeout_s", ["30", "90"])
    cells = sweep_strategies(["felix", "oort-async-oracle@oracle_departure=free_slot"],
                             [parse_sweep("timeout_s=30,90")])
    assert cells == ["felix@timeout_s=30", "felix@timeout_s=90",
                     "oort-async-oracle@oracle_departure=free_slot;timeout_s=30",
                     "oort-async-oracle@oracle_departure=free_slot;timeout_s=90"]
    assert cell_overrides(cells[2]) == {"oracle_departure": "free_slot", "timeout_s": "30",
                                        "strategy": "oort-async-oracle"}
    two = sweep_strategies(["felix"], [("timeout_s", ["30", "90"]), ("concurrency", ["5", "10"])])
    assert two == ["felix@timeout_s=30;concurrency=5", "felix@timeout_s=30;concurrency=10",
                   "felix@timeout_s=90;concurrency=5", "felix@timeout_s=90;concurrency=10"]
    assert cell_dir(Path("o"), cells[0], "avail50", 1).name == "felix+timeout_s-30-avail50-seed1"
    # a value that is a path stays one folder
    assert cell_dir(Path("o"), "felix@device_profile=a/b.csv", "avail50", 0).parent == Path("o/runs")


@pytest.mark.parametrize("spec,message", [
    ("timeout_s", "expected KEY=v1,v2"),
    ("=30,90", "expected KEY=v1,v2"),
    ("seed=1,2", "seed is an axis of the comparison already; give it with --seeds"),
    ("strategy=felix,fedbuff", "give it with --strategies"),
    ("availability=avail50", "give it with --availability"),
    ("timeout_s=", "no values"),
    ("timeout_s= , ", "no values"),
    ("timeout_s=30,,90", "an empty value"),
    ("timeout_s=30,30", "lists 30 more than once"),
    ("timeout_s=30;concurrency=2", "';' and '@' separate"),
])
def test_a_bad_sweep_is_refused_in_one_line(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_sweep(spec)
    assert "\n" not in str(info.value)


def test_a_sweep_refuses_a_key_swept_twice_or_set_by_a_variant_and_a_cell_refuses_an_axis():
    with pytest.raises(ValueError, match="swept twice"):
        sweep_strategies(["felix"], [("timeout_s", ["1"]), ("timeout_s", ["2"])])
    with pytest.raises(ValueError, match="sets timeout_s itself"):
        sweep_strategies(["felix@timeout_s=5"], [("timeout_s", ["1", "2"])])
    with pytest.raises(ValueError, match="seed is an axis of the comparison; give it with --seeds"):
        cell_overrides("felix@seed=3")


def test_the_comparison_eta_is_the_mean_finished_cell_times_the_cells_left():
    assert comparison_eta([], 5) == ""  # nothing finished: no basis
    line = comparison_eta([10.0, 20.0], 4)
    assert "comparison ETA 1:00" in line and "4 cells left" in line and "0:15 per finished cell" in line
    assert comparison_eta([10.0], 0) == ""


def test_the_comparison_eta_bounds_cells_that_may_run_to_their_cap():
    """Two cells the target ended at a tenth and a fifth of their budget (10 s and 20 s): a cell that
    stalls runs to its cap, 30 s / 0.3 = 100 s a whole budget, so 4 such cells take at most 400 s."""
    line = comparison_eta([10.0, 20.0], 4, shares=[0.1, 0.2])
    assert "comparison ETA 1:00" in line and "<= 6:40 if each runs to its cap" in line
    assert "<=" not in comparison_eta([10.0, 20.0], 4, shares=[1.0, 1.0])  # they ran to their caps: no bound
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.progress import budget_share

    sc = get_preset("tiny")  # 60 aggregations or 6 virtual hours
    assert budget_share(sc, {"aggregations": 6, "end_time_s": 3600.0}) == pytest.approx(1 / 6)
    assert budget_share(sc, {"aggregations": 60, "end_time_s": 60.0}) == 1.0
    assert budget_share(sc.with_overrides({"max_virtual_hours": "inf"}), {"aggregations": 30,
                                                                          "end_time_s": 9e9}) == 0.5


# ------------------------------------------------------------------ figures and the table
def _cell(out: Path, st: str, rg: str, seed: int, hours: float | None, end_h: float, weights: list[float],
          target: float = 0.5) -> dict:
    run_dir = cell_dir(out, st, rg, seed)
    run_dir.mkdir(parents=True)
    grid = np.linspace(0, end_h, 6)
    acc = np.linspace(0.1, 0.7 if hours is not None else 0.4, 6)
    (run_dir / "metrics.csv").write_text("time_s,hours,version,accuracy\n" + "".join(
        f"{h * 3600},{h},{i},{a}\n" for i, (h, a) in enumerate(zip(grid, acc))))
    (run_dir / "config.json").write_text(json.dumps({"scenario": {"target_accuracy": target}}))
    (run_dir / "distributions.json").write_text(json.dumps(
        {"staleness": [0, 1, 2], "utility_age": [-1, 0, 3], "agg_weights": weights}))
    (run_dir / "summary.json").write_text(json.dumps({"end_time_s": end_h * 3600}))
    return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": hours, "bytes_train": 0.9e9,
            "bytes_eval": 0.1e9 if st == "felix" else 0, "bytes_total": 1e9, "control_bytes": 0, "aggregations": 5,
            "final_accuracy": 0.5, "run_dir": str(run_dir)}


STRATEGIES = ["felix", "oort-async", "fedbuff", "oort-async-oracle", "fedavg"]


@pytest.fixture
def comparison(tmp_path):
    rows = []
    for rg in ("avail50", TRACE):
        for st in STRATEGIES:
            for seed in (0, 1, 2):
                reached = not (st == "fedbuff" and seed == 1)
                weights = [150.0, 200.0, 250.0] if st == "fedavg" else [0.5, 1.0, 1.5]
                rows.append(_cell(tmp_path, st, rg, seed, 0.1 * (seed + 1) if reached else None, 0.8, weights))
    return tmp_path, rows


@pytest.fixture
def drawn(monkeypatch):
    """The figures plot_comparison saves, kept open by name."""
    figures = {}

    def keep(fig, path):
        figures[Path(path).name] = fig
        fig.savefig(path, dpi=40, bbox_inches="tight")
        return Path(path)

    monkeypatch.setattr(comparison_figures, "save", keep)  # where plot_comparison looks it up
    monkeypatch.setattr(curve_figures, "save", keep)  # and plot_speedup_vs_target
    yield figures
    import matplotlib.pyplot as plt

    plt.close("all")


def test_a_file_regime_is_named_by_its_file_in_the_table():
    assert regime_label(TRACE) == "my_phones_trace.csv" and regime_label("avail50") == "avail50"
    rows = [{"strategy": "felix", "availability": TRACE, "seed": 0, "time_to_target_h": 1.0, "bytes_train": 1e9,
             "bytes_eval": 0, "bytes_total": 1e9, "aggregations": 3, "final_accuracy": 0.5, "run_dir": "."}]
    table = comparison_table(rows, ["felix"], [TRACE], target=0.5)
    assert TRACE not in table and "my_phones_trace.csv" in table
    header, line = table.splitlines()[1:3]
    assert header.index("strategy") == line.index("felix")  # the columns line up


def test_the_papers_traces_are_named_as_the_paper_names_them_with_the_trace_beside():
    names = {"ref:syn_0": "100% (ref:syn_0)", "ref:syn_20": "90% (ref:syn_20)", "ref:syn_50": "50% (ref:syn_50)",
             "ref:mobiperf_2st": "MobiPerf (ref:mobiperf_2st)", "ref:mobiperf_3st_50": "MobiPerf (ref:mobiperf_3st_50)",
             "ref:mobiperf_3st_75": "MobiPerf (ref:mobiperf_3st_75)", "mobiperf": "MobiPerf (mobiperf)"}
    assert {rg: regime_label(rg) for rg in names} == names
    rows = [{"strategy": "felix", "availability": "ref:syn_20", "seed": 0, "time_to_target_h": 1.0, "bytes_train": 1e9,
             "bytes_eval": 0, "bytes_total": 1e9, "aggregations": 3, "final_accuracy": 0.5, "run_dir": "."}]
    assert "90% (ref:syn_20)" in comparison_table(rows, ["felix"], ["ref:syn_20"], target=0.5)


def test_the_papers_ratios_are_in_the_legend_and_their_labels_never_overlap(tmp_path, drawn):
    """Three of the paper's ratios within x1.27-x1.38 on 100% and two within x1.50-x1.52 on 50%: each panel
    is titled by the paper's name and the trace, each ratio's label sits beside its panel clear of the
    others', and the legend gives every ratio by the paper's regime names."""
    sts = ["felix", "oort-oracle", "oort-async-oracle", "oort-async"]
    curve = [{"availability": rg, "strategy": st, "target": round(0.3 + 0.01 * i, 2), "n": 3, "seeds": 3,
              "ratio_geomean": 1.2 + 0.1 * k, "ratio_ci95_low": None, "ratio_ci95_high": None}
             for rg in ("ref:syn_0", "ref:syn_50") for k, st in enumerate(sts[1:]) for i in range(10)]
    paper = {("oort-oracle", "ref:syn_0"): 9.1 / 6.6, ("oort-async-oracle", "ref:syn_0"): 8.9 / 6.6,
             ("oort-async", "ref:syn_0"): 8.4 / 6.6,
             ("oort-oracle", "ref:syn_50"): 9.3 / 6.2, ("oort-async-oracle", "ref:syn_50"): 9.4 / 6.2}
    curve_figures.plot_speedup_vs_target(curve, sts, ["ref:syn_0", "ref:syn_50"], tmp_path, "felix", paper=paper)
    fig = drawn["speedup_vs_target.png"]
    assert [ax.get_title() for ax in fig.axes] == ["100% (ref:syn_0)", "50% (ref:syn_50)"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax, expected in zip(fig.axes, (["x1.38", "x1.35", "x1.27"], ["x1.50", "x1.52"])):
        labels = [t for t in ax.texts if "x1." in t.get_text()]
        assert [t.get_text().split("x")[-1] for t in labels] == [e[1:] for e in expected]
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not any(_overlaps(boxes[i], boxes[j]) for i in range(len(boxes)) for j in range(i + 1, len(boxes)))
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "oort-oracle, the paper's ratio: x1.38 on 100%, x1.50 on 50%" in texts
    assert "oort-async, the paper's ratio: x1.27 on 100%" in texts


def test_every_figure_has_units_on_every_axis_and_file_regimes_by_name(comparison, drawn):
    out, rows = comparison
    paths = plot_comparison(rows, STRATEGIES, ["avail50", TRACE], out)
    assert sorted(p.name for p in paths) == ["accuracy.png", "bytes.png", "cdfs.png", "speedup_vs_target.png",
                                             "time_to_target.png"]
    for name, fig in drawn.items():
        for ax in fig.axes:
            assert ax.get_xlabel(), (name, ax.get_title())
            assert TRACE not in ax.get_title()
        # a y label on every panel, but once on a row of panels sharing their strategies (bytes, time to target)
        shared_rows = name in ("bytes.png", "time_to_target.png", "speedup_vs_target.png")
        for ax in fig.axes[:1] if shared_rows else fig.axes:
            assert ax.get_ylabel(), (name, ax.get_title())
    cdf_labels = [ax.get_xlabel() for ax in drawn["cdfs.png"].axes]
    assert cdf_labels[:3] == ["staleness (rounds)", "utility age (rounds)",
                              "aggregation weight (relative: / the strategy's mean weight)"]
    ttt = [ax.get_xlabel() for ax in drawn["time_to_target.png"].axes]
    assert ttt[:2] == ["virtual hours to target"] * 2  # the hours, then the paired verdicts below them
    assert ttt[2:] == ["hours / felix's hours, paired by seed"] * 2
    assert [ax.get_xlabel() for ax in drawn["bytes.png"].axes] == ["GB moved (mean over seeds)"] * 2
    assert drawn["accuracy.png"].axes[1].get_title() == "my_phones_trace.csv"
    assert [ax.get_xlabel() for ax in drawn["speedup_vs_target.png"].axes] == ["target accuracy (the paper's rule)"] * 2
    assert drawn["speedup_vs_target.png"].axes[0].get_ylabel() == "hours / felix's, paired by seed"


def test_weights_are_relative_to_each_strategys_mean(comparison, drawn):
    out, rows = comparison
    plot_comparison(rows, STRATEGIES, ["avail50"], out)
    weights_ax = drawn["cdfs.png"].axes[2]
    for line in weights_ax.get_lines():
        x = np.asarray(line.get_xdata(), float)
        assert x.max() < 2, line.get_label()  # FedAvg's n_i ~200 no longer squashes the rest against 0
    fedavg = next(ln for ln in weights_ax.get_lines() if ln.get_label() == "fedavg")
    np.testing.assert_allclose(np.unique(fedavg.get_xdata()), [0.75, 1.0, 1.25])


def test_the_legend_fits_and_the_reference_is_drawn_on_top_in_its_own_style(comparison, drawn):
    out, rows = comparison
    plot_comparison(rows, STRATEGIES, ["avail50"], out)
    styles = strategy_styles(STRATEGIES, "felix")
    assert len({(str(s["color"]), str(s["ls"])) for s in styles.values()}) == len(STRATEGIES)
    assert len({str(s["ls"]) for s in styles.values()}) == len(STRATEGIES)  # apart even without color
    fig = drawn["accuracy.png"]
    curves = [ln for ln in fig.axes[0].get_lines() if ln.get_label() in STRATEGIES]
    assert curves[-1].get_label() == "felix"  # drawn last
    assert curves[-1].get_zorder() > max(c.get_zorder() for c in curves[:-1])
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == STRATEGIES + ["target 0.5"]
    renderer = fig.canvas.get_renderer()
    tight = fig.get_tightbbox(renderer)  # what bbox_inches="tight" saves
    box = legend.get_window_extent(renderer).transformed(fig.dpi_scale_trans.inverted())
    assert tight.x0 <= box.x0 and box.x1 <= tight.x1 and tight.y0 <= box.y0
    assert legend._ncols < len(STRATEGIES) + 1  # more than one row on one narrow panel


def test_bar_labels_fit_without_an_axis_far_past_the_longest_bar(comparison, drawn):
    out, rows = comparison
    plot_comparison(rows, STRATEGIES, ["avail50", TRACE], out)
    fig = drawn["bytes.png"]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:  # horizontal bars: a long strategy label reads along its row
        longest = max(p.get_x() + p.get_width() for p in ax.patches)
        assert longest < ax.get_xlim()[1] <= 1.25 * longest  # not 1.7x: 1.41 GB no longer runs to 2.4
        box = ax.get_window_extent(renderer)
        for label in ax.texts:  # every label inside the panel: beside its bar, or inside it
            extent = label.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1 + 0.5, label.get_text()
    inside = [t for t in fig.axes[0].texts if t.get_horizontalalignment() == "right"]
    assert inside and all(t.get_color() == "white" for t in inside)  # the longest bars hold their labels


def test_time_to_target_marks_each_seed_and_the_unreached_at_the_runs_end(comparison, drawn):
    out, rows = comparison
    plot_comparison(rows, STRATEGIES, ["avail50"], out)
    ax = drawn["time_to_target.png"].axes[0]
    points = [ln for ln in ax.get_lines() if ln.get_marker() in ("o", "^")]
    filled = [ln for ln in points if ln.get_marker() == "o"]
    open_ = [ln for ln in points if ln.get_marker() == "^"]
    assert len(filled) == 14 and len(open_) == 1  # fedbuff seed 1 did not reach it
    assert open_[0].get_markerfacecolor() == "none" and open_[0].get_xdata()[0] == pytest.approx(0.8)
    assert len({float(ln.get_ydata()[0]) for ln in filled}) == 14  # seeds spread across their row
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("reached\n/ run") == 1  # the right column's header, above it (the y label stays short)
    texts.remove("reached\n/ run")
    assert [t for t in texts if not t.startswith("to ")] == ["3/3", "3/3", "2/3", "3/3", "3/3"]  # reached / run
    # an interval of few seeds (here to 186 h) does not stretch the axis: it is cut at 1.6 x the furthest
    # point (fedbuff seed 1's run end, 0.8 h) and its end written there
    assert [t for t in texts if t.startswith("to ")] == ["to 186 h"]
    assert ax.get_xlim() == pytest.approx((0.0, 1.6 * 0.8))
    # below: the paired verdict of every other strategy against felix, on a log axis with 1 marked
    paired = drawn["time_to_target.png"].axes[1]
    assert paired.get_xscale() == "log" and [t.get_text() for t in paired.get_yticklabels()] == STRATEGIES[1:]
    diamonds = [ln for ln in paired.get_lines() if ln.get_marker() == "D"]
    # every strategy's hours here are felix's, seed by seed (0.1, 0.2, 0.3): a geometric mean of exactly 1
    assert len(diamonds) == 4 and all(float(ln.get_xdata()[0]) == pytest.approx(1.0) for ln in diamonds)
    assert [t.get_text() for t in paired.texts] == ["n=3", "n=2", "n=3", "n=3", "n: both\nreached"]  # fedbuff missed 1
    # no target: no time-to-target figure, and an older one is removed
    for r in rows:
        (Path(r["run_dir"]) / "config.json").write_text(json.dumps({"scenario": {"target_accuracy": None}}))
    names = [p.name for p in plot_comparison(rows, STRATEGIES, ["avail50"], out)]
    assert "time_to_target.png" not in names and not (out / "time_to_target.png").exists()


# ------------------------------------------------------------------ plot-trace
def _trace_csv(path: Path) -> Path:
    path.write_text("# duration_s=600\n# beyond_end=repeat\nclient,time_s,state\n"
                    "0,0,AVL_TRAIN\n0,200,AVL_EVAL\n0,400,UN_AVL\n1,0,UN_AVL\n1,300,AVL_TRAIN\n")
    return path


def test_plot_trace_draws_tier_shares_and_a_client_raster(tmp_path, monkeypatch):
    from felix_jax.experiment.trace_figure import default_out, plot_trace, trace_for_plot

    (tmp_path / "deep").mkdir()
    trace_file = _trace_csv(tmp_path / "deep" / "phones.csv")
    assert default_out(str(trace_file)) == Path("phones-trace.png")
    assert default_out("ref:syn_50") == Path("ref_syn_50-trace.png")
    assert default_out("avail50") == Path("avail50-trace.png")
    trace, hours = trace_for_plot(str(trace_file))
    assert trace.num_clients == 2 and hours == pytest.approx(600 / 3600)  # its own clients and duration
    trace, hours = trace_for_plot("avail50", clients=7, hours=2.0)
    assert trace.num_clients == 7 and hours == 2.0
    monkeypatch.chdir(tmp_path)
    figures = {}
    import matplotlib.figure

    savefig = matplotlib.figure.Figure.savefig

    def keep(fig, path, **kw):
        figures[Path(path).name] = fig
        return savefig(fig, path, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert plot_trace(str(trace_file)) == Path("phones-trace.png") and (tmp_path / "phones-trace.png").is_file()
    top, raster = figures["phones-trace.png"].axes
    assert top.get_xlabel() == raster.get_xlabel() == "hours"
    assert top.get_ylabel() == "share of clients (fraction)" and raster.get_ylabel() == "client id"
    assert "phones.csv: 2 clients" in top.get_title() and str(tmp_path) not in top.get_title()
    image = raster.get_images()[0].get_array()
    assert image.shape == (2, 600) and set(np.unique(image)) == {0, 1, 2}
    with pytest.raises(KeyError, match="unknown availability regime"):
        plot_trace("avail42")


# ------------------------------------------------------------------ a sweep's variants
SWEEP = ["felix@timeout_s=30", "felix@timeout_s=90", "oort-async-oracle@oracle_departure=free_slot;timeout_s=30",
         "oort-async-oracle@oracle_departure=free_slot;timeout_s=90"]


@pytest.fixture
def sweep(tmp_path):
    rows = []
    for st in SWEEP:
        for seed in (0, 1, 2):  # each strategy's two variants ran the same: their curves coincide
            rows.append(_cell(tmp_path, st, "avail50", seed, 0.1 * (seed + 1), 0.8, [0.5, 1.0, 1.5]))
    return tmp_path, rows


def test_a_sweeps_variants_stay_visible_where_their_curves_coincide(sweep, drawn):
    import warnings

    out, rows = sweep
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Tight layout not applied" for a sweep's long labels
        plot_comparison(rows, SWEEP, ["avail50"], out, reference="felix@timeout_s=30")
    styles = strategy_styles(SWEEP, "felix@timeout_s=30")
    assert styles[SWEEP[0]]["color"] == styles[SWEEP[1]]["color"]  # one strategy, one color
    assert len({s["marker"] for s in styles.values()}) >= 2 and styles[SWEEP[0]]["marker"] != styles[SWEEP[1]][
        "marker"]
    assert styles[SWEEP[0]]["markevery"] != styles[SWEEP[1]]["markevery"]  # offset along the curve
    # the second variant is drawn above the first, even where the first is the reference
    assert styles[SWEEP[1]]["zorder"] > styles[SWEEP[0]]["zorder"] > styles[SWEEP[2]]["zorder"]
    lines = {ln.get_label(): ln for ln in drawn["accuracy.png"].axes[0].get_lines()}
    assert lines[SWEEP[1]].get_zorder() > lines[SWEEP[0]].get_zorder()
    assert lines[SWEEP[1]].get_marker() not in ("None", None, "")
    # plain strategies keep plain lines
    assert "marker" not in strategy_styles(STRATEGIES, "felix")["felix"]


def test_a_swapped_component_is_a_strategy_of_its_own_color_and_its_options_are_variants():
    rules = ["felix", "felix-no-tierfuse", "felix@aggregator.name=median",
             "felix@aggregator.name=multi-krum;aggregator.f=3", "felix@aggregator.name=multi-krum;aggregator.f=1",
             "felix@timeout_s=30"]
    styles = strategy_styles(rules, "felix")
    colors = [str(styles[st]["color"]) for st in rules]
    # felix, felix-no-tierfuse, median and Multi-Krum: four colors; Multi-Krum's f is a variant of it, and a
    # timeout a variant of felix
    assert len(set(colors[:4])) == 4
    assert colors[3] == colors[4] and colors[5] == colors[0]
    assert styles[rules[3]]["ls"] != styles[rules[4]]["ls"]


def test_a_panel_without_values_names_a_sweeps_strategies_one_a_line(sweep, drawn):
    out, rows = sweep
    for r in rows:  # no utility ages anywhere: the panel says so
        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
        (Path(r["run_dir"]) / "distributions.json").write_text(json.dumps({**d, "utility_age": []}))
    plot_comparison(rows, SWEEP, ["avail50"], out)
    (note,) = drawn["cdfs.png"].axes[1].texts
    assert note.get_text().splitlines() == ["no values:", *SWEEP] and not note.get_in_layout()


def test_time_to_targets_mean_has_a_lane_and_a_glyph_of_its_own(comparison, drawn):
    out, rows = comparison
    everyone = [r for r in rows if r["strategy"] != "fedbuff"]
    names = [st for st in STRATEGIES if st != "fedbuff"]
    plot_comparison(everyone, names, ["avail50"], out)
    fig = drawn["time_to_target.png"]
    ax = fig.axes[0]
    seeds = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    means = [ln for ln in ax.get_lines() if ln.get_marker() == "|" and ln.get_markersize() > 8]  # not the caps
    assert len(means) == len(names)  # a bar, not a square that reads as one more seed
    for mean in means:
        row = round(float(mean.get_ydata()[0]))
        mine = [float(s.get_ydata()[0]) for s in seeds if round(float(s.get_ydata()[0])) == row]
        assert len(mine) == 3 and min(float(mean.get_ydata()[0]) - y for y in mine) >= 0.2
    # every seed reached it: the legend has no "did not reach" marker
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("did not" in t for t in texts) and any(t.startswith("geometric mean over") for t in texts)
    # a seed that missed brings it back; one seed alone gets no separate mean
    plot_comparison([r for r in rows if r["seed"] == 1], STRATEGIES, ["avail50"], out)
    fig = drawn["time_to_target.png"]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("did not" in t for t in texts) and not any(t.startswith("geometric mean over") for t in texts)
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "|" and ln.get_markersize() > 8]


# ------------------------------------------------------------------ figures a reviewer can read
def _stall(row: dict, active_h: float, end_h: float, stop_reason: str = "stalled: no pending events") -> dict:
    """Rewrites a cell as a run that learnt to ``active_h`` and then stalled, flat, to ``end_h``."""
    run_dir = Path(row["run_dir"])
    grid = np.linspace(0, active_h, 6)
    (run_dir / "metrics.csv").write_text("time_s,hours,version,accuracy\n" + "".join(
        f"{h * 3600},{h},{i},{a}\n" for i, (h, a) in enumerate(zip(grid, np.linspace(0.1, 0.6, 6)))))
    summary = {"end_time_s": end_h * 3600, "stop_reason": stop_reason}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    row["_summary"] = summary  # as run_matrix's rows carry it
    return row


def test_each_regime_is_drawn_on_its_own_hours(tmp_path, drawn):
    """A regime whose runs end in 0.2 h is not drawn on another's 2 h (the panels once shared the axis:
    the quick one was a sliver at the left)."""
    rows = [_cell(tmp_path, st, rg, seed, end / 2, end, [1.0]) for rg, end in (("avail50", 2.0), (TRACE, 0.2))
            for st in ("felix", "fedbuff") for seed in (0, 1)]
    plot_comparison(rows, ["felix", "fedbuff"], ["avail50", TRACE], tmp_path)
    slow, quick = drawn["accuracy.png"].axes[:2]
    assert slow.get_xlim()[1] == pytest.approx(2.0 * 1.02) and quick.get_xlim()[1] == pytest.approx(0.2 * 1.02)


def test_a_stalled_strategy_does_not_set_the_accuracy_hours_and_runs_on_to_the_edge(comparison, drawn):
    """oort-async learns to 0.4 h and stalls, flat, to 3 h; the others end at 0.8 h: the hours end at the
    others' end (with 4% room), not at 3 h, and oort-async's line runs to the edge with an arrow and a note."""
    out, rows = comparison
    for r in rows:
        if r["strategy"] == "oort-async":
            _stall(r, 0.4, 3.0)
            if r["seed"] == 2:
                r["time_to_target_h"] = None  # it stalled before the target
    plot_comparison(rows, STRATEGIES, ["avail50", TRACE], out)
    # time_to_target.png: its missed seed does not stretch the hours to 3 h either: at the edge, its end written
    ttt = drawn["time_to_target.png"].axes[0]
    assert ttt.get_xlim()[1] < 1.6 and "stalled, ends 3 h" in [t.get_text() for t in ttt.texts]
    fig = drawn["accuracy.png"]
    ax = fig.axes[0]
    assert ax.get_xlim()[1] == pytest.approx(0.8 * 1.04)  # not 3 h: the runs that did not stall end at 0.8 h
    color = strategy_styles(STRATEGIES, "felix")["oort-async"]["color"]
    (arrow,) = [ln for ln in ax.get_lines() if ln.get_marker() == ">"]
    assert arrow.get_color() == color and float(arrow.get_xdata()[0]) == pytest.approx(ax.get_xlim()[1])
    curve = next(ln for ln in ax.get_lines() if ln.get_label() == "oort-async")
    assert np.isfinite(np.asarray(curve.get_ydata(), float)[-1])  # the flat line reaches the edge
    assert [t.get_text() for t in ax.texts] == ["oort-async: stalled at 0.4 h, runs to 3 h"]
    assert "stalled: flat past the axis" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert ax.get_title() == "avail50 (hours to 0.832 of 3)" and "framed on its runs" in fig._suptitle.get_text()
    # no seed reached the target: the whole range, nothing framed
    for r in rows:
        r["time_to_target_h"] = None
    plot_comparison(rows, STRATEGIES, ["avail50"], out)
    ax = drawn["accuracy.png"].axes[0]
    assert ax.get_xlim()[1] >= 3.0 and not [ln for ln in ax.get_lines() if ln.get_marker() == ">"]


def test_a_run_stalls_at_its_first_long_gap_without_a_checkpoint(tmp_path):
    """A run that aggregated every ~18 s to 0.08 h, once more at 2.5 h and ran to 3 h (its clients gone)
    stalled at 0.08 h even though its stop reason is its horizon; evenly spaced checkpoints never stall."""
    from felix_jax.experiment.figures.comparison import run_span

    hours = list(np.linspace(0, 0.08, 17)) + [2.5]
    (tmp_path / "metrics.csv").write_text("time_s,hours,accuracy\n" + "".join(f"{h * 3600},{h},0.5\n" for h in hours))
    (tmp_path / "summary.json").write_text(json.dumps({"end_time_s": 3 * 3600, "stop_reason": "max_virtual_s"}))
    row = {"run_dir": str(tmp_path)}
    assert run_span(row) == {"end": 3.0, "active": pytest.approx(0.08), "stalled": True}
    (tmp_path / "metrics.csv").write_text("time_s,hours,accuracy\n0,0,0.1\n3600,1,0.2\n7200,2,0.3\n")
    assert run_span(row) == {"end": 3.0, "active": 3.0, "stalled": False}
    (tmp_path / "summary.json").write_text(json.dumps({"end_time_s": 3 * 3600, "stop_reason": "stalled: x"}))
    assert run_span(row) == {"end": 3.0, "active": 2.0, "stalled": True}  # its stop reason says so


def test_a_long_staleness_tail_is_cut_at_the_stated_percentile_and_named(comparison, drawn):
    """fedbuff's updates: staleness 0-5, two of them 300 and 692 rounds late: the axis ends at the 99th
    percentile of every strategy's values (5), not at 692, and the panel names what lies beyond it."""
    out, rows = comparison
    for r in rows:
        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
        d["staleness"] = [i % 6 for i in range(100)] + ([300, 692] if r["strategy"] == "fedbuff" and r["seed"] == 0
                                                       else [])
        (Path(r["run_dir"]) / "distributions.json").write_text(json.dumps(d))
    plot_comparison(rows, STRATEGIES, ["avail50"], out)
    stale, age, _ = drawn["cdfs.png"].axes[:3]
    assert stale.get_xlim()[1] <= 5 * 1.05  # every strategy's bulk is readable: no 692-round axis
    (note,) = stale.texts
    assert note.get_text().splitlines() == ["axis cut at the 99th percentile of all (5 rounds); beyond it:",
                                            "fedbuff: 0.66% of its values, max 692 rounds"]
    assert not age.texts and age.get_xlim()[1] < 3.5  # no long tail (0 and 3): the axis is not cut


def test_bytes_legend_colors_differ_and_an_empty_panel_says_so(comparison, drawn):
    out, rows = comparison
    avail50 = [r for r in rows if r["availability"] == "avail50"]
    plot_comparison(avail50, STRATEGIES, [TRACE, "avail50"], out)  # the first panel has no finished runs
    fig = drawn["bytes.png"]
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["train", "eval"]
    train, ev = (tuple(p.get_facecolor()) for p in legend.get_patches())
    assert train != ev  # not matplotlib's default blue twice
    assert [t.get_text() for t in fig.axes[0].texts] == ["no finished runs"]
    for r in avail50:  # nothing moved: each panel says so, and no legend explains bars that are not there
        r["bytes_train"] = r["bytes_eval"] = r["bytes_total"] = 0
    plot_comparison(avail50, STRATEGIES, ["avail50"], out)
    fig = drawn["bytes.png"]
    assert not fig.legends and [t.get_text() for t in fig.axes[0].texts] == ["no bytes moved"]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("names", [
    ["felix", "fedbuff"],  # one baseline: the two y axes' names ran into each other
    ["felix", "fedbuff", "oort-async"],  # the quick start's
    ["felix", "fedbuff", "oort-async-oracle@oracle_departure=free_slot;timeout_s=30", "fedavg",
     "oort-async-oracle@oracle_departure=free_slot;timeout_s=90", "felix-no-eval"],  # a sweep's long labels
])
def test_time_to_target_labels_do_not_overlap_and_the_ratio_axis_has_ticks_across_its_data(tmp_path, drawn, names):
    """One regime, ratios x1.06-x1.3 (as in the quick start): no two labels of the figure (strategies, the
    y axes' names) overlap, and the ratio axis has more ticks than a lone x1."""
    rows = [_cell(tmp_path, st, "avail50", seed, 0.2 * (1 + 0.1 * seed) * (1 + 0.06 * i), 0.8, [0.5, 1.0, 1.5])
            for i, st in enumerate(names) for seed in (0, 1, 2)]
    plot_comparison(rows, names, ["avail50"], tmp_path)
    fig = drawn["time_to_target.png"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for ax in fig.axes for t in ax.get_yticklabels() + [ax.yaxis.label] if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not _overlaps(boxes[i], boxes[j]), (labels[i].get_text(), labels[j].get_text())
    paired = fig.axes[1]
    low, high = paired.get_xlim()
    ticks = [t for t in paired.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
    assert len(ticks) >= 3 and "x1" in [t.get_text() for t in ticks]


def test_speedup_outliers_do_not_set_the_axis_and_are_explained(tmp_path, drawn):
    """fedbuff x1.3 at every level but 0.31, which one seed pair reached at x35: the axis fits x1.3, the
    x35 is a triangle at its top edge with its ratio, level and seeds written beside it."""
    curve = [{"availability": "avail50", "strategy": "fedbuff", "target": round(0.1 + 0.01 * i, 2),
              "n": 2 if i < 21 else 1, "seeds": 2, "ratio_geomean": 1.3 if i < 21 else 35.0,
              "ratio_ci95_low": 1.1 if i < 21 else None, "ratio_ci95_high": 1.5 if i < 21 else None}
             for i in range(22)]
    curve_figures.plot_speedup_vs_target(curve, ["felix", "fedbuff"], ["avail50"], tmp_path, "felix")
    fig = drawn["speedup_vs_target.png"]
    ax = fig.axes[0]
    assert ax.get_ylim()[1] < 5  # x35 does not squash x1.3 against x1
    (edge,) = [ln for ln in ax.get_lines() if ln.get_marker() == "^"]
    assert float(edge.get_xdata()[0]) == pytest.approx(0.31) and float(edge.get_ydata()[0]) <= ax.get_ylim()[1]
    assert [t.get_text() for t in ax.texts] == ["fedbuff: x35 at 0.31 (n=1 of 2 seeds)"]
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "fedbuff")
    assert np.isnan(np.asarray(line.get_ydata(), float)[-1])  # the line breaks at the outlier
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["fedbuff", "every seed of both reached the level",
                     "an outlier off the axis: its ratio, level and seeds beside it"]
    ticks = [t for t in ax.get_yticklabels() if t.get_text()]
    assert len(ticks) >= 3


def test_a_runs_accuracy_names_its_target_and_the_partition_its_classes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from felix_jax.experiment.figures import run as run_figures
    from felix_jax.experiment.figures import split as split_figures

    figures = {}

    def keep(fig, path, **kw):
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(run_figures, "save", keep)
    monkeypatch.setattr(split_figures, "save", keep)
    checkpoints = [SimpleNamespace(time_s=t, accuracy=0.1 + t / 9000) for t in range(0, 3600, 600)]
    run_figures.accuracy_figure(checkpoints, tmp_path / "accuracy.png", "felix", target=0.5)
    legend = figures["accuracy.png"].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["test accuracy", "target 0.5"]
    rng = np.random.default_rng(0)
    for k, expected in ((3, ["0", "1", "2"]), (25, ["0, 20", "1, 21", "2, 22", "3, 23", "4, 24"] +
                                                    [str(c) for c in range(5, 20)])):
        label_counts = rng.integers(0, 5, size=(6, k))
        counts = label_counts.sum(axis=1)
        summary = {"min": int(counts.min()), "median": float(np.median(counts)), "max": int(counts.max()),
                   "mean_top_class_share": 0.5}
        split_figures.split_figure(counts, label_counts, summary, tmp_path / "partition.png")
        fig = figures["partition.png"]
        (legend,) = fig.legends
        assert legend.get_title().get_text() == "class" and [t.get_text() for t in legend.get_texts()] == expected
        fig.canvas.draw()  # the legend inside the figure: saved without cropping, it must not be cut
        box = legend.get_window_extent(fig.canvas.get_renderer())
        assert box.x1 <= fig.bbox.x1 and box.x0 >= fig.axes[1].get_window_extent().x1


def test_ratio_ticks_over_many_decades_stay_few_and_readable():
    """A two-seed interval from x0.003 to x900 once got a tick at every 1-2-5 step: labels ran into
    each other. Powers of ten then, at most seven, x1 among them."""
    from felix_jax.experiment.figures.style import ratio_label, ratio_ticks

    ticks = ratio_ticks(0.00267, 1134.0)
    assert [ratio_label(t) for t in ticks] == ["x0.01", "x0.1", "x1", "x10", "x100", "x1000"]
    wide = ratio_ticks(1e-9, 1e9)
    assert len(wide) <= 7 and 1.0 in wide
    assert ratio_ticks(0.1, 12) == [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]  # a decade or two: the 1-2-5 steps
