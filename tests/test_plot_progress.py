"""Progress toward the stop rule, the outer bar of ``compare``, and ``felix-jax plot``."""

import math
import shutil

import pytest

from felix_jax.cli import main
from felix_jax.experiment import get_preset
from felix_jax.experiment.compare import SUMMARY_COLUMNS, rows_from_summary_csv, run_matrix
from felix_jax.experiment.runner import RunProgress, run
from felix_jax.fleet.simulator import Checkpoint

TINY = get_preset("tiny")  # target 0.5, at most 60 aggregations or 6 virtual hours


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def checkpoint(version: int, hours: float, accuracy: float) -> Checkpoint:
    return Checkpoint(time_s=hours * 3600, version=version, accuracy=accuracy, loss=1.0, bytes_total=0,
                      staleness_mean=0.0, interval_s=1.0)


def test_progress_reports_each_part_of_the_stop_rule_and_the_nearest_cap():
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=False, clock=clock)
    first = progress.update(checkpoint(0, 0.0, 0.1))
    assert first.aggregations == 0 and first.virtual_time == 0 and first.budget == 0
    assert first.accuracy == pytest.approx(0.1 / 0.5)
    assert first.eta_s is None  # no rate yet
    # one aggregation per wall second, 0.01 virtual hours each
    for v in range(1, 7):
        clock.now = float(v)
        p = progress.update(checkpoint(v, 0.01 * v, 0.1 + 0.05 * v))
    assert p.aggregations == pytest.approx(6 / 60)
    assert p.virtual_time == pytest.approx(0.06 / 6)
    mean = sum(0.1 + 0.05 * v for v in range(7)) / 7  # fewer than 20 checkpoints: the mean of all
    assert p.accuracy == pytest.approx(mean / 0.5)
    assert p.budget == pytest.approx(6 / 60) == p.shown  # the nearer cap; the accuracy is shown apart
    # 54 aggregations left at 1/s; 5.94 virtual hours left at 36 virtual s per wall s is much further
    assert p.eta_s == pytest.approx(54.0)


def test_the_eta_rate_runs_from_after_the_initial_model_and_steadies():
    """The rate is taken over every checkpoint after the initial model's (compilation is before it):
    a few fast aggregations at the end move the ETA by their share of the run, not to their own rate."""
    clock = FakeClock()
    progress = RunProgress(TINY.with_overrides({"max_aggregations": 1000}), enabled=False, clock=clock)
    progress.update(checkpoint(0, 0.0, 0.2))
    clock.now = 100.0  # compilation: 100 s before the first aggregation
    for v in range(1, 30):  # 10 s each for 20, then 1 s each
        clock.now = 100.0 + (10.0 * (v - 1) if v <= 20 else 190.0 + (v - 20))
        p = progress.update(checkpoint(v, 0.5 * v / 29, 0.2))
    wall = clock.now - 100.0
    # the virtual-time cap is nearer: 5.5 h left at (0.5 - 0.5/29) h over the wall seconds since checkpoint 1
    assert p.eta_s == pytest.approx((6 - 0.5) / ((0.5 - 0.5 / 29) / wall))
    recent = RunProgress(TINY.with_overrides({"max_aggregations": 1000}), enabled=False, clock=clock, recent=3)
    for v in range(1, 30):  # the last 3 only, when asked
        clock.now = 10.0 * v if v < 20 else 190.0 + (v - 19)
        q = recent.update(checkpoint(v, 0.5 * v / 29, 0.2))
    assert q.eta_s == pytest.approx((6 - 0.5) / (1 / 58))
    for v in range(30, 50):  # 20 checkpoints at 0.9: the window's mean passes the target
        clock.now = 300.0 + v
        p = progress.update(checkpoint(v, 0.5 + 0.001 * v, 0.9))
    assert p.accuracy == 1.0 and p.reached and p.eta_s is None  # reached: nothing to estimate
    assert p.budget < 0.1  # the budget's share stays what it is
    assert "(target 0.5, reached)" in progress.describe(checkpoint(49, 0.549, 0.9))


def test_progress_without_a_target_or_a_time_limit():
    clock = FakeClock()
    sc = TINY.with_overrides({"target_accuracy": "none", "max_virtual_hours": "inf"})
    progress = RunProgress(sc, enabled=False, clock=clock)
    for v in range(5):
        clock.now = 2.0 * v
        p = progress.update(checkpoint(v, 0.1 * v, 0.3))
    assert p.accuracy is None and p.virtual_time is None
    assert p.budget == pytest.approx(4 / 60)
    assert p.eta_s == pytest.approx(56 * 2.0)
    assert "agg 4/60" in progress.describe(checkpoint(4, 0.4, 0.3))


def test_progress_of_a_run_that_goes_on_past_its_target():
    """``stop_at_target=false`` (drifting streams): the target ends nothing; the postfix still shows
    the accuracy against it."""
    clock = FakeClock()
    progress = RunProgress(TINY.with_overrides({"stop_at_target": "false"}), enabled=False, clock=clock)
    for v in range(3):
        clock.now = float(v)
        p = progress.update(checkpoint(v, 0.06 * v, 0.9))
    assert p.accuracy is None and p.budget == pytest.approx(max(2 / 60, 0.12 / 6))
    assert "(target 0.5, runs on past it)" in progress.describe(checkpoint(2, 0.12, 0.9))


def test_progress_bar_draws_the_budget_and_the_accuracy_apart(capsys):
    progress = RunProgress(TINY, enabled=True, clock=FakeClock(), terminal=True)
    progress(checkpoint(3, 0.02, 0.25))
    progress.close()
    err = capsys.readouterr().err
    assert "agg 3/60" in err and "acc 0.250 (target 0.5)" in err and "0.02 of 6 virtual h" in err
    assert "of the budget" in err and "ETA -" in err  # one checkpoint: no rate, no ETA


def test_progress_never_goes_backwards_and_an_untrained_model_is_no_progress():
    """The share shown is the budget used: accuracy near the target moves nothing (a curve that sits
    just below its target for hours once showed 97% throughout)."""
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=False, clock=clock)
    shown, etas = [], []
    for v, acc in enumerate([0.1, 0.4, 0.45, 0.2, 0.1, 0.05, 0.3, 0.48, 0.49, 0.49]):
        clock.now = float(v)
        p = progress.update(checkpoint(v, 0.001 * v, acc))
        shown.append(p.shown)
        etas.append(p.eta_s)
    assert shown == sorted(shown) and shown == pytest.approx([v / 60 for v in range(10)])
    assert etas[:3] == [None, None, None] and etas[3] is not None  # three checkpoints after the initial one


def test_progress_lines_start_at_zero_and_the_last_is_printed_once(capsys):
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=True, clock=clock, every_s=0.0, terminal=False)
    progress(checkpoint(0, 0.0, 0.1))
    clock.now = 1.0
    progress(checkpoint(6, 0.01, 0.3))
    clock.now = 2.0  # later: close() must not print the same checkpoint again
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{progress.label}:   0% of the budget") and "agg 0/60" in lines[0]
    assert lines[1].startswith(f"{progress.label}:  10% of the budget") and "acc 0.200 (target 0.5)" in lines[1]


def test_progress_outside_a_terminal_prints_plain_periodic_lines(capsys):
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=True, clock=clock, every_s=10.0, terminal=False)
    for v in range(30):  # one checkpoint per wall second: a line at 0, 10, 20 s and one at the end
        clock.now = float(v)
        progress(checkpoint(v, 0.001 * v, 0.1))
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and all("% of the budget" in x and "\x1b" not in x and "\r" not in x for x in lines)
    assert "agg 29/60" in lines[-1]


def test_plot_redraws_a_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    run(TINY.with_overrides({"max_aggregations": 2, "target_accuracy": "none"}), out, plot=False)
    assert not (out / "accuracy.png").exists()
    assert main(["plot", str(out)]) == 0
    assert (out / "accuracy.png").stat().st_size > 0
    assert "accuracy.png" in capsys.readouterr().out


def test_plot_redraws_a_moved_compare_folder(tmp_path, capsys):
    out = tmp_path / "cmp"
    base = TINY.with_overrides({"max_aggregations": 2, "target_accuracy": "none"})
    rows = run_matrix(base, ["felix", "oort-async"], ["avail100"], [0], out, progress=True, log=lambda _: None,
                      plot=False)
    assert "of the budget" in capsys.readouterr().err  # plain progress lines (no bar: not a terminal)
    moved = tmp_path / "elsewhere"
    shutil.move(str(out), str(moved))  # summary.csv still names the old run folders
    back = rows_from_summary_csv(moved)
    for row, again in zip(rows, back):
        for key in SUMMARY_COLUMNS:
            if key in row:
                want, got = row[key], again[key]
                assert got == pytest.approx(want) if isinstance(want, float) and math.isfinite(want) else got == want
        assert again["run_dir"].startswith(str(moved))
    assert main(["plot", str(moved)]) == 0
    for name in ("accuracy.png", "bytes.png", "cdfs.png"):
        assert (moved / name).stat().st_size > 0
    assert len(list((moved / "runs").glob("*/accuracy.png"))) == 2


def test_plot_refuses_a_folder_without_results(tmp_path):
    with pytest.raises(SystemExit, match="neither a run folder"):
        main(["plot", str(tmp_path)])


def test_an_accuracy_curve_runs_to_the_runs_end_not_its_last_checkpoint(tmp_path):
    """A stalled run (last checkpoint at 0.5 h, stopped at 2 h) stays flat to 2 h, then NaN."""
    import numpy as np

    from felix_jax.experiment.compare import accuracy_curves

    (tmp_path / "metrics.csv").write_text("time_s,hours,accuracy\n0,0.0,0.1\n1800,0.5,0.2\n")
    row = {"strategy": "s", "availability": "a", "run_dir": str(tmp_path), "_summary": {"end_time_s": 7200.0}}
    grid = np.array([0.0, 0.25, 0.5, 1.9, 2.0, 2.5])
    np.testing.assert_array_equal(accuracy_curves([row], "s", "a", grid)[0], [0.1, 0.1, 0.2, 0.2, 0.2, np.nan])
    row["_summary"] = {}  # no end recorded: the last checkpoint
    np.testing.assert_array_equal(accuracy_curves([row], "s", "a", grid)[0], [0.1, 0.1, 0.2, np.nan, np.nan, np.nan])


# ------------------------------------------------------------------ ETAs that honour the caps
def test_a_cells_eta_honours_its_wall_budget():
    """A cell that ``cell_budget_s`` stops after 100 s of wall time: before any rate its ETA is that
    bound (``<=``), and once it has a rate, the nearer of its caps and the wall budget's end."""
    clock = FakeClock()
    sc = TINY.with_overrides({"target_accuracy": "none"})  # 60 aggregations; no target to end it sooner
    progress = RunProgress(sc, enabled=False, clock=clock, wall_budget_s=100.0)
    clock.now = 10.0
    p = progress.update(checkpoint(0, 0.0, 0.1))
    assert p.eta_s == pytest.approx(90.0) and progress.describe(checkpoint(0, 0.0, 0.1)).endswith("ETA <= 1:30")
    for v in range(1, 4):  # an aggregation every 10 s: 57 left take 570 s, past the wall budget's end at 100 s
        clock.now = 10.0 + 10.0 * v
        p = progress.update(checkpoint(v, 0.01 * v, 0.1))
    assert p.eta_s == pytest.approx(60.0) and progress.describe(checkpoint(3, 0.03, 0.1)).endswith("ETA 1:00")
    fast = RunProgress(sc, enabled=False, clock=clock, wall_budget_s=1e6)  # the cap comes first: its rate's ETA
    for v in range(0, 4):
        clock.now = 100.0 + v
        p = fast.update(checkpoint(v, 0.01 * v, 0.1))
    assert p.eta_s == pytest.approx(57.0)


def test_the_comparison_eta_honours_workers_the_cell_budget_and_the_comparisons_budget():
    from felix_jax.experiment.progress import budget_share, comparison_eta

    # nothing finished yet: 6 cells, 2 at a time, each stopped by 600 s of wall time: at most 3 x 600 s
    line = comparison_eta([], 6, workers=2, cell_budget_s=600.0)
    assert "comparison ETA <= 30:00" in line and "6 cells left, each stopped by 10:00 of wall time, 2 at a time" in line
    assert comparison_eta([], 6, workers=2) == ""  # no basis at all
    # two finished cells of 100 s and 200 s at half their budget: 4 left, 2 at a time, 150 s each = 300 s;
    # to their caps 300 s each, but the cell budget stops each at 250 s: at most 2 x 250 s
    line = comparison_eta([100.0, 200.0], 4, shares=[0.5, 0.5], workers=2, cell_budget_s=250.0)
    assert "comparison ETA 5:00" in line and "2 at a time" in line and "<= 8:20 if each runs to its cap" in line
    # the comparison's budget: no cell starts after 200 s, so 10 cells of 100 s end by 200 + 100 s
    line = comparison_eta([100.0], 10, starts_left_s=200.0)
    assert "comparison ETA 5:00" in line and "no cell starts after 3:20" in line
    # a cell the wall budget cut ran as long as it may: it used its whole budget
    assert budget_share(TINY, {"stop_reason": "wall_budget", "aggregations": 6, "end_time_s": 60.0}) == 1.0


def test_a_slow_file_written_after_the_run_is_said_and_a_quick_one_is_not(capsys):
    import time

    progress = RunProgress(TINY, enabled=True, terminal=False)
    with progress.writing("quick.png", slow_s=5.0):
        pass
    with progress.writing("participation.png (100,000 clients)", slow_s=0.01):
        time.sleep(0.2)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].endswith(": writing participation.png (100,000 clients) ...")
    assert " participation.png (100,000 clients) written in " in err[1]
    with RunProgress(TINY, enabled=False).writing("x.png", slow_s=0.0):  # no display: nothing said
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


def test_the_bar_is_drawn_from_the_first_checkpoint_not_before(capsys):
    """A run refused while it is built (its memory budget) prints its one line and no empty bar."""
    progress = RunProgress(TINY, enabled=True, clock=FakeClock(), terminal=True)
    assert progress.bar is None and capsys.readouterr().err == ""
    progress.close()
    assert capsys.readouterr().err == ""
