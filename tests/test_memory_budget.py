"""The engine's memory budget (cohort/budget.py, fleet/executor.py): flushes sized by what the delta store
may hold, computed in the order results are needed, results unchanged; a budget too small for the run's
working set refused in one line before the run."""

from __future__ import annotations

import hashlib
import math
import re

import jax
import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.cohort.budget import GB, BudgetError, CallMemory, MemoryPlan
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet.executor import LazyExecutor, TrainOutcome, _Pending
from felix_jax.cohort import VersionStore
from felix_jax.cohort.store import page_rows_for
from felix_jax.options import OptionError

# 200 clients of the tiny MLP, 60 tasks in flight: small enough for the default tier, and an engine's budget
# of 0.07 GB (beside the data, one call of 8 tasks and an 8-row page of 0.79 MB updates, room for about 50
# more) cannot hold every task in flight
SCALED = dict(num_clients=200, concurrency=60, aggregation_goal=6, max_aggregations=6, target_accuracy=None)


def _digest(tree) -> str:
    return hashlib.sha1(b"".join(np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree))).hexdigest()


@pytest.fixture
def engine_only(monkeypatch):
    """The budget as the engine's alone: these tests are about what the engine holds under a budget, in a
    test process whose resident memory is not a run's (the rest of the process is not counted)."""
    from felix_jax.experiment import build

    monkeypatch.setattr(build, "process_share", lambda *args, **kwargs: ())


def _run(**overrides):
    sim = build_simulator(get_preset("tiny").with_overrides({**SCALED, **overrides}))
    used = []
    write = sim.executor.deltas.write

    def counted(rows, real):  # the rows the store holds after each call's write, over what the budget allows
        slots = write(rows, real)
        ex = sim.executor
        used.append(ex.deltas.num_used - (ex.memory.max_rows(ex.store.capacity) if ex.bounded else 0))
        return slots

    sim.executor.deltas.write = counted
    record = sim.run()
    return sim, record, max(used)


def test_a_bounded_budget_changes_no_result_and_holds_what_it_allows(engine_only):
    free, free_rec, free_peak = _run()
    tight, tight_rec, tight_peak = _run(memory_budget_gb=0.07)
    assert not free.executor.bounded and tight.executor.bounded
    plan = tight.executor.memory
    # what the budget allows: at most max_rows delta rows beside the live versions, never all 60 in flight
    assert tight_peak <= 0, tight_peak
    assert plan.max_rows(8) < SCALED["concurrency"] <= free_peak
    # the call was measured (XLA's memory analysis): at least its padded bucket of updates, at a size that fits
    assert plan.call.measured and plan.call.output_bytes >= plan.call_tasks * plan.row_bytes
    assert tight.engine.max_tasks_per_call == plan.call_tasks <= 256
    assert tight.executor.largest_flush < free.executor.largest_flush
    # the same dispatches, the same model, the same curve
    assert tight.acct.dispatch_log == free.acct.dispatch_log
    assert _digest(tight.params) == _digest(free.params)
    assert [c.accuracy for c in tight_rec.checkpoints] == [c.accuracy for c in free_rec.checkpoints]


def _parts(message: str) -> tuple[float, list[float]]:
    """A refusal's minimum and its parts, in MB, read back from its line."""
    need = float(re.search(r"needs at least ([\d,.]+) MB", message).group(1).replace(",", ""))
    listed = message.split("MB an update): ", 1)[1].split("; the budget is", 1)[0]
    return need, [float(v.replace(",", "")) for v in re.findall(r" ([\d,]+\.\d) MB(?:,|$)", listed)]


def test_a_budget_that_cannot_hold_the_buffer_is_one_line_before_the_run(tmp_path, capsys):
    with pytest.raises(BudgetError) as caught:
        build_simulator(get_preset("tiny").with_overrides({**SCALED, "aggregation_goal": 60, "memory_budget_gb": 0.05,
                                                           "aggregation_buffer": "always"}))
    message = str(caught.value)
    assert "\n" not in message
    for text in ("concurrency=60", "aggregation_goal=60", "needs at least", "for mlp", "MB an update",
                 "memory_budget_gb=0.05", "the jax/XLA runtime (measured)", "compilations during the run",
                 "the figures", "60 buffered updates and two copies at aggregation", "one device call of 8 tasks",
                 "a delta-store page of 8 updates"):
        assert text in message, message
    # every part named, and they add up to the minimum said (each rounded to 0.1 MB; parts under 0.05 MB unsaid)
    need, parts = _parts(message)
    assert len(parts) >= 10 and sum(parts) == pytest.approx(need, abs=0.05 * (len(parts) + 8))
    # the command line: one line, exit status 1, no results folder, and no header before it
    out = tmp_path / "run"
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["run", "--preset", "tiny", "--quiet", "--set", "aggregation_goal=60", "--set", "concurrency=60",
              "--set", "num_clients=200", "--set", "memory_budget_gb=0.05", "--out", str(out)])
    assert isinstance(info.value.code, str) and "\n" not in info.value.code
    assert "needs at least" in info.value.code and "memory_budget_gb=0.05" in info.value.code
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == ""  # the refusal is the only line (SystemExit prints it)
    assert not out.exists()


def test_the_rest_of_the_process_is_counted_before_the_engine(monkeypatch):
    from felix_jax.experiment import build

    sc = get_preset("tiny").with_overrides({"num_clients": 1000, "concurrency": 100, "max_aggregations": 10})
    trace = np.zeros(1000, np.float64)  # 8,000 bytes; a view of it counts nothing more
    monkeypatch.setattr(build, "resident_bytes", lambda: 300 * 2 ** 20)
    parts = dict(build.process_share(sc, buffer_rows=2, fixed_bytes=10 * 2 ** 20,
                                     population={"the availability trace": (trace, trace[:10])}))
    # measured: the resident memory less the data on the device and the population built so far
    assert parts["the jax/XLA runtime (measured)"] == 300 * 2 ** 20 - 10 * 2 ** 20 - 8000
    assert parts["the availability trace"] == 8000
    assert parts["the server view and bookkeeping of 1,000 clients"] == 1000 * build.CLIENT_OVERHEAD_BYTES
    assert parts["100 tasks in flight"] == 100 * build.TASK_BYTES
    assert parts["the run's records of up to 20 updates"] == 20 * build.RECORD_BYTES  # 10 aggregations of K = 2
    assert parts["the figures"] == (build.FIGURE_BYTES + 1000 * build.FIGURE_CLIENT_BYTES
                                    + 20 * build.FIGURE_UPDATE_BYTES)
    monkeypatch.setattr(build, "resident_bytes", lambda: None)  # not measurable: the engine's budget alone
    assert build.process_share(sc, 2, 0, {}) == ()


def test_summary_records_the_peak_beside_the_budget_and_a_peak_over_it_warns(tmp_path, monkeypatch):
    import json

    from felix_jax.experiment import runner

    sc = get_preset("tiny").with_overrides({"max_aggregations": 1, "target_accuracy": None,
                                            "memory_budget_gb": 40})
    runner.run(sc, out_dir=tmp_path / "a", plot=False)
    memory = json.loads((tmp_path / "a" / "summary.json").read_text())["memory"]
    assert memory["memory_budget_gb"] == 40 and 0.05 < memory["peak_rss_gb"] < 40
    assert memory["over_budget"] is False and memory["peak_tolerance"] == 0.10
    assert dict(memory["besides_mb"])["the jax/XLA runtime (measured)"] > 50  # the process's share, measured
    monkeypatch.setattr(runner, "peak_resident_bytes", lambda: int(45 * GB))  # 12.5% over: past the 10%
    runner.run(sc, out_dir=tmp_path / "b", plot=False)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["memory"]["peak_rss_gb"] == 45 and summary["memory"]["over_budget"] is True
    assert any("peak resident memory 45.00 GB, 12% over the memory budget of 40.00 GB" in w
               for w in summary["warnings"]), summary["warnings"]


def test_a_peak_warns_past_the_tolerance_only():
    from felix_jax.cohort.budget import peak_warning

    assert peak_warning(int(1.1 * GB), GB, "memory_budget_gb=1") is None  # at the tolerance: said nothing
    assert "11% over" in peak_warning(int(1.11 * GB), GB, "memory_budget_gb=1")
    assert peak_warning(int(1.05 * GB), GB, "x", tolerance=0.01) is not None
    assert peak_warning(None, GB, "x") is None  # not measured


@pytest.mark.parametrize("value", [0, -1.0, math.nan])
def test_a_budget_must_be_a_positive_number(value):
    with pytest.raises(OptionError, match="memory_budget_gb"):
        get_preset("tiny").with_overrides({"memory_budget_gb": value})


def test_an_infinite_budget_is_unbounded():
    from felix_jax.cohort.budget import UNBOUNDED_BYTES, resolve_budget

    assert get_preset("tiny").with_overrides({"memory_budget_gb": "inf"}).memory_budget_gb == math.inf
    assert resolve_budget(math.inf) == (UNBOUNDED_BYTES, "memory_budget_gb=inf")


def test_the_default_budget_holds_a_small_run_unbounded_and_says_where_it_comes_from():
    sim = build_simulator(get_preset("tiny").with_overrides({"max_aggregations": 1}))
    plan = sim.executor.memory
    assert not plan.bounded and plan.call is None  # nothing measured, every pending task at each flush
    assert "of this machine's" in plan.source and plan.budget_bytes > 0.1 * GB
    assert plan.to_dict()["memory_budget_source"] == plan.source


def _executor(sim, rows: int | None) -> LazyExecutor:
    """A fresh executor on ``sim``'s engine whose budget holds exactly ``rows`` updates (None: unbounded)."""
    store = VersionStore(sim.params, capacity=8)
    row = _row_bytes(sim.params)
    plan = None if rows is None else MemoryPlan(
        budget_bytes=(8 + rows + page_rows_for(row)) * row, source="test", row_bytes=row, fixed_bytes=0, buffer_rows=0,
        call=CallMemory(8, 0, 0, True), call_tasks=8, bounded=True)
    ex = LazyExecutor(sim.engine, store, plan)
    ex.publish(0, sim.params)
    return ex


def _row_bytes(params) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))


def _same(ex_a, a: TrainOutcome, ex_b, b: TrainOutcome):
    assert (a.first_batch, a.all_steps, a.num_steps) == (b.first_batch, b.all_steps, b.num_steps)
    assert _digest(ex_a.take_deltas([a])) == _digest(ex_b.take_deltas([b]))


def test_results_computed_ahead_are_evicted_for_a_task_due_sooner_and_computed_again_the_same():
    sim = build_simulator(get_preset("tiny").with_overrides({"max_aggregations": 1}))
    bounded, free = _executor(sim, rows=2), _executor(sim, rows=None)
    for ex in (bounded, free):
        for tid, client, need in ((0, 1, 10.0), (1, 2, 20.0), (2, 3, 30.0)):
            ex.submit(tid, client, 0, "train", need_s=need)
    first = bounded.result(0)  # room for two: tasks 0 and 1 (due first), task 2 stays pending
    assert bounded.num_pending == 1 and bounded.largest_flush == 2
    for ex in (bounded, free):
        ex.submit(3, 4, 0, "train", need_s=15.0)  # dispatched later, due before task 1
    sooner = bounded.result(3)  # the store is full (0 held, 1 ahead): task 1 goes back to pending
    assert bounded.evicted == 1 and 1 in bounded._pending
    later = bounded.result(1)  # computed again, over the budget by one rather than stalled
    last = bounded.result(2)
    for tid, got in ((0, first), (3, sooner), (1, later), (2, last)):
        _same(bounded, got, free, free.result(tid))
    assert bounded.deltas.num_used == free.deltas.num_used == 0


def test_a_task_far_from_its_reply_holds_its_start_version_not_an_update():
    sim = build_simulator(get_preset("tiny").with_overrides({"max_aggregations": 1}))
    ex = _executor(sim, rows=1)
    ex.submit(0, 1, 0, "train", need_s=10.0)
    ex.submit(1, 2, 0, "train", need_s=1e9)  # a client away for a long time
    ex.publish(1, sim.params)
    ex.result(0)
    assert 1 in ex._pending and ex.deltas.num_used == 1  # only the result needed now
    assert 0 in ex.store  # version 0 stays live for the pending task


def test_the_plans_row_count_by_hand():
    # 1,000-byte updates: a 256 MiB page holds 4,096 of them (the cap), 4,096,000 bytes
    plan = MemoryPlan(budget_bytes=5_000_000, source="test", row_bytes=1000, fixed_bytes=5000,
                      buffer_rows=4, call=CallMemory(8, 3000, 1000, True), call_tasks=8, bounded=True)
    # data 5,000 + call 3,000 + 1,000 + two copies of 4 updates 8,000 + a page 4,096,000
    assert plan.reserved_bytes == 4_113_000
    assert plan.max_rows(8) == (5_000_000 - 4_113_000) // 1000 - 8 == 879
    assert plan.max_rows(16) == 871  # each live version takes a row
    # not measured: the call guessed at its output twice over, 2 x 8 x 1,000
    guessed = MemoryPlan(5_000_000, "test", 1000, 5000, 4, None, 8, False)
    assert guessed.reserved_bytes == 5000 + 16_000 + 8000 + 4_096_000
    assert plan.to_dict()["max_update_rows"] == 879 and plan.to_dict()["memory_budget_gb"] == 0.005
    # the rest of the process counted first, and a page of 64 rows: 500,000 + 64,000 reserved besides the rest
    shared = MemoryPlan(5_000_000, "test", 1000, 5000, 4, CallMemory(8, 3000, 1000, True), 8, True,
                        besides=(("runtime", 400_000), ("figures", 100_000)), page_rows=64)
    assert shared.reserved_bytes == 500_000 + 5000 + 4000 + 8000 + 64_000
    assert shared.max_rows(8) == (5_000_000 - 581_000) // 1000 - 8 == 4411
    from felix_jax.cohort.budget import minimum_parts

    parts = minimum_parts(shared)  # the least budget: the reserve and the rows the run needs, which add up
    assert sum(b for _, b in parts) == shared.reserved_bytes + (8 + 4 + 8) * 1000


def test_flush_max_tasks_caps_the_results_held_ahead_over_several_flushes():
    sim = build_simulator(get_preset("tiny").with_overrides({"max_aggregations": 1}))
    row = _row_bytes(sim.params)
    plan = MemoryPlan(budget_bytes=100 * GB, source="test", row_bytes=row, fixed_bytes=0, buffer_rows=0,
                      call=None, call_tasks=8, bounded=False, flush_tasks=2)
    ex = LazyExecutor(sim.engine, VersionStore(sim.params, capacity=8), plan)
    ex.publish(0, sim.params)
    for tid, need in enumerate((40.0, 10.0, 30.0, 20.0, 50.0)):
        ex.submit(tid, tid + 1, 0, "train", need_s=need)
    ex.result(1)  # due first: it and the next due (task 3) are computed, two held ahead
    assert sorted(ex._done) == [3] and ex.num_pending == 3 and ex.largest_flush == 2
    ex.submit(5, 6, 0, "train", need_s=15.0)  # due before task 3, which is still held
    ex.result(5)  # one slot free under the cap: only the task needed now
    assert sorted(ex._done) == [3] and ex.num_pending == 3
    ex.result(3)
    ex.result(2)  # the cap free again: tasks 2 and 0 (due 30 and 40), task 4 (due 50) waits
    assert sorted(ex._done) == [0] and list(ex._pending) == [4]


def test_a_pending_record_from_an_older_snapshot_is_due_last():
    p = _Pending(5, 1, 0, "train", 0.0)
    object.__delattr__(p, "need_s")  # as unpickled from a record written before need_s existed
    assert p.due == (math.inf, 5)


@pytest.mark.slow
def test_a_bounded_run_killed_and_resumed_equals_the_uninterrupted_one(tmp_path, engine_only):
    from tests.test_snapshot import assert_same_run, killed_and_resumed

    sc = get_preset("tiny").with_overrides({**SCALED, "memory_budget_gb": 0.07})
    whole = build_simulator(sc)
    record = whole.run()
    assert whole.executor.bounded and whole.executor.largest_flush < SCALED["concurrency"]
    assert_same_run(record, killed_and_resumed(sc, tmp_path / "snapshot", kill_at_version=4, every=2))
