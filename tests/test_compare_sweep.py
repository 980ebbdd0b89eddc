"""``felix-jax compare`` with cells of their own options (``STRATEGY@KEY=VALUE``) and ``--sweep``,
its notes on a finished folder, ``felix-jax plot-trace``, and the help and listing texts."""

from __future__ import annotations

import csv
import json

import pytest

from felix_jax.cli import build_parser, main

CELLS = ["felix@timeout_s=30", "felix@timeout_s=90", "oort-async-oracle@oracle_departure=free_slot;timeout_s=30",
         "oort-async-oracle@oracle_departure=free_slot;timeout_s=90"]


def sweep_argv(out, *more):
    return ["compare", "--scenario", "tiny", "--strategies", "felix,oort-async-oracle@oracle_departure=free_slot",
            "--sweep", "timeout_s=30,90", "--availability", "avail50", "--set", "max_aggregations=3", "--quiet",
            "--out", str(out), *more]


def test_a_sweep_runs_resumes_and_tabulates(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(sweep_argv(out, "--batch", "4")) == 0  # the four cells as one batch
    first = capsys.readouterr().out
    for label in CELLS:
        assert label in first  # in the table
    with open(out / "summary.csv", newline="") as f:
        assert sorted(r["strategy"] for r in csv.DictReader(f)) == sorted(CELLS)
    with open(out / "summary_pooled.csv", newline="") as f:
        assert sorted(r["strategy"] for r in csv.DictReader(f)) == sorted(CELLS)
    cell = out / "runs" / "oort-async-oracle+oracle_departure-free_slot+timeout_s-90-avail50-seed0"
    config = json.loads((cell / "config.json").read_text())
    assert config["scenario"]["timeout_s"] == 90.0 and config["fleet"]["oracle_departure"] == "free_slot"
    assert json.loads((out / "runs" / "felix+timeout_s-30-avail50-seed0" / "config.json").read_text(
    ))["scenario"]["timeout_s"] == 30.0
    for name in ("accuracy.png", "bytes.png", "cdfs.png", "table.txt"):
        assert (out / name).is_file()
    # three aggregations end before any 30 s timer fires: each strategy's two variants ran identically
    for line in (first, (out / "table.txt").read_text()):
        assert "warning: felix@timeout_s=30 and felix@timeout_s=90 ran identically on avail50 (seed 0" in line
        assert "timeout_s changed nothing there" in line
        assert f"{CELLS[2]} and {CELLS[3]} ran identically" in line
    # again: every cell is kept, and one line says that the table is the earlier one's
    assert main(sweep_argv(out)) == 0
    again = capsys.readouterr().out
    assert again.count("finished earlier, kept") == 4
    assert "all 4 cells in" in again and "--overwrite" in again and "--out another folder" in again
    # one more value: the finished cells are kept, only the new ones run
    argv = sweep_argv(out)
    argv[argv.index("timeout_s=30,90")] = "timeout_s=30,90,150"
    assert main(argv) == 0
    third = capsys.readouterr().out
    assert third.count("finished earlier, kept") == 4 and "felix@timeout_s=150" in third
    assert "had finished earlier" not in third


@pytest.mark.parametrize("more,expected", [
    (["--sweep", "nonsense=1,2"], "felix@nonsense=1: nonsense: unknown scenario field"),
    (["--sweep", "timeout_s=abc"], "timeout_s='abc'"),
    (["--sweep", "seed=1,2"], "seed is an axis of the comparison already; give it with --seeds"),
    (["--sweep", "availability=avail50"], "give it with --availability"),
    (["--sweep", "strategy=felix"], "give it with --strategies"),
    (["--sweep", "timeout_s="], "no values"),
    (["--sweep", "timeout_s"], "expected KEY=v1,v2"),
    (["--sweep", "timeout_s=1", "--sweep", "timeout_s=2"], "swept twice"),
    (["--strategies", "felix@seed=2"], "seed is an axis of the comparison"),
    (["--strategies", "felix@selector.k=v"], "felix@selector.k=v: selector.k"),
])
def test_bad_sweeps_and_cells_are_refused_in_one_line_before_anything_runs(tmp_path, more, expected):
    argv = ["compare", "--scenario", "tiny", "--availability", "avail50", "--quiet", "--out", str(tmp_path / "c"),
            "--strategies", "felix", *more]
    if more[0] == "--strategies":
        argv = argv[:-2] + more
    with pytest.raises(SystemExit) as info:
        main(argv)
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message and message.startswith("felix-jax compare: ")
    assert expected in message, message
    assert not (tmp_path / "c").exists()


def test_plot_trace_writes_the_figure_and_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plot-trace", "avail50", "--clients", "8", "--hours", "2"]) == 0
    assert (tmp_path / "avail50-trace.png").stat().st_size > 0
    assert "avail50-trace.png" in capsys.readouterr().out
    (tmp_path / "t.csv").write_text("client,time_s,state\n0,0,AVL_TRAIN\n0,600,UN_AVL\n1,0,AVL_EVAL\n")
    assert main(["plot-trace", str(tmp_path / "t.csv"), "--out", str(tmp_path / "fig" / "t.png")]) == 0
    assert (tmp_path / "fig" / "t.png").is_file()
    for argv, expected in ((["plot-trace", "avail42"], "unknown availability regime 'avail42'"),
                           (["plot-trace", "nope.csv"], "nope.csv"),
                           (["plot-trace", "avail50", "--clients", "0"], "--clients 0: must be >= 1"),
                           (["plot-trace", "avail50", "--hours", "-1"], "--hours -1.0"),
                           (["plot-trace", "avail50", "--out", ""], "an empty path")):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert isinstance(info.value.code, str) and "\n" not in info.value.code, argv
        assert info.value.code.startswith("felix-jax plot-trace: ") and expected in info.value.code, info.value.code


def test_help_names_each_default_once():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("run", "compare", "plot-trace"):
        text = sub[command].format_help()
        assert "(default: None)" not in text and "(default: False)" not in text, command
    text = " ".join(sub["compare"].format_help().split())
    assert "(default: quickstart)" in text and "results/compare-<scenario>" in text


def test_run_list_shows_the_presets_values_beside_the_defaults(capsys):
    assert main(["run", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    slot = next(x for x in lines if x.strip().startswith("slot_s "))
    assert "= 600.0 [quickstart: 60.0]" in slot  # what `felix-jax run` runs, beside the field's default
    assert main(["run", "--preset", "tiny", "--list"]) == 0
    slot = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("slot_s "))
    assert "[tiny: 30.0]" in slot


def test_batches_after_the_first_give_the_whole_comparisons_eta(tmp_path):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.compare import run_matrix

    lines = []
    base = get_preset("tiny").with_overrides({"max_aggregations": 2, "target_accuracy": "none"})
    run_matrix(base, ["felix", "fedbuff", "oort-async"], ["avail100"], [0], tmp_path / "c", progress=False,
               log=lines.append, plot=False, batch=2)
    batch_lines = [x for x in lines if x.startswith("batch ")]
    assert len(batch_lines) == 2 and "ETA" not in batch_lines[0]  # nothing finished yet: no basis
    assert "comparison ETA" in batch_lines[1] and "1 cell left" in batch_lines[1]


def test_a_cell_recorded_before_a_field_existed_still_counts_as_finished(tmp_path):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.compare import changed_cell, same_scenario

    sc = get_preset("tiny").with_overrides({"strategy": "felix", "trace_start_s": 30})
    record = json.loads(json.dumps(sc.to_json(), default=str))
    assert same_scenario(record, sc)
    older = {k: v for k, v in record.items() if k != "trace_speedup"}  # written before trace_speedup existed
    assert same_scenario(older, sc)
    # ... but only where the scenario asks for the field's default (the behaviour that run had)
    assert not same_scenario(older, sc.with_overrides({"trace_speedup": 3}))
    assert not same_scenario({**record, "seed": 1}, sc)
    assert not same_scenario({**record, "no_such_field": 1}, sc)
    assert not same_scenario(None, sc) and not same_scenario([], sc)
    # the matrix's changed-cell check reads the record the same way
    (tmp_path / "config.json").write_text(json.dumps({"scenario": older}))
    (tmp_path / "summary.json").write_text(json.dumps({"stop_reason": "target"}))
    assert changed_cell(sc, tmp_path) is None
    assert "trace_speedup 1.0 -> 3.0" in changed_cell(sc.with_overrides({"trace_speedup": 3}), tmp_path)


def _run_folder(root, name, metrics, dispatches):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("time_s,hours,version,accuracy\n" + metrics)
    (folder / "events.csv").write_text("time_s,event,client,kind,version,staleness,weight,tier\n" + "".join(
        f"{t},dispatch,{c},train,0,-1,,2\n" for t, c in dispatches) + "9.0,reply,0,train,0,0,,2\n")
    return str(folder)


def test_variants_that_ran_identically_are_named_with_the_option(tmp_path):
    from felix_jax.experiment.variants import identical_variant_warnings, identical_variants, run_fingerprint

    same = "0,0,0,0.1\n10,0.003,1,0.4\n"
    rows = []
    for seed in (0, 1):
        for label, metrics, dispatches in (
                ("felix@timeout_s=30", same, [(0.0, 1), (1.0, 2)]),
                ("felix@timeout_s=90", same, [(0.0, 1), (1.0, 2)]),  # the same run
                ("felix@timeout_s=150", same, [(0.0, 1), (1.0, 3)]),  # same metrics, another client dispatched
                ("fedbuff", same, [(0.0, 1), (1.0, 4)])):  # another strategy, another run
            rows.append({"strategy": label, "availability": "avail50", "seed": seed,
                         "run_dir": _run_folder(tmp_path, f"{label}-{seed}", metrics, dispatches)})
    labels = ["felix@timeout_s=30", "felix@timeout_s=90", "felix@timeout_s=150", "fedbuff"]
    assert run_fingerprint(rows[0]["run_dir"]) == run_fingerprint(rows[1]["run_dir"]) != run_fingerprint(
        rows[2]["run_dir"])
    groups = identical_variants(rows, labels, ["avail50"])
    assert groups == [{"kind": "tie", "labels": labels[:2], "options": ["timeout_s"], "regimes": ["avail50"],
                       "seeds": [0, 1], "cells": [(labels[0], "avail50"), (labels[1], "avail50")]}]
    (line,) = identical_variant_warnings(rows, labels, ["avail50"])
    assert line.startswith("warning: felix@timeout_s=30 and felix@timeout_s=90 ran identically on avail50 "
                           "(seeds 0,1") and "timeout_s changed nothing there" in line
    # a seed where they differ: not identical
    other = _run_folder(tmp_path, "other", "0,0,0,0.1\n10,0.003,1,0.5\n", [(0.0, 1), (1.0, 2)])
    rows[4 + 1]["run_dir"] = other  # felix@timeout_s=90, seed 1
    assert identical_variants(rows, labels, ["avail50"]) == []
    # a plain strategy and its variant differ in the variant's option
    plain = [dict(r, strategy="felix") if r["strategy"] == "felix@timeout_s=30" else r for r in rows]
    groups = identical_variants(plain, ["felix", "felix@timeout_s=90"], ["avail50"])
    assert [g["options"] for g in groups] == []  # seed 1 differs
    plain = [r for r in plain if r["seed"] == 0]
    assert [g["options"] for g in identical_variants(plain, ["felix", "felix@timeout_s=90"], ["avail50"])] == [
        ["timeout_s"]]


def test_any_two_cells_that_ran_identically_are_said_strategies_and_settings_alike(tmp_path):
    """Not only variants of one strategy: two strategies (fedbuff and fedbuff-tiertrack where nobody leaves),
    one strategy on two values of a swept setting, and several at once."""
    from felix_jax.experiment.variants import identical_variant_warnings

    metrics, dispatches = "0,0,0,0.1\n10,0.003,1,0.4\n", [(0.0, 1), (1.0, 2)]
    other = [(0.0, 1), (1.0, 3)]
    cells = {("fedbuff", "avail100"): dispatches, ("fedbuff-tiertrack", "avail100"): dispatches,
             ("fedbuff", "avail50"): other, ("fedbuff-tiertrack", "avail50"): [(0.0, 2)],
             ("felix", "avail100 alpha=0.05"): [(0.0, 7)], ("felix", "avail100 alpha=1.0"): [(0.0, 7)]}
    rows = [{"strategy": st, "availability": rg, "seed": 0,
             "run_dir": _run_folder(tmp_path, f"{st}-{rg}".replace(" ", "_"), metrics, d)}
            for (st, rg), d in cells.items()]
    lines = identical_variant_warnings(rows, ["fedbuff", "fedbuff-tiertrack", "felix"],
                                       ["avail100", "avail50", "avail100 alpha=0.05", "avail100 alpha=1.0"])
    assert lines == [
        "warning: fedbuff and fedbuff-tiertrack ran identically on avail100 (seed 0: the same metrics.csv and "
        "dispatches): what sets these strategies apart decided nothing there (docs/results.md, \"Variants that ran "
        "identically\")",
        "warning: felix ran identically on avail100 alpha=0.05 and avail100 alpha=1.0 (seed 0: the same metrics.csv "
        "and dispatches): what sets avail100 alpha=0.05 and avail100 alpha=1.0 apart decided nothing there "
        "(docs/results.md, \"Variants that ran identically\")"]
    # two strategies each on another regime, one run for both
    mixed = [{"strategy": st, "availability": rg, "seed": 0,
              "run_dir": _run_folder(tmp_path, f"mixed-{st}-{rg}", metrics, [(0.0, 9)] if st != "felix@x=1" else
                                     [(0.0, 8)])}
             for st, rg in (("fedbuff", "avail50"), ("felix", "avail100"), ("felix@x=1", "avail50"))]
    assert identical_variant_warnings(mixed, ["fedbuff", "felix", "felix@x=1"], ["avail100", "avail50"]) == [
        "warning: felix on avail100 and fedbuff on avail50 ran identically (seed 0: the same metrics.csv and "
        "dispatches): what sets these cells apart decided nothing there (docs/results.md, \"Variants that ran "
        "identically\")"]


def test_timeout_s_changes_a_run_only_where_a_timer_frees_a_slot(tmp_path):
    """The finding behind the warning (docs/results.md): the server's timer keeps the task's slot (the
    FeLiX code's C5) and a late reply is still aggregated, so timeout_s 30 and 90 give the same run
    while 30 s timers fire and 90 s ones do not; with timeout_frees_slot=true a blind server refills
    the slot at the timer, and the runs differ."""
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.runner import run

    base = get_preset("tiny").with_overrides({"availability": "avail50", "max_aggregations": "12",
                                              "target_accuracy": "none"})

    def one(strategy, timeout, **more):
        folder = tmp_path / f"{strategy}-{timeout}-{len(more)}"
        result = run(base.with_overrides({"strategy": strategy, "timeout_s": timeout, **more}), folder, plot=False)
        return (folder / "metrics.csv").read_bytes(), result.summary["timeouts"]

    for strategy in ("felix", "oort-async"):
        (short, fired), (long, none) = one(strategy, "30"), one(strategy, "90")
        assert fired > none == 0, strategy  # 30 s timers fired, 90 s ones did not ...
        assert short == long, strategy  # ... and changed nothing
    freed = [one("oort-async", t, timeout_frees_slot="true")[0] for t in ("30", "90")]
    assert freed[0] != freed[1]
