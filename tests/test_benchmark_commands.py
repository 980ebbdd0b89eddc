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
    ([], "paper_matrix.py: no data folder: set FELIX_JAX_DATA"),
])
def test_paper_matrix_mistakes_end_in_one_line(argv, expected, monkeypatch, tmp_path):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
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


def test_no_traceback_from_the_shell():
    env = {k: v for k, v in os.environ.items() if k != "FELIX_JAX_DATA"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "paper_matrix.py"), "--strategies", "felx"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line
    assert done.stderr.startswith("paper_matrix.py: strategy='felx'")
