"""The scripts in benchmarks/ are commands like felix-jax's: help and a default on every argument, and a
user's mistake (a typo, a missing folder, unset data) in one line through the CLI's reporter."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from felix_jax.commands import comma_list, one_line, parse_sets, run_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if "def main(" in p.read_text())


def _script(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_script_with_a_main_is_walked():
    assert {"paper_matrix", "learner_ladder", "fleet_scale", "update_guard"} <= set(SCRIPTS)
    for name in SCRIPTS:
        text = (BENCHMARKS / f"{name}.py").read_text()
        assert f'run_script("{name}.py", main)' in text, f"{name}.py: its __main__ does not go through run_script"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_argument_has_help_and_shows_its_default(name):
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit) as done:
        _script(name).main(["--help"])
    assert done.value.code == 0
    text = shown.getvalue()
    options = text[text.index("options:"):]
    # an option's entry: its flags at two spaces, then its help (maybe on the next lines)
    entries = re.split(r"\n  (?=-)", options)[1:]
    assert entries, text
    for entry in entries:
        flag = entry.split()[0].rstrip(",")
        if flag in ("-h", "--help"):
            continue
        words = " ".join(entry.split())
        assert "(default:" in words, f"{name}.py {flag}: no help or no default shown: {words!r}"


def test_the_shared_reporter_by_hand(capsys):
    assert comma_list(" a, b,,c ", "--x") == ["a", "b", "c"]
    assert comma_list("0,2", "--seeds", int) == [0, 2]
    with pytest.raises(ValueError, match=r"^--seeds expects comma-separated ints, got 'a'$"):
        comma_list("a", "--seeds", int)
    assert parse_sets(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match=r"^--set expects key=value, got 'oops'$"):
        parse_sets(["oops"])
    assert one_line(FileNotFoundError(2, "No such file or directory", "/x")) == "/x: No such file or directory"

    def bad(argv):
        raise KeyError("unknown strategy 'felx'")

    with pytest.raises(SystemExit) as stop:
        run_script("tool.py", bad)
    assert stop.value.code == "tool.py: unknown strategy 'felx'"


@pytest.mark.parametrize("argv,expected", [
    (["--strategies", "felx"], "paper_matrix.py: strategy='felx': unknown strategy 'felx'; did you mean 'felix'?"),
    (["--regimes", "avail101"], "paper_matrix.py: availability='avail101': unknown availability regime 'avail101'; "
                                "did you mean 'avail100'?"),
    (["--extra-cell", "felix", "avail5"], "paper_matrix.py: availability='avail5': unknown availability regime"),
    (["--seeds", "0,x"], "paper_matrix.py: --seeds expects comma-separated ints, got '0,x'"),
    (["--set", "oops"], "paper_matrix.py: --set expects key=value, got 'oops'"),
    (["--table-only", "--out", "/nonexistent/matrix"], "paper_matrix.py: --out /nonexistent/matrix: no such folder"),
    (["--skip-cell", "felx", "avail100", "0"], "paper_matrix.py: --skip-cell felx avail100 0: not one of the cells"),
    (["--skip-cell", "felix", "avail100", "x"], "paper_matrix.py: --skip-cell felix avail100 x: the seed is not an"),
    (["--skip-cell", "felix", "avail5", "0"], "paper_matrix.py: availability='avail5': unknown availability regime"),
    (["--strategies", "felix", "--regimes", "avail100", "--ablations", "", "--seeds", "0",
      "--skip-cell", "felix", "avail100", "0"], "paper_matrix.py: every cell these arguments ask for is given as"),
    ([], "paper_matrix.py: cifar10-fidelity needs cifar10 (CIFAR-10"),  # the first cell's, with the fetch
])
def test_paper_matrix_mistakes_end_in_one_line(argv, expected, monkeypatch, tmp_path):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))  # a data home without CIFAR-10
    monkeypatch.chdir(tmp_path)
    module = _script("paper_matrix")
    with pytest.raises(SystemExit) as stop:
        run_script("paper_matrix.py", module.main, argv)
    message = stop.value.code
    assert isinstance(message, str) and "\n" not in message and message.startswith(expected), message
    assert not (tmp_path / "results").exists()  # nothing written


def test_learner_ladder_mistakes_end_in_one_line(tmp_path):
    module = _script("learner_ladder")
    for argv, expected in ((["--phases", "99"], "learner_ladder.py: --phases 99: no phase 99"),
                           (["--table-only", "--out", str(tmp_path / "none")], "learner_ladder.py: --out ")):
        with pytest.raises(SystemExit) as stop:
            run_script("learner_ladder.py", module.main, argv)
        assert str(stop.value.code).startswith(expected), stop.value.code


def test_byzantine_study_mistakes_end_in_one_line(tmp_path):
    module = _script("byzantine_study")
    for argv, expected in ((["--phases", "0,99"], "byzantine_study.py: --phases 0,99: no phase 99 (phases are 0-"),
                           (["--phases", "x"], "byzantine_study.py: --phases expects comma-separated ints"),
                           (["--table-only", "--out", str(tmp_path / "none")], "byzantine_study.py: --out "),
                           (["--table-only", "--rows-from", str(tmp_path / "none.json")],
                            "byzantine_study.py: --rows-from ")):
        with pytest.raises(SystemExit) as stop:
            run_script("byzantine_study.py", module.main, argv)
        assert str(stop.value.code).startswith(expected), stop.value.code


def test_no_traceback_from_the_shell():
    env = {k: v for k, v in os.environ.items() if k != "FELIX_JAX_DATA"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "paper_matrix.py"), "--strategies", "felx"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line
    assert done.stderr.startswith("paper_matrix.py: strategy='felx'")


# ------------------------------------------------------------------ numbers, seeds and output files checked before any work
def test_the_shared_argument_checkers_by_hand(tmp_path):
    import argparse

    from felix_jax.commands import output_file, positive_float, positive_int, seed_list

    assert positive_int("3") == 3 and positive_float("0.5") == 0.5
    for check, text, says in ((positive_int, "0", "must be an integer >= 1, got '0'"),
                              (positive_int, "x", "expected an integer >= 1, got 'x'"),
                              (positive_float, "nan", "must be a finite number > 0, got 'nan'"),
                              (positive_float, "inf", "must be a finite number > 0, got 'inf'"),
                              (positive_float, "-1", "must be a finite number > 0, got '-1'")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(says)}$"):
            check(text)
    assert seed_list("2, 0,1") == [2, 0, 1]
    for text, says in (("0,0", "--seeds: seed 0 is given twice in '0,0'"),
                       (",", "--seeds expects at least one seed, got ','"),
                       ("a,b", "--seeds expects comma-separated ints, got 'a,b'")):
        with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
            seed_list(text)
    assert output_file(str(tmp_path / "x.json")) == str(tmp_path / "x.json")
    for text, says in ((str(tmp_path / "none" / "x.json"), f"{tmp_path / 'none' / 'x.json'}: no such folder "
                                                           f"{tmp_path / 'none'}"),
                       (str(tmp_path), f"{tmp_path}: is a folder, not a file")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(says)}$"):
            output_file(text)


# small enough that a cell, if one ran, would take seconds; no FedScale trace
FLEET = ["--populations", "100", "--aggregations", "2", "--fedscale-clients"]


def _benchmark(name: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FELIX_JAX_DATA"}
    return subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), *argv], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.mark.parametrize("name,argv,says", [
    # a number the user gives is used or refused, never replaced by the default (`args.x or default`)
    ("fleet_scale", [*FLEET, "--concurrency", "0"],
     "fleet_scale.py: error: argument --concurrency: must be an integer >= 1, got '0'"),
    ("fleet_scale", [*FLEET, "--aggregation-goal", "0"],
     "fleet_scale.py: error: argument --aggregation-goal: must be an integer >= 1, got '0'"),
    ("fleet_scale", ["--populations", "--fedscale-clients", "--index-sizes", "-1"],
     "fleet_scale.py: error: argument --index-sizes: must be an integer >= 1, got '-1'"),
    ("fleet_scale", [*FLEET, "--out", "NODIR/x.json"],
     "fleet_scale.py: error: argument --out: NODIR/x.json: no such folder NODIR"),
    ("fleet_scale", [*FLEET, "--out", "."], "fleet_scale.py: error: argument --out: .: is a folder, not a file"),
    ("fleet_scale", [*FLEET, "--resume", "--out", "notes.csv"],
     "fleet_scale.py: --out notes.csv: not a fleet_scale.py JSON to --resume (Expecting value: line 1 column 1 "
     "(char 0))"),
    ("attribution", ["--seeds", "0,0"], "attribution.py: --seeds: seed 0 is given twice in '0,0'"),
    ("attribution", ["--seeds", ","], "attribution.py: --seeds expects at least one seed, got ','"),
    ("attribution", ["--budget-s", "nan"],
     "attribution.py: error: argument --budget-s: must be a finite number > 0, got 'nan'"),
    ("attribution", ["--budget-s", "0"], "attribution.py: error: argument --budget-s: must be a finite number > 0, "
                                         "got '0'"),
    ("paper_matrix", ["--table-only", "--seeds", "1,1"], "paper_matrix.py: --seeds: seed 1 is given twice in '1,1'"),
    ("drift_matrix", ["--seeds", "0,0"], "drift_matrix.py: --seeds: seed 0 is given twice in '0,0'"),
    ("centralized_reference", ["--lr", "0"],
     "centralized_reference.py: error: argument --lr: must be a finite number > 0, got '0'"),
    ("centralized_reference", ["--batch-size", "0"],
     "centralized_reference.py: error: argument --batch-size: must be an integer >= 1, got '0'"),
    ("cohort_throughput", ["--reps", "0"], "cohort_throughput.py: error: argument --reps: must be an integer >= 1, "
                                          "got '0'"),
], ids=["fleet-concurrency-0", "fleet-aggregation-goal-0", "fleet-index-sizes-neg", "fleet-out-no-folder",
        "fleet-out-a-folder", "fleet-resume-not-json", "attribution-seeds-twice", "attribution-seeds-empty",
        "attribution-budget-nan", "attribution-budget-0", "paper-matrix-seeds-twice", "drift-seeds-twice",
        "centralized-lr-0", "centralized-batch-0", "cohort-reps-0"])
def test_benchmark_arguments_are_refused_before_any_work_in_one_line_naming_the_option(name, argv, says, tmp_path):
    (tmp_path / "notes.csv").write_text("seed,hours\n0,1.5\n")
    # the scripts' own outputs kept in tmp_path: a run that went ahead would leave files there
    extra = {"attribution": ["--table-only", "--cells", str(tmp_path / "cells"), "--out", str(tmp_path / "out"),
                             "--json", str(tmp_path / "attribution.json")],
             "paper_matrix": ["--out", str(tmp_path)], "drift_matrix": ["--out", str(tmp_path / "drift")]}
    done = _benchmark(name, [*argv, *extra.get(name, [])], tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == says, done.stderr  # the message: one line naming the option
    if ": error: argument " not in says:  # not argparse's (usage above its line): the line alone
        assert len(lines) == 1, done.stderr
    assert "N=" not in done.stdout and "==" not in done.stdout  # no cell ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.csv"]  # nothing written
    assert (tmp_path / "notes.csv").read_text() == "seed,hours\n0,1.5\n"
