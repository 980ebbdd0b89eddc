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
    assert first.aggregations == 0 and first.virtual_time == 0
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
    assert p.overall == pytest.approx(p.accuracy)  # the nearest of the three
    # 54 aggregations left at 1/s; 5.94 virtual hours left at 36 virtual s per wall s is much further
    assert p.eta_s == pytest.approx(54.0)


def test_progress_eta_follows_the_recent_rate_and_the_window_is_the_stop_rules():
    clock = FakeClock()
    progress = RunProgress(TINY.with_overrides({"max_aggregations": 1000}), enabled=False, clock=clock, recent=3)
    for v in range(30):  # slow at first (10 s each), then 1 s each: the ETA uses only the last 3 samples
        clock.now = 10.0 * v if v < 20 else 190.0 + (v - 19)
        p = progress.update(checkpoint(v, 0.5 * v / 29, 0.2))
    # the virtual-time cap is nearer: 5.5 h left at (1/58 h per wall s)
    assert p.eta_s == pytest.approx((6 - 0.5) / (0.5 / 29))
    assert p.accuracy == pytest.approx(0.2 / 0.5) and p.overall == p.accuracy
    for v in range(30, 50):  # 20 checkpoints at 0.9: the window's mean passes the target
        clock.now = 200.0 + v
        p = progress.update(checkpoint(v, 0.5 + 0.001 * v, 0.9))
    assert p.accuracy == 1.0 and p.overall == 1.0 and p.eta_s is None  # reached: nothing to estimate


def test_progress_without_a_target_or_a_time_limit():
    clock = FakeClock()
    sc = TINY.with_overrides({"target_accuracy": "none", "max_virtual_hours": "inf"})
    progress = RunProgress(sc, enabled=False, clock=clock)
    for v in range(5):
        clock.now = 2.0 * v
        p = progress.update(checkpoint(v, 0.1 * v, 0.3))
    assert p.accuracy is None and p.virtual_time is None
    assert p.overall == pytest.approx(4 / 60)
    assert p.eta_s == pytest.approx(56 * 2.0)
    assert "agg 4/60" in progress.describe(checkpoint(4, 0.4, 0.3))


def test_progress_of_a_run_that_goes_on_past_its_target():
    """``stop_at_target=false`` (drifting streams): the target ends nothing, so it is no part of the
    progress; the postfix still shows the accuracy against it."""
    clock = FakeClock()
    progress = RunProgress(TINY.with_overrides({"stop_at_target": "false"}), enabled=False, clock=clock)
    for v in range(3):
        clock.now = float(v)
        p = progress.update(checkpoint(v, 0.06 * v, 0.9))
    assert p.accuracy is None and p.overall == pytest.approx(max(2 / 60, 0.12 / 6))
    assert "-> 0.5" in progress.describe(checkpoint(2, 0.12, 0.9))


def test_progress_bar_draws_the_stop_rule(capsys):
    progress = RunProgress(TINY, enabled=True, clock=FakeClock(), terminal=True)
    progress(checkpoint(3, 0.02, 0.25))
    progress.close()
    err = capsys.readouterr().err
    assert "agg 3/60" in err and "acc 0.250 -> 0.5" in err and "0.02 of 6 virtual h" in err
    assert "to the stop rule" in err and "ETA -" in err  # one checkpoint: no rate, no ETA


def test_progress_never_goes_backwards_and_gives_no_eta_without_a_basis():
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=False, clock=clock)
    shown, etas = [], []
    for v, acc in enumerate([0.1, 0.4, 0.45, 0.2, 0.1, 0.05, 0.3, 0.5, 0.6, 0.6]):  # accuracy falls, recovers
        clock.now = float(v)
        p = progress.update(checkpoint(v, 0.001 * v, acc))
        shown.append(p.shown)
        etas.append(p.eta_s)
    assert shown == sorted(shown)  # monotone although the accuracy (and its window mean) fell
    overall = [0.0, 0.25 / 0.5, (0.95 / 3) / 0.5]  # 0 at t = 0, then the window means over the target
    assert shown[:3] == pytest.approx(overall) and shown[3] == pytest.approx(overall[2])
    assert etas[0] is None and etas[1] is None and etas[2] is not None


def test_progress_starts_at_zero_until_the_first_checkpoint_after_t0(capsys):
    """The initial model's accuracy (0.1 of a 0.5 target) is no progress: the first line says 0%,
    not 20%; the next checkpoint counts it in the window's mean, as the stop rule does."""
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=True, clock=clock, every_s=0.0, terminal=False)
    progress(checkpoint(0, 0.0, 0.1))
    assert progress.latest.shown == 0.0 and progress.latest.accuracy == pytest.approx(0.2)
    clock.now = 1.0
    progress(checkpoint(1, 0.01, 0.3))
    assert progress.latest.shown == pytest.approx((0.1 + 0.3) / 2 / 0.5)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{progress.label}:   0% to the stop rule") and "agg 0/60" in lines[0]
    assert "40% to the stop rule" in lines[1]


def test_progress_outside_a_terminal_prints_plain_periodic_lines(capsys):
    clock = FakeClock()
    progress = RunProgress(TINY, enabled=True, clock=clock, every_s=10.0, terminal=False)
    for v in range(30):  # one checkpoint per wall second: a line at 0, 10, 20 s and one at the end
        clock.now = float(v)
        progress(checkpoint(v, 0.001 * v, 0.1))
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and all("% to the stop rule" in x and "\x1b" not in x and "\r" not in x for x in lines)
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
    assert "to the stop rule" in capsys.readouterr().err  # plain progress lines (no bar: not a terminal)
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
