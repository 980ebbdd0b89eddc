"""Sweep batches (experiment/sweep.py, cohort/group.py): several experiments in one process, their
device work in shared calls, each experiment's results equal to its solo run's."""

import json
import os
import signal
import threading

import numpy as np
import pytest

from felix_jax.cohort.group import GroupError, SharedCohort
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator, run
from felix_jax.experiment.sweep import BatchCoordinator, SweepJob, plan_batches, run_sweep, share_key

# wall-clock and shared-call statistics, and memory (the process's peak and runtime share, measured): the only
# summary fields a batch may change
TIMING = {"host_seconds", "host_ms_per_event", "cohort", "xla_compilations", "batch", "selection_ms_mean",
          "memory"}

STREAM = {"stream.rate_per_hour": 60.0, "stream.drift": "surge", "stream.surge_classes": [3, 8],
          "stream.surge_new": True, "stream.start_hours": 0.01, "stream.duration_hours": 0.02}

# 3 strategies x 2 seeds on tiny, sync (oort) and async (felix, fedbuff), one with a client stream
CELLS = [("felix", 0, {}), ("felix", 1, {"availability": "avail50"}), ("oort", 0, {}),
         ("oort", 1, {"availability": "avail50"}), ("fedbuff", 0, STREAM), ("fedbuff", 1, {})]


def _scenarios(**extra):
    base = get_preset("tiny")
    return [base.with_overrides({"strategy": s, "seed": sd, **o, **extra}) for s, sd, o in CELLS]


def _comparable(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in TIMING}


class _SoloRuns:
    """The cells' solo runs, each made the first time a test reads it (``solo / "e3"``): the default
    tier's test reads three of the six."""

    def __init__(self, root):
        self.root, self.scenarios = root, _scenarios()

    def __truediv__(self, name):
        d = self.root / name
        if not (d / "summary.json").is_file():
            run(self.scenarios[int(name[1:])], d, plot=False)
        return d


@pytest.fixture(scope="module")
def solo(tmp_path_factory):
    return _SoloRuns(tmp_path_factory.mktemp("solo"))


@pytest.mark.slow  # six runs; the default tier checks a batch against the solo runs after a stop and resume
def test_a_batch_of_six_equals_the_six_solo_runs_byte_for_byte(solo, tmp_path):
    scs = _scenarios()
    assert len(plan_batches([SweepJob(sc) for sc in scs], 6)) == 1  # the stream shares the batch
    results = run_sweep([SweepJob(sc, tmp_path / f"e{i}") for i, sc in enumerate(scs)], batch=6, plot=False)
    for i in range(len(scs)):
        for name in ("metrics.csv", "events.csv"):  # each experiment streams its own log
            assert (tmp_path / f"e{i}" / name).read_bytes() == (solo / f"e{i}" / name).read_bytes(), (i, name)
        assert _comparable(tmp_path / f"e{i}") == _comparable(solo / f"e{i}"), i
        assert json.loads((solo / f"e{i}" / "config.json").read_text())["scenario"] == \
            json.loads((tmp_path / f"e{i}" / "config.json").read_text())["scenario"]
    batch = results[0].summary["batch"]
    assert batch["experiments"] == 6
    # the shared calls held more tasks than any experiment's own calls alone
    solo_sizes = [json.loads((solo / f"e{i}" / "summary.json").read_text())["cohort"]["train"]["mean_tasks_per_call"]
                  for i in range(6)]
    assert batch["train"]["mean_tasks_per_call"] > max(solo_sizes)
    assert batch["train"]["mean_experiments_per_call"] > 1.5
    assert results[4].summary["batch"]["test_calls"] >= 1 and results[4].summary["adaptation_lags"] is not None


def test_a_batch_stopped_by_a_signal_and_resumed_equals_an_uninterrupted_one(solo, tmp_path, monkeypatch):
    keep = (0, 2, 4)  # async FeLiX, sync Oort, FedBuff on a stream
    scs = {i: sc for i, sc in enumerate(_scenarios()) if i in keep}
    jobs = [SweepJob(sc, tmp_path / f"e{i}") for i, sc in scs.items()]
    # the signal comes at the 12th shared device request, and that request waits until the sweep has
    # taken the signal: every experiment is still running when it is asked to stop, however fast the machine
    handled = threading.Event()
    calls = {"n": 0}
    original_request, original_stop = BatchCoordinator._request, BatchCoordinator.request_stop

    def request(self, member, kind, payload):
        calls["n"] += 1
        if calls["n"] == 12:
            os.kill(os.getpid(), signal.SIGINT)
            assert handled.wait(30.0), "the sweep never took the signal"
        return original_request(self, member, kind, payload)

    def request_stop(self, reason):
        original_stop(self, reason)
        handled.set()

    monkeypatch.setattr(BatchCoordinator, "_request", request)
    monkeypatch.setattr(BatchCoordinator, "request_stop", request_stop)
    # SIGINT as a terminal delivers it: a suite started in the background (``cmd &``) runs with SIGINT
    # ignored, which the sweep then leaves ignored, as a shell's background job wants
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first = run_sweep(jobs, batch=3, plot=False, stop_on_signals=True, snapshot_every=5)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    stopped = [r for r in first if r is not None and r.summary["stop_reason"] == "interrupted"]
    assert len(stopped) == len(keep), [r.summary["stop_reason"] for r in first if r is not None]
    resumed = [SweepJob(sc, tmp_path / f"e{i}", resume=(tmp_path / f"e{i}" / "snapshot" / "LATEST").is_file()
                        and json.loads((tmp_path / f"e{i}" / "summary.json").read_text())["stop_reason"]
                        == "interrupted")
               for i, sc in scs.items()]
    run_sweep([j for j in resumed if j.resume], batch=3, plot=False)
    for i in scs:
        for name in ("metrics.csv", "events.csv"):  # each experiment streams its own log
            assert (tmp_path / f"e{i}" / name).read_bytes() == (solo / f"e{i}" / name).read_bytes(), (i, name)
        assert _comparable(tmp_path / f"e{i}") == _comparable(solo / f"e{i}"), i


def test_scenarios_that_cannot_share_form_separate_batches():
    base = get_preset("tiny")
    jobs = [SweepJob(base.with_overrides(o)) for o in
            ({}, {"seed": 1}, {"model": "cifar_cnn_tiny"}, {"strategy": "oort"}, {"num_test": 100},
             {"stream.rate_per_hour": 60.0, "stream.window_samples": 50}, {"learning_rate": 0.2})]
    batches = plan_batches(jobs, batch=16)
    # the model, the test subset and a stream with a count window each need their own batch; seed,
    # strategy and local-training settings share (other settings: separate calls of one flush)
    assert sorted(map(sorted, batches)) == [[0, 1, 3, 6], [2], [4], [5]]
    assert plan_batches(jobs[:2] + jobs[3:4], batch=2) == [[0, 1], [2]]
    assert share_key(jobs[0].scenario) == share_key(jobs[1].scenario)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        plan_batches(jobs, 0)


def test_engines_that_cannot_share_device_calls_are_refused():
    base = get_preset("tiny")
    a = build_simulator(base).engine
    b = build_simulator(base.with_overrides({"model": "cifar_cnn_tiny"})).engine
    with pytest.raises(GroupError, match="same model"):
        SharedCohort([a, b])
    c = build_simulator(base.with_overrides({"num_train": 500})).engine
    with pytest.raises(GroupError, match="same training data"):
        SharedCohort([a, c])
    group = SharedCohort([a, build_simulator(base.with_overrides({"seed": 3})).engine])
    assert group.offsets.tolist() == [0, 12] and group.data.num_clients == 24
    assert np.array_equal(np.asarray(group.data.counts[:12]), a.counts)


def test_an_experiment_that_fails_does_not_hang_its_batch(tmp_path):
    base = get_preset("tiny")
    jobs = [SweepJob(base, tmp_path / "ok"), SweepJob(base.with_overrides({"num_train": 10 ** 7}), tmp_path / "bad")]
    with pytest.raises(Exception, match="num_train"):
        run_sweep(jobs, batch=2, plot=False)
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["stop_reason"] == "target"


@pytest.mark.parametrize("plan", ["map", "vmap"])
def test_shared_calls_give_each_task_its_solo_result(plan):
    """lax.map (the CPU plan): bit for bit. vmap: within float32 rounding (measured here: the
    tolerance stated in docs/architecture.md)."""
    import jax

    from felix_jax.cohort.group import Request

    base = get_preset("tiny").with_overrides({"plan": plan, "local_mode": "steps"})
    sims = [build_simulator(base.with_overrides({"seed": s})) for s in (0, 1)]
    tasks = [(np.zeros(5, np.int32), np.array([0, 3, 7, 11, 5], np.int32), np.arange(5, dtype=np.int32) + 40),
             (np.zeros(3, np.int32), np.array([1, 2, 9], np.int32), np.arange(3, dtype=np.int32) + 7)]
    solo = [sim.engine.train(sim.executor.store.stacked, *t) for sim, t in zip(sims, tasks)]
    group = SharedCohort([sim.engine for sim in sims])
    shared = group.train([Request(sim.engine, sim.executor.store.stacked, *t, np.zeros(len(t[0]), np.float32))
                          for sim, t in zip(sims, tasks)])
    assert group.calls[-1].experiments == 2 and group.calls[-1].num_tasks == 8
    for a, b in zip(solo, shared):
        da, db = (jax.tree_util.tree_leaves(jax.device_get(o.delta)) for o in (a, b))
        if plan == "map":
            assert all(np.array_equal(x, y) for x, y in zip(da, db))
            assert np.array_equal(a.all_steps.sum, b.all_steps.sum)
        else:
            scale = max(float(np.abs(x).max()) for x in da)
            assert max(float(np.abs(x - y).max()) for x, y in zip(da, db)) <= 1e-5 * scale
            np.testing.assert_allclose(a.all_steps.sum, b.all_steps.sum, rtol=1e-5)


class _EchoGroup:
    """Stands in for a SharedCohort: records which payloads each call got."""

    def __init__(self):
        self.calls = []

    def train(self, payloads):
        self.calls.append(("train", list(payloads)))
        return list(payloads)

    def evaluate(self, payloads):
        self.calls.append(("eval", list(payloads)))
        return list(payloads)


def _coordinator(live):
    from felix_jax.experiment.sweep import BatchCoordinator, _Ticket

    c = BatchCoordinator(live)
    c._group = _EchoGroup()
    c._run_tests = lambda tickets: [setattr(t, "result", t.payload) for t in tickets]

    def flush():
        with c._cv:  # as a member's request does
            c._maybe_flush()

    return c, (lambda kind, payload: c._waiting.append(_Ticket(kind, payload, None)) or c._waiting[-1]), flush


def test_a_flush_holds_training_back_so_the_experiments_train_together():
    from felix_jax.experiment.sweep import MAX_TRAIN_HOLDS

    c, wait, flush = _coordinator(live=3)
    a, b = wait("train", "a1"), wait("test", "b1")
    flush()
    assert not a.done and not b.done  # not every experiment waits yet
    e = wait("eval", "c1")
    flush()  # mixed: the test and the eval go first, the training request stays
    assert b.done and e.done and not a.done and c._group.calls == [("eval", ["c1"])] and c.held_flushes == 1
    b2, e2 = wait("train", "b2"), wait("train", "c2")
    flush()  # now all three train: one training call with the three experiments' tasks
    assert a.done and b2.done and e2.done and c._group.calls[-1] == ("train", ["a1", "b2", "c2"])
    assert (a.result, b2.result) == ("a1", "b2") and c.flushes == 2
    # the hold is bounded: an experiment that keeps asking for tests cannot starve a training request
    c, wait, flush = _coordinator(live=2)
    a = wait("train", "a")
    for k in range(MAX_TRAIN_HOLDS):
        t = wait("test", k)
        flush()
        assert t.done and not a.done
    t = wait("test", "last")
    flush()
    assert t.done and a.done and c.held_flushes == MAX_TRAIN_HOLDS
