"""The per-event log (events.csv) and the participation statistics of summary.json."""

import csv
import json
import math
import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.event_log import EVENT_COLUMNS, gini, jain, participation, top_share
from felix_jax.experiment.runner import run
from tests.test_fleet import ALWAYS2, T, U, make_sim, trace_of


def test_fairness_indices_by_hand():
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)  # sum (2i - 5) x_(i) / (4 * 4) = 3 * 4 / 16
    assert gini([1, 1, 1, 1]) == pytest.approx(0.0) and gini([0, 0]) is None
    assert jain([0, 0, 0, 4]) == pytest.approx(0.25) and jain([2, 2]) == pytest.approx(1.0)
    assert jain([1, 3]) == pytest.approx(16 / (2 * 10))
    assert top_share([0, 0, 0, 4]) == pytest.approx(1.0)  # ceil(0.4) = 1 client holds all
    assert top_share(list(range(1, 21))) == pytest.approx((20 + 19) / 210)  # top 2 of 20


def test_participation_counts_the_whole_population():
    events = [(1.0, "aggregated", 0, "train", 0, 0, 1.0, 2), (2.0, "aggregated", 0, "train", 1, 0, 1.0, 2),
              (2.0, "aggregated", 2, "train", 1, 0, 1.0, 2), (2.0, "aggregation", -1, "", 2, -1, None, -1)]
    p = participation(events, 4)  # updates per client [2, 0, 1, 0]
    assert p["clients_trained"] == 2
    assert p["participation_gini"] == pytest.approx(gini([2, 0, 1, 0]))
    assert p["participation_jain"] == pytest.approx(9 / (4 * 5))


def test_simulator_logs_every_event_by_hand():
    # c = 2, K = 1, 10 s and 25 s tasks (test_fleet's staleness example): 7 aggregations
    sim = make_sim(ALWAYS2, [10.0, 25.0], max_aggregations=7)
    rec = sim.run()
    rows = rec.accounting.events
    kinds = [r[1] for r in rows]
    assert kinds.count("aggregation") == 7 and kinds.count("aggregated") == 7
    assert kinds.count("dispatch") == rec.accounting.dispatched_train
    assert [r[5] for r in rows if r[1] == "aggregated"] == list(rec.accounting.staleness) == [0, 0, 2, 1, 0, 2, 1]
    assert [r[4] for r in rows if r[1] == "aggregation"] == list(range(1, 8))
    first_reply = next(r for r in rows if r[1] == "reply")
    assert first_reply[:6] == (10.0, "reply", 0, "train", 0, 0) and first_reply[7] == int(T)


def test_an_interrupted_task_logs_its_clients_leave_and_return():
    tr = trace_of([(0, T), (5, U), (50, T)], [(0, T)])
    rec = make_sim(tr, [10.0, 100.0], max_aggregations=1, max_s=1000.0).run()
    rows = [r for r in rec.accounting.events if r[2] == 0]
    assert [(r[0], r[1]) for r in rows[:3]] == [(0.0, "dispatch"), (5.0, "leave"), (50.0, "return")]
    assert rows[1][7] == int(U) and rows[2][7] == int(T)
    assert next(r for r in rows if r[1] == "reply")[0] == 55.0  # resumed: 5 s before, 5 s after


def test_run_folder_holds_events_csv_and_summary_the_participation(tmp_path):
    sc = get_preset("tiny").with_overrides({"strategy": "felix", "availability": "avail50", "max_aggregations": "8",
                                            "target_accuracy": "none"})
    result = run(sc, out_dir=tmp_path, plot=False)
    with open(tmp_path / "events.csv") as f:
        table = list(csv.reader(f))
    assert tuple(table[0]) == EVENT_COLUMNS
    times = [float(r[0]) for r in table[1:]]
    assert times == sorted(times) and times[-1] <= result.record.end_time_s
    assert sum(r[1] == "aggregation" for r in table[1:]) == 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert 1 <= summary["clients_trained"] <= 12 and 0 <= summary["participation_gini"] < 1
    assert 1 / 12 <= summary["participation_jain"] <= 1 and 0 < summary["participation_top10_share"] <= 1


def test_run_figures_are_titled_with_strategy_regime_and_seed_and_participation_is_drawn(tmp_path):
    from felix_jax.experiment.event_log import read_event_log
    from felix_jax.experiment.results import run_title

    assert run_title({"scenario": {"strategy": "felix", "availability": "/data/my/trace.npz", "seed": 2}}) == \
        "felix | trace.npz | seed 2"
    sc = get_preset("tiny").with_overrides({"strategy": "fedbuff", "max_aggregations": "4", "target_accuracy": "none"})
    result = run(sc, out_dir=tmp_path, plot=True)
    assert (tmp_path / "participation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_event_log(tmp_path / "events.csv")  # round-trips what the run logged, up to its end
    held = run(sc).record  # without a folder, the rows are held in memory
    logged = [r for r in held.accounting.events if r[0] <= held.end_time_s]
    assert result.record.accounting.events == [] and len(rows) == len(logged)
    assert sorted(rows, key=lambda r: r[0]) == sorted(logged, key=lambda r: r[0])


def test_first_return_by_hand():
    from felix_jax.fleet import lifecycle

    tr = trace_of([(0, T), (5, U), (20, 1), (50, T)])  # leaves at 5, AVL_EVAL at 20, back to AVL_TRAIN at 50
    train, evals = frozenset({T}), frozenset({T, 1})
    assert lifecycle.first_return(tr, 0, 5.0, 100.0, train) == 50.0
    assert lifecycle.first_return(tr, 0, 5.0, 100.0, evals) == 20.0
    assert math.isinf(lifecycle.first_return(tr, 0, 5.0, 40.0, train))  # not back by the task's end


def _panel_texts(ax) -> str:
    return " ".join([ax.get_title(), *(t.get_text() for t in ax.texts)])


def test_participation_of_a_small_fleet_is_a_bar_per_client_and_a_mark_per_update():
    import numpy as np

    from felix_jax.experiment.event_log import _participation
    from felix_jax.experiment.figures.run import participation_axes

    counts = np.array([3, 0, 1, 0, 2, 5, 0, 0, 1, 1, 0, 4])
    clients = np.repeat(np.arange(12), counts)
    fig = participation_axes(counts, _participation(counts), np.linspace(0, 2, clients.size), clients, "t")
    left, right = fig.axes
    assert len(left.patches) == 12 and left.get_xlabel() == "clients, most updates first (rank)"
    assert [p.get_height() for p in left.patches] == sorted(counts, reverse=True)
    assert len(right.collections) == 1 and len(right.collections[0].get_offsets()) == counts.sum()
    assert "shown as" not in _panel_texts(left) + _panel_texts(right)


def test_participation_of_a_million_clients_is_drawn_as_histograms_and_says_so():
    """10^6 clients and 10^5 updates (a bar and a mark each took minutes at 10^5 and came out blank)."""
    import numpy as np

    from felix_jax.experiment.event_log import _participation
    from felix_jax.experiment.figures.run import MAX_CLIENT_BARS, participation_axes

    n = 1_000_000
    rng = np.random.default_rng(0)
    clients = rng.integers(0, n // 2, 100_000)  # the upper half and many more never trained
    clients[:50] = 7  # client 7 the most
    counts = np.bincount(clients, minlength=n)
    fig = participation_axes(counts, _participation(counts), rng.uniform(0, 3, clients.size), clients, "t")
    left, right = fig.axes[:2]
    assert len(left.patches) <= 61 < MAX_CLIENT_BARS  # a histogram's steps, no bar per client
    text = _panel_texts(left)
    assert "1,000,000 clients: shown as a histogram" in text and "of 1,000,000 clients" in text
    never = np.flatnonzero(counts == 0)  # ties at the bottom: how many, and the first ids
    assert "most: client 7 (50)" in text and f"fewest: {never.size:,} clients at 0 (client {never[0]}, " in text
    assert [t.get_text().split()[0] for t in left.get_legend().get_texts()] == ["P50", "P90", "P99"]
    assert "100,000 updates entering an aggregation: shown as a 2-D histogram" in right.get_title()
    assert not right.collections and len(right.images) == 1  # an image, no mark per update
