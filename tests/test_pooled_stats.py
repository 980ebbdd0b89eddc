"""The statistics of a comparison pooled over seeds (stats.py and tables.py, paper_matrix.py's table),
against values computed by hand."""

import csv
import importlib.util
import math
from pathlib import Path

import pytest

from felix_jax.experiment.compare import (FEW_SEEDS_WARNING, POOLED_COLUMNS, comparison_table, hours_stats,
                                          paired_ratio, pool_cells, t_quantile_975, versus_reference,
                                          write_pooled_csv)

ROOT = Path(__file__).resolve().parents[1]


def row(st, seed, hours, rg="avail50", run_dir="."):
    return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": hours, "bytes_train": 0.9e9,
            "bytes_eval": 0.1e9, "bytes_total": 1e9, "control_bytes": 1e6, "aggregations": 10,
            "final_accuracy": 0.5, "run_dir": str(run_dir)}


# felix 1, 2, 3 h; oort-async 1.29, 1.56, 8.04 h (beats felix on seed 1 only); fedbuff reaches it
# on seed 1 alone (1.5 h, faster than felix's 2 h), so felix wins seeds 0 and 2 by reaching it alone
ROWS = [row("felix", 0, 1.0), row("felix", 1, 2.0), row("felix", 2, 3.0),
        row("oort-async", 0, 1.29), row("oort-async", 1, 1.56), row("oort-async", 2, 8.04),
        row("fedbuff", 0, None), row("fedbuff", 1, 1.5), row("fedbuff", 2, None)]
STRATEGIES = ["felix", "oort-async", "fedbuff"]


def test_t_quantiles_match_the_printed_table():
    for df, t in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045), (1000, 1.962)]:
        assert t_quantile_975(df) == pytest.approx(t, abs=5e-4)


def test_hours_stats_of_three_seeds_and_of_one():
    s = hours_stats([1.0, 2.0, 3.0])
    assert (s["n"], s["mean"], s["std"]) == (3, 2.0, 1.0)  # sample std: sqrt(((-1)^2 + 0 + 1^2) / 2)
    # the interval on the log scale: log h = 0, 0.6931, 1.0986; mean 0.5973, sample std 0.5555,
    # half-width 4.303 * 0.5555 / sqrt(3) = 1.3801: exp(0.5973 -+ 1.3801) = [0.457, 7.223], never below 0
    assert s["ci95_low"] == pytest.approx(0.457, abs=1e-3) and s["ci95_high"] == pytest.approx(7.223, abs=1e-3)
    two = hours_stats([1.0, 2.0])  # logs 0, 0.6931: std 0.4901, half-width 12.706 * 0.4901 / sqrt(2) = 4.4034
    assert two["std"] == pytest.approx(math.sqrt(0.5))
    assert two["ci95_low"] == pytest.approx(math.exp(0.34657 - 4.40342), rel=1e-3)  # 0.0173
    assert two["ci95_high"] == pytest.approx(math.exp(0.34657 + 4.40342), rel=1e-3)  # 115.6
    one = hours_stats([4.0])
    assert (one["n"], one["mean"], one["std"], one["ci95_low"], one["ci95_high"]) == (1, 4.0, None, None, None)
    assert one["geomean"] == pytest.approx(4.0) and s["geomean"] == pytest.approx(6 ** (1 / 3))  # (1 * 2 * 3)^(1/3)
    assert hours_stats([]) == {"n": 0, "mean": None, "std": None, "ci95_low": None, "ci95_high": None,
                               "geomean": None}


def test_paired_ratio_is_the_geometric_mean_with_a_log_t_interval():
    # ratios 1.29, 0.78, 2.68: logs 0.25464, -0.24846, 0.98582, mean 0.33067, sample std 0.62064;
    # geometric mean exp(0.33067) = 1.3919; half-width 4.3027 * 0.62064 / sqrt(3) = 1.54177
    p = paired_ratio([1.29, 0.78, 2.68])
    assert p["n"] == 3 and p["geomean"] == pytest.approx(1.3919, abs=1e-4)
    assert p["ci95_low"] == pytest.approx(math.exp(0.33067 - 1.54177), rel=1e-3)  # 0.2979
    assert p["ci95_high"] == pytest.approx(math.exp(0.33067 + 1.54177), rel=1e-3)  # 6.504
    # reciprocal ratios give the reciprocal verdict (the mean of ratios would not)
    q = paired_ratio([1 / 1.29, 1 / 0.78, 1 / 2.68])
    assert q["geomean"] == pytest.approx(1 / p["geomean"]) and q["ci95_high"] == pytest.approx(1 / p["ci95_low"])
    one = paired_ratio([1.5, None])  # a seed not both reached is left out; one seed: no interval
    assert (one["n"], one["geomean"], one["ci95_low"], one["ci95_high"]) == (1, 1.5, None, None)
    assert paired_ratio([]) is None and paired_ratio([None]) is None
    with pytest.raises(ValueError, match="positive"):
        paired_ratio([1.0, 0.0])


def test_per_seed_ratios_and_wins_against_the_reference():
    vs = versus_reference(ROWS, "oort-async", "avail50", "felix")
    assert [sd for sd, _ in vs["ratios"]] == [0, 1, 2]
    assert [x for _, x in vs["ratios"]] == pytest.approx([1.29, 0.78, 2.68])
    assert (vs["ref_wins"], vs["paired"]) == (2, 3)
    fb = versus_reference(ROWS, "fedbuff", "avail50", "felix")  # only felix reached it on seeds 0 and 2
    assert [x for _, x in fb["ratios"]][0] is None and fb["ratios"][1][1] == pytest.approx(0.75)
    assert fb["ratios"][2][1] is None and (fb["ref_wins"], fb["paired"]) == (2, 3)
    # only the other strategy reached it: its win; neither: no one's; a seed the reference did not run: left out
    rows = [row("felix", 0, None), row("b", 0, 5.0), row("felix", 1, None), row("b", 1, None), row("b", 2, 1.0),
            row("felix", 3, 2.0), row("b", 3, 2.0)]
    vs = versus_reference(rows, "b", "avail50", "felix")
    assert vs["ratios"] == [(0, None), (1, None), (3, 1.0)]
    assert (vs["ref_wins"], vs["paired"]) == (0, 3)  # b alone on seed 0; neither on 1; a tie on 3: no one's win
    assert versus_reference(ROWS, "felix", "avail50", "felix") is None
    assert versus_reference(ROWS, "oort-async", "avail100", "felix") is None


def test_pool_cells_and_summary_pooled_csv(tmp_path):
    felix, oort, fedbuff = pool_cells(ROWS, STRATEGIES, ["avail50"])
    assert (felix["n_reached"], felix["n_seeds"], felix["reached"], felix["seeds"]) == (3, 3, 3, 3)
    assert (felix["hours_mean"], felix["hours_std"]) == (2.0, 1.0)
    assert felix["per_seed_ratio"] is None and felix["ref_wins"] is None
    assert oort["per_seed_ratio"] == "0:1.29;1:0.78;2:2.68" and oort["ref_wins"] == "2/3"
    assert (fedbuff["n_reached"], fedbuff["hours_mean"], fedbuff["hours_std"], fedbuff["hours_ci95_low"]) == \
        (1, 1.5, None, None)
    assert fedbuff["per_seed_ratio"] == "1:0.75" and fedbuff["ref_wins"] == "2/3"
    # without felix the reference is the first strategy: oort-async reaches it alone on seeds 0 and 2,
    # fedbuff is faster on seed 1 (1.5 h against 1.56 h)
    alt = pool_cells(ROWS, ["oort-async", "fedbuff"], ["avail50"])[1]
    assert (alt["ref_wins"], alt["per_seed_ratio"]) == ("2/3", "1:0.961538")

    write_pooled_csv(ROWS, STRATEGIES, ["avail50"], tmp_path)
    with open(tmp_path / "summary_pooled.csv", newline="") as f:
        back = list(csv.DictReader(f))
    assert list(back[0]) == POOLED_COLUMNS
    for col in ("strategy", "availability", "seeds", "reached", "hours_mean", "hours_std", "gb_train", "gb_eval",
                "gb_total", "aggregations", "final_accuracy", "n_reached", "n_seeds", "hours_ci95_low",
                "hours_ci95_high", "per_seed_ratio", "ref_wins"):
        assert col in POOLED_COLUMNS
    assert float(back[0]["hours_ci95_low"]) == pytest.approx(0.457, abs=1e-3)
    assert float(back[0]["hours_ci95_high"]) == pytest.approx(7.223, abs=1e-3)
    assert float(back[1]["ratio_geomean"]) == pytest.approx(1.3919, abs=1e-4) and back[1]["ratio_n"] == "3"
    assert float(back[1]["ratio_ci95_low"]) == pytest.approx(0.2979, abs=1e-3)
    assert (back[0]["ratio_geomean"], back[2]["ratio_n"], back[2]["ratio_ci95_low"]) == ("", "1", "")
    assert (back[2]["hours_std"], back[2]["hours_ci95_low"], back[2]["hours_ci95_high"]) == ("", "", "")  # n = 1
    assert (back[1]["per_seed_ratio"], back[1]["ref_wins"], back[0]["ref_wins"]) == ("0:1.29;1:0.78;2:2.68", "2/3", "")


def test_comparison_table_shows_intervals_per_seed_ratios_and_wins():
    lines = comparison_table(ROWS, STRATEGIES, ["avail50"], target=0.7).splitlines()
    assert "seeds 0,1,2" in lines[0] and "reference felix" in lines[0]
    assert lines[1].split()[2:6] == ["n", "mean", "h", "std"] and lines[1].endswith("per-seed x ref")
    felix, oort, fedbuff = lines[2:5]
    assert felix.split()[2:7] == ["3/3", "2.00", "1.00", "[0.457,", "7.22]"]
    assert oort.split()[2:4] == ["3/3", "3.63"] and " 2/3 " in oort and oort.endswith("1.29, 0.780, 2.68")
    assert "x1.39 [0.298, 6.50] n=3" in oort and "x0.750 n=1" in fedbuff
    assert fedbuff.split()[2:6] == ["1/3", "1.50", "-", "-"] and fedbuff.endswith("-, 0.750, -")
    notes = "\n".join(lines[5:])
    assert "ddof=1" in notes and "Student t" in notes and "t(0.975, n-1)" in notes
    assert FEW_SEEDS_WARNING not in notes  # every cell ran 3 seeds


def test_the_few_seeds_warning_appears_below_three_seeds_only():
    two = [r for r in ROWS if r["seed"] < 2]
    table = comparison_table(two, STRATEGIES, ["avail50"], target=0.7)
    warning = [line for line in table.splitlines() if FEW_SEEDS_WARNING in line]
    assert len(warning) == 1 and "n < 3 seeds: intervals are wide or missing; run --seeds 0,1,2" in warning[0]
    assert FEW_SEEDS_WARNING not in comparison_table(ROWS, STRATEGIES, ["avail50"], target=0.7)


def _paper_matrix():
    spec = importlib.util.spec_from_file_location("paper_matrix", ROOT / "benchmarks" / "paper_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paper_matrix_table_has_the_same_statistics(tmp_path):
    (tmp_path / "metrics.csv").write_text("hours,accuracy\n0.0,0.1\n1.0,0.7\n")
    rows = [{**r, "run_dir": str(tmp_path), "_summary": {"bytes_train": 0.9e9, "bytes_eval": 0.1e9,
                                                          "control_bytes": 1e6, "aggregations": 10,
                                                          "end_time_s": 3600.0, "stop_reason": "target"}}
            for r in ROWS]
    table = _paper_matrix().fidelity_table(rows, STRATEGIES, ["avail50"])
    lines = table.splitlines()
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    head = cells(lines[0])
    felix, oort, fedbuff = (dict(zip(head, cells(line))) for line in lines[2:5])
    assert (felix["reached"], felix["hours to target (mean)"], felix["std"], felix["95% CI"]) == \
        ("3/3", "2.00", "1.00", "[0.46, 7.22]")
    assert (felix["per-seed x FeLiX"], felix["FeLiX wins"], felix["x FeLiX"]) == ("-", "-", "x1.00")
    assert (felix["paired x FeLiX [95% CI]"], oort["paired x FeLiX [95% CI]"]) == ("-", "x1.39 [0.298, 6.50] n=3")
    assert fedbuff["paired x FeLiX [95% CI]"] == "x0.750 n=1"
    assert (oort["per-seed x FeLiX"], oort["FeLiX wins"], oort["x FeLiX"]) == ("1.29, 0.78, 2.68", "2/3", "x1.81")
    assert (fedbuff["std"], fedbuff["95% CI"], fedbuff["per-seed x FeLiX"], fedbuff["FeLiX wins"]) == \
        ("-", "-", "-, 0.75, -", "2/3")
    assert "ddof=1" in table and "Student t" in table and FEW_SEEDS_WARNING not in table
    one_seed = _paper_matrix().fidelity_table([r for r in rows if r["seed"] == 0], STRATEGIES, ["avail50"])
    assert one_seed.splitlines()[-1].startswith("warning: " + FEW_SEEDS_WARNING)


def test_every_pooled_column_is_documented():
    from tests.test_docs import _backticked

    documented = set(_backticked((ROOT / "docs" / "results.md").read_text()))
    assert not sorted(set(POOLED_COLUMNS) - documented)


def test_the_paper_column_follows_the_modality():
    pm = _paper_matrix()
    # CIFAR-10 (Fig. 9): 15.0 / 9.3 h on MobiPerf; OORT+Async stuck at 50%
    assert pm.paper_ratio("oort-oracle", "MobiPerf") == "x1.61"
    assert pm.paper_ratio("oort-async", "50%") == "stuck"
    assert pm.paper_ratio("felix", "MobiPerf") == "x1.00"
    # Speech (Fig. 10): 15.9-16.3 h against 11.1 h for each oracle baseline; OORT+Async not reported
    for st in ("oort-oracle", "oort-async-oracle", "refl", "refl@oracle_departure=free_slot"):
        assert pm.paper_ratio(st, "MobiPerf", "speech_commands") == "x1.43-1.47"
    assert pm.paper_ratio("oort-async", "MobiPerf", "speech_commands") == "-"
    assert pm.paper_ratio("felix", "MobiPerf", "speech_commands") == "x1.00"
    assert pm.paper_ratio("oort-oracle", "50%", "speech_commands") == "-"  # the paper ran speech on MobiPerf only


def test_the_paper_matrix_names_the_papers_regimes_as_the_paper_does(tmp_path):
    """``ref:syn_20`` is the paper's 90%: its rows read ``90% (ref:syn_20)`` and carry the paper's 90%
    ratio (OORT+Async 15.5 h / FeLiX 6.5 h); MobiPerf's other traces are named MobiPerf but carry no
    ratio of the paper's (it ran ref:mobiperf_3st_50, which ``mobiperf`` is)."""
    pm = _paper_matrix()
    regimes = ["ref:syn_0", "ref:syn_20", "ref:syn_50", "ref:mobiperf_3st_50", "mobiperf", "ref:mobiperf_2st",
               "avail50"]
    assert [pm.paper_key(rg) for rg in regimes] == ["100%", "90%", "50%", "MobiPerf", "MobiPerf", None, None]
    (tmp_path / "metrics.csv").write_text("hours,accuracy\n0.0,0.1\n1.0,0.7\n")
    summary = {"bytes_train": 0.9e9, "bytes_eval": 0.1e9, "control_bytes": 1e6, "aggregations": 10,
               "end_time_s": 3600.0, "stop_reason": "target"}
    rows = [{**r, "availability": rg, "run_dir": str(tmp_path), "_summary": summary}
            for r in ROWS if r["strategy"] != "fedbuff" for rg in ("ref:syn_20", "ref:mobiperf_2st")]
    strategies = ["felix", "oort-async"]
    table = pm.fidelity_table(rows, strategies, ["ref:syn_20", "ref:mobiperf_2st"])
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    head = cells(table.splitlines()[0])
    found = {(c["regime"], c["strategy"]): c["paper"] for c in (dict(zip(head, cells(ln)))
                                                                for ln in table.splitlines()[2:6])}
    assert found == {("90% (ref:syn_20)", "felix"): "x1.00", ("90% (ref:syn_20)", "oort-async"): "x2.38",
                     ("MobiPerf (ref:mobiperf_2st)", "felix"): "-", ("MobiPerf (ref:mobiperf_2st)", "oort-async"): "-"}
    assert "| 90% (ref:syn_20) | oort-async |" in pm.diagnostics_table(rows, strategies, ["ref:syn_20"])
    assert pm.paper_ratios(strategies, ["ref:syn_20", "ref:mobiperf_2st"]) == \
        {("oort-async", "ref:syn_20"): pytest.approx(15.5 / 6.5)}
