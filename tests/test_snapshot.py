"""Resumable runs: a run killed after a snapshot and resumed equals the uninterrupted run, bit for bit."""

import dataclasses
import functools
import json
import math

import jax
import numpy as np
import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet import snapshot as snapshot_module
from felix_jax.fleet.events import Event, EventKind
from felix_jax.fleet.snapshot import SnapshotError, SnapshotPolicy, decode, encode, record_types, save_snapshot

# 60 s availability slots under 50% availability: tasks are interrupted, time out and wait, so a
# snapshot catches pending tasks, computed results, stored deltas and several live model versions
BASE = {"availability": "avail50", "slot_s": "60", "max_aggregations": "12", "target_accuracy": "none",
        "eval_selector.min_age": "35"}  # (the paper code's age: no eval task in 12 rounds, as these snapshots were built)


def scenario(strategy: str, **overrides):
    return get_preset("tiny").with_overrides({**BASE, "strategy": strategy, **overrides})


@functools.lru_cache(maxsize=None)
def reference(strategy: str):
    """The uninterrupted run (cached: several tests compare against it)."""
    return build_simulator(scenario(strategy)).run()


class Killed(Exception):
    """Stands for the process dying right after a snapshot."""


def run_until_killed(strategy: str, root, kill_at_version: int, every: int = 4):
    def on_saved(path):
        if path.name.startswith(f"snap-{kill_at_version:06d}-"):
            raise Killed

    sim = build_simulator(scenario(strategy))
    sim.snapshot = SnapshotPolicy(root, every_aggregations=every, on_saved=on_saved)
    with pytest.raises(Killed):
        sim.run()
    return sim


def resume(strategy: str, root):
    sim = build_simulator(scenario(strategy))
    sim.restore(root)
    return sim, sim.run()


def killed_and_resumed(sc, root, kill_at_version: int = 8, every: int = 4):
    """``sc`` run with snapshots every ``every`` aggregations until the one at ``kill_at_version``,
    where the process 'dies'; then a fresh simulator resumed from it runs to the end: its record."""
    def on_saved(path):
        if path.name.startswith(f"snap-{kill_at_version:06d}-"):
            raise Killed

    sim = build_simulator(sc)
    sim.snapshot = SnapshotPolicy(root, every_aggregations=every, on_saved=on_saved)
    with pytest.raises(Killed):
        sim.run()
    resumed = build_simulator(sc)
    resumed.restore(root)
    return resumed.run()


def host_accounting(acct) -> dict:
    out = dataclasses.asdict(acct)
    del out["selection_seconds"]  # host wall time per decision: differs between any two runs
    return out


def assert_same_run(a, b):
    assert repr(a.checkpoints) == repr(b.checkpoints)  # what metrics.csv is written from, types included
    assert a.aggregation_times == b.aggregation_times
    assert host_accounting(a.accounting) == host_accounting(b.accounting)
    assert (a.stop_reason, a.time_to_target_s, a.end_time_s, a.events_processed) == \
        (b.stop_reason, b.time_to_target_s, b.end_time_s, b.events_processed)
    assert jax.tree_util.tree_structure(a.params) == jax.tree_util.tree_structure(b.params)
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("strategy", ["fedbuff", "oort", "felix"])  # async random; sync Oort; TierTrack + eval
def test_killed_and_resumed_run_equals_uninterrupted(strategy, tmp_path):
    root = tmp_path / "snapshot"
    killed = run_until_killed(strategy, root, kill_at_version=8)
    assert killed.version == 8 and (root / "LATEST").read_text().startswith("snap-000008-")
    assert len(list(root.glob("snap-*"))) == 2  # keep=2: the snapshot at version 4 stays as the fallback
    sim, resumed = resume(strategy, root)
    assert resumed.checkpoints[8].version == 8 and len(resumed.checkpoints) == 13
    assert_same_run(reference(strategy), resumed)


@pytest.mark.parametrize("strategy", ["oort", "felix"])  # a sync round; async with eval tasks
def test_per_task_training_spread_resumes_exactly(strategy, tmp_path):
    # each training task's draw comes from (seed, client, task id): a resumed run draws what the
    # uninterrupted one drew
    sc = scenario(strategy, **{"reading.train_overhead_s": "0.2", "reading.train_overhead_spread_s": "0.6"})
    uninterrupted = build_simulator(sc).run()
    assert uninterrupted.aggregation_times != reference(strategy).aggregation_times  # the spread is in effect
    assert_same_run(uninterrupted, killed_and_resumed(sc, tmp_path / "snapshot"))


def test_snapshot_holds_work_in_progress(tmp_path):
    """The FeLiX snapshot above is not a trivial one: tasks in flight, pending and computed, live versions."""
    root = tmp_path / "snapshot"
    sim = run_until_killed("felix", root, kill_at_version=8)
    assert sim.tasks and sim.executor.num_pending > 0 and sim._sel_state.calls > 0
    assert len(sim.executor.store) >= 2 and sim.executor.deltas.num_used > 0
    restored = build_simulator(scenario("felix"))
    restored.restore(root)
    assert restored.tasks == sim.tasks and list(restored.executor._pending) == list(sim.executor._pending)
    assert restored.queue.state_dict() == sim.queue.state_dict()
    assert restored.rng.bit_generator.state == sim.rng.bit_generator.state
    assert repr(restored._sel_state) == repr(sim._sel_state)


def test_kill_during_a_snapshot_write_leaves_the_previous_one(tmp_path, monkeypatch):
    root = tmp_path / "snapshot"
    sim = run_until_killed("fedbuff", root, kill_at_version=4)
    before = (root / "LATEST").read_text()

    def die(*args):
        raise Killed

    with monkeypatch.context() as m:  # dies after the new snapshot is fully written to its temp folder
        m.setattr(snapshot_module, "_publish", die)
        with pytest.raises(Killed):
            save_snapshot(sim, root)
    assert list(root.glob(".tmp-snap-*")) and (root / "LATEST").read_text() == before
    restored, record = resume("fedbuff", root)
    assert_same_run(reference("fedbuff"), record)
    save_snapshot(restored, root)  # the next successful write clears the leftover
    assert not list(root.glob(".tmp-snap-*")) and len(list(root.glob("snap-*"))) == 2


def test_restore_refuses_a_snapshot_of_another_scenario(tmp_path):
    root = tmp_path / "snapshot"
    run_until_killed("fedbuff", root, kill_at_version=4)
    other = build_simulator(scenario("fedbuff", availability="avail90"))
    with pytest.raises(SnapshotError, match=r"another scenario \(its trace differs\)") as e:
        other.restore(root)
    assert "\n" not in str(e.value)
    with pytest.raises(SnapshotError, match="no snapshot in"):
        other.restore(tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match="freshly built"):
        sim = build_simulator(scenario("fedbuff", max_aggregations="1"))
        sim.run()
        sim.restore(root)


def test_snapshots_by_wall_clock_keep_the_newest(tmp_path):
    root = tmp_path / "snapshot"
    saved = []
    sim = build_simulator(scenario("fedbuff", max_aggregations="3"))
    sim.snapshot = SnapshotPolicy(root, every_minutes=1e-9, keep=2, on_saved=saved.append)
    sim.run()
    assert len(saved) >= 3 and sorted(p.name for p in root.glob("snap-*")) == sorted(p.name for p in saved[-2:])


def test_policy_rejects_bad_settings_in_one_line():
    for kwargs, msg in [({}, "every_aggregations and/or every_minutes"),
                        ({"every_aggregations": 0}, "integer >= 1"),
                        ({"every_minutes": -1.0}, "number > 0"),
                        ({"every_aggregations": 5, "keep": 0}, "keep")]:
        with pytest.raises(ValueError, match=msg):
            SnapshotPolicy("x", **kwargs)


def test_codec_round_trips_exact_types_without_pickle():
    value = {
        "floats": [0.1 * i for i in range(20)] + [math.inf],
        "ints": list(range(-5, 30)),
        "strs": ["train", "eval"] * 6,
        "log": [(0.5 * i, i, "train", i // 3) for i in range(10)],
        "heap": [Event(float(i), i, EventKind.REPLY, i if i % 2 else None) for i in range(9)],
        "scalars": (np.float32(0.1), np.float64(-0.0), np.int64(7), np.bool_(True), np.float64(np.inf)),
        "keys": {3: "three", (1, 2): [1.5, math.nan]},
        "array": np.arange(6, dtype=np.int8).reshape(2, 3),
        "empty": [], "none": None, "nested": {"$odd": 1},
    }
    tree, arrays, device = encode(value)
    text = json.dumps(tree, allow_nan=False)  # strict JSON
    assert not device and all(not a.dtype.hasobject for a in arrays.values())
    back = decode(json.loads(text), arrays, device, record_types(value["heap"]))
    assert repr(back["scalars"]) == repr(value["scalars"]) and back["array"].dtype == np.int8
    assert back["heap"] == value["heap"] and type(back["heap"][0].kind) is EventKind
    assert back["log"] == value["log"] and back["floats"] == value["floats"] and back["ints"] == value["ints"]
    assert back["keys"][3] == "three" and math.isnan(back["keys"][(1, 2)][1]) and back["nested"] == {"$odd": 1}
    with pytest.raises(SnapshotError, match="does not use"):
        decode(json.loads(text), arrays, device, {})


@pytest.mark.parametrize("sig,snapshot_flags", [pytest.param("SIGTERM", ["--snapshot-every", "4"], marks=pytest.mark.slow),
                                              ("SIGINT", [])],  # slow tier: SIGTERM with periodic snapshots
                         ids=["sigterm-with-snapshots", "sigint-without-snapshot-flags"])
def test_cli_kill_and_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch, sig, snapshot_flags):
    """``felix-jax run`` stopped by a signal mid-run (SIGTERM with ``--snapshot-every N``; Ctrl-C
    with no snapshot flag: the stop writes one), then ``--resume DIR``: the finished folder's
    metrics.csv is byte-identical to an uninterrupted run's."""
    import os
    import signal

    from felix_jax.cli import main
    from felix_jax.fleet.simulator import FleetSimulator

    signum = getattr(signal, sig)

    sets = ["--set", "strategy=felix", "--set", "availability=avail50", "--set", "slot_s=60",
            "--set", "target_accuracy=none", "--set", "max_aggregations=10", "--set", "eval_selector.min_age=2"]
    assert main(["run", "--preset", "tiny", *sets, "--quiet", "--out", str(tmp_path / "ref")]) == 0

    original = FleetSimulator._checkpoint

    def kill_at_version_6(self):
        original(self)
        if self.version == 6:
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(FleetSimulator, "_checkpoint", kill_at_version_6)
    # run as a shell's background job, SIGINT starts out ignored and the CLI rightly keeps ignoring
    # it: give this test the interactive default
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            main(["run", "--preset", "tiny", *sets, *snapshot_flags, "--quiet", "--out", str(tmp_path / "cut")])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped.value.code == 128 + signum
    ref_events = (tmp_path / "ref" / "events.csv").read_bytes()
    assert ref_events.startswith((tmp_path / "cut" / "events.csv").read_bytes())  # the rows up to the stop
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["aggregations"] == 6
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    assert main(["run", "--resume", str(tmp_path / "cut"), "--quiet"]) == 0
    for name in ("metrics.csv", "events.csv"):  # the event log cut back to the snapshot and written on
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    done = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert done["stop_reason"] == "max_aggregations" and done["aggregations"] == 10
    with pytest.raises(SystemExit, match="no --preset, --set"):
        main(["run", "--resume", str(tmp_path / "cut"), "--set", "seed=1"])
    with pytest.raises(SystemExit, match=r"that run finished \(stop reason: max_aggregations\); nothing to resume"):
        main(["run", "--resume", str(tmp_path / "ref"), "--quiet"])


def test_wall_budget_stops_cleanly_and_resumes_exactly(tmp_path, monkeypatch):
    """``run(wall_budget_s=...)``: the run stops after the current event with stop reason
    ``wall_budget``, its folder complete up to there; with snapshots on, resuming it finishes the
    uninterrupted run."""
    import time

    from felix_jax.experiment.runner import run
    from felix_jax.fleet.simulator import FleetSimulator

    sc = scenario("felix", max_aggregations="10")
    ref = run(sc, tmp_path / "ref", plot=False)
    original = FleetSimulator._checkpoint

    def slow_after_version_5(self):
        original(self)
        if self.version >= 5:
            time.sleep(0.2)  # the budget runs out here, on any machine

    monkeypatch.setattr(FleetSimulator, "_checkpoint", slow_after_version_5)
    cut = run(sc, tmp_path / "cut", plot=False, snapshot_every=100, wall_budget_s=0.1)
    assert cut.summary["stop_reason"] == "wall_budget" and cut.summary["aggregations"] < 10
    lines = (tmp_path / "cut" / "metrics.csv").read_text().splitlines()
    assert len(lines) == 1 + cut.summary["aggregations"] + 1  # header, t=0, one row per aggregation
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    done = run(sc, tmp_path / "cut", plot=False, resume=True)
    assert done.summary["stop_reason"] == "max_aggregations"
    assert (tmp_path / "cut" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()
    with pytest.raises(ValueError, match="wall_budget_s"):
        run(sc, wall_budget_s=0)
