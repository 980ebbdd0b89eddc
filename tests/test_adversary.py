"""Adversarial clients (cohort/adversary.py): each kind against the honest update computed by hand or by
the honest engine (sign_flip exactly minus it, scale:X exactly X times it, label_flip exactly training on
flipped labels, gaussian noise from the task's key), honest tasks bit for bit unchanged, the vmapped cohort
against the one-task reference, one program whatever the fraction, a seeded and nested draw, shared sweep
calls, and a run: fraction 0 bit-identical to no adversary, the scenario, config.json, events.csv and
summary.json."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import CohortEngine, LocalTrainConfig, VersionStore
from felix_jax.cohort import engine as engine_mod
from felix_jax.cohort.adversary import (Adversaries, AdversaryConfig, Attack, AttackKind, adversarial_clients,
                                        adversary_count)
from felix_jax.cohort.group import Request, SharedCohort
from felix_jax.experiment.scenario import Scenario
from felix_jax.models import mlp
from felix_jax.options import OptionError
from tests.conftest import LINEAR, linear_data

MODEL = mlp((8, 8, 3), hidden=(16,))
CFG = LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="steps", local_steps=3)
CLIENTS = np.array([0, 1, 2, 3, 5, 1])
SLOTS = np.array([0, 1, 0, 1, 0, 1])
TASKS = np.arange(6) + 40
MIXED = np.array([False, True, False, True, False, True])  # clients 1, 3, 5 adversarial


def store():
    s = VersionStore(MODEL.init(jax.random.key(0)), capacity=2)
    for v in range(2):
        s.put(v, MODEL.init(jax.random.key(10 + v)))
    return s


def train(data, attack: str | None, adversarial=MIXED, **engine_options):
    adversaries = None if attack is None else Adversaries(Attack.parse(attack, 10), np.asarray(adversarial))
    engine = CohortEngine(MODEL, data, CFG, seed=3, adversaries=adversaries, **engine_options)
    return engine.train(store().stacked, SLOTS, CLIENTS, TASKS)


def rows(tree, index):
    return jax.tree_util.tree_map(lambda d: np.asarray(d)[index], tree)


# ---------------------------------------------------------------- each kind against the honest update
def test_a_sign_flipped_update_is_exactly_minus_the_honest_one(tiny):
    _, _, data, _ = tiny
    honest, attacked = train(data, None), train(data, "sign_flip")
    bad = MIXED[CLIENTS]
    chex.assert_trees_all_equal(rows(attacked.delta, bad), jax.tree_util.tree_map(np.negative, rows(honest.delta, bad)))
    chex.assert_trees_all_equal(rows(attacked.delta, ~bad), rows(honest.delta, ~bad))  # honest: bit for bit
    chex.assert_trees_all_equal(tuple(attacked.first_batch), tuple(honest.first_batch))  # it trained honestly
    chex.assert_trees_all_equal(tuple(attacked.all_steps), tuple(honest.all_steps))


def test_a_scaled_update_is_exactly_x_times_the_honest_one(tiny):
    _, _, data, _ = tiny
    honest, attacked = train(data, None), train(data, "scale:-4.5")
    bad = MIXED[CLIENTS]
    chex.assert_trees_all_equal(rows(attacked.delta, bad),
                                jax.tree_util.tree_map(lambda d: d * np.float32(-4.5), rows(honest.delta, bad)))
    chex.assert_trees_all_equal(rows(attacked.delta, ~bad), rows(honest.delta, ~bad))


def test_a_gaussian_update_is_noise_from_the_tasks_own_key(tiny):
    _, _, data, _ = tiny
    honest, attacked, again = train(data, None), train(data, "gaussian:2.0"), train(data, "gaussian:2.0")
    bad = MIXED[CLIENTS]
    chex.assert_trees_all_equal(attacked.delta, again.delta)  # reproducible
    chex.assert_trees_all_equal(rows(attacked.delta, ~bad), rows(honest.delta, ~bad))
    noise = np.concatenate([np.asarray(d).reshape(len(CLIENTS), -1) for d in jax.tree_util.tree_leaves(
        rows(attacked.delta, slice(None)))], axis=1)[bad]
    assert noise.std() == pytest.approx(2.0, rel=0.05) and abs(noise.mean()) < 0.05
    assert not np.array_equal(noise[0], noise[1])  # each task its own draw
    # the same task key gives the same noise in another engine's call (another bucket, another plan)
    vmapped = train(data, "gaussian:2.0", plan="vmap")
    chex.assert_trees_all_close(rows(vmapped.delta, bad), rows(attacked.delta, bad), atol=0, rtol=0)


def test_label_flip_equals_training_on_flipped_labels(tiny):
    _, _, data, _ = tiny
    everyone = np.ones(6, bool)
    attacked = train(data, "label_flip", everyone)
    flipped = train(data.replace(y=9 - data.y), None)  # y -> C - 1 - y on the whole training set
    chex.assert_trees_all_equal(attacked.delta, flipped.delta)
    chex.assert_trees_all_equal(tuple(attacked.first_batch), tuple(flipped.first_batch))
    mixed, honest = train(data, "label_flip"), train(data, None)
    bad = MIXED[CLIENTS]
    chex.assert_trees_all_equal(rows(mixed.delta, bad), rows(flipped.delta, bad))
    chex.assert_trees_all_equal(rows(mixed.delta, ~bad), rows(honest.delta, ~bad))


def test_the_linear_model_by_hand():
    """Softmax regression from zero on client 0's samples (1, y=1), (-1, y=0), one step of lr 0.5 over both:
    p = (1/2, 1/2), dL/dW = mean_i x_i (p - e_{y_i}) = ((1/2, -1/2) + (1/2, -1/2)) / 2 = (1/2, -1/2), db = 0,
    so the honest delta is W = (-1/4, 1/4). Flipped labels (1 - y) give dW = (-1/2, 1/2): W = (1/4, -1/4),
    here exactly the sign-flipped update; scale:3 sends (-3/4, 3/4)."""
    data, _ = linear_data()
    cfg = LocalTrainConfig(batch_size=2, learning_rate=0.5, mode="steps", local_steps=1)
    stacked = jax.tree_util.tree_map(lambda p: p[None], LINEAR.init(jax.random.key(0)))

    def delta(attack):
        adversaries = None if attack is None else Adversaries(Attack.parse(attack, 2), np.array([True, True]))
        out = CohortEngine(LINEAR, data, cfg, adversaries=adversaries).train(stacked, [0], [0], [7])
        return np.asarray(out.delta["w"][0]).ravel(), np.asarray(out.delta["b"][0])

    np.testing.assert_array_equal(delta(None)[0], [-0.25, 0.25])
    np.testing.assert_array_equal(delta(None)[1], [0.0, 0.0])
    np.testing.assert_array_equal(delta("sign_flip")[0], [0.25, -0.25])
    np.testing.assert_array_equal(delta("label_flip")[0], [0.25, -0.25])
    np.testing.assert_array_equal(delta("scale:3")[0], [-0.75, 0.75])


# ---------------------------------------------------------------- the engine
@pytest.mark.parametrize("attack", ["sign_flip", "label_flip"])
def test_the_cohort_equals_the_one_task_reference(tiny, attack):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="steps", local_steps=2)
    adversaries = Adversaries(Attack.parse(attack, 10), MIXED)
    tasks = (SLOTS[:3], CLIENTS[:3], TASKS[:3])  # clients 0 (honest), 1 (adversarial), 2 (honest)
    fast = CohortEngine(MODEL, data, cfg, adversaries=adversaries, plan="vmap").train(store().stacked, *tasks)
    ref = CohortEngine(MODEL, data, cfg, adversaries=adversaries, backend="debug").train(store().stacked, *tasks)
    chex.assert_trees_all_close(fast.delta, ref.delta, atol=2e-5, rtol=1e-4)
    chex.assert_trees_all_close(tuple(fast.first_batch), tuple(ref.first_batch), atol=1e-4, rtol=1e-4)


def test_one_program_whatever_the_fraction(tiny):
    _, _, data, _ = tiny
    engines = [CohortEngine(MODEL, data, CFG, adversaries=Adversaries(Attack.parse("sign_flip"), flags))
               for flags in (np.zeros(6, bool), MIXED, np.ones(6, bool))]
    assert len({id(e._train_jit) for e in engines}) == 1  # one jitted program per attack kind, not per draw
    engines[0].train(store().stacked, SLOTS, CLIENTS, TASKS)
    traced = engines[0]._train_jit._cache_size()
    for e in engines[1:]:
        e.train(store().stacked, SLOTS, CLIENTS, TASKS)
    assert engines[0]._train_jit._cache_size() == traced
    assert engine_mod._cohort_jit("train", MODEL, CFG, Attack(AttackKind.SIGN_FLIP)) is engines[0]._train_jit


def test_fraction_zero_is_the_honest_engine_bit_for_bit(tiny):
    _, _, data, _ = tiny
    for attack in ("sign_flip", "gaussian:3", "label_flip"):
        chex.assert_trees_all_equal(train(data, attack, np.zeros(6, bool)).delta, train(data, None).delta)


def test_a_shared_sweep_call_gives_each_experiment_its_own_results(tiny):
    _, _, data, _ = tiny
    honest = CohortEngine(MODEL, data, CFG, seed=3)
    attacked = CohortEngine(MODEL, data, CFG, seed=4, adversaries=Adversaries(Attack.parse("sign_flip"), MIXED))
    s1, s2 = store(), store()
    solo = [e.train(s.stacked, SLOTS, CLIENTS, TASKS) for e, s in ((honest, s1), (attacked, s2))]
    group = SharedCohort([CohortEngine(MODEL, data, CFG, seed=3), CohortEngine(
        MODEL, data, CFG, seed=4, adversaries=Adversaries(Attack.parse("sign_flip"), MIXED))])
    shared = group.train([Request(group.engines[0], s1.stacked, SLOTS, CLIENTS, TASKS, np.zeros(6, np.float32)),
                          Request(group.engines[1], s2.stacked, SLOTS, CLIENTS, TASKS, np.zeros(6, np.float32))])
    for a, b in zip(solo, shared):
        chex.assert_trees_all_equal(a.delta, b.delta)


SHARDED_SCRIPT = """
    import jax
    import numpy as np
    from conftest import make_image_dataset
    from felix_jax.cohort import CohortEngine, LocalTrainConfig, VersionStore
    from felix_jax.cohort.adversary import Adversaries, Attack
    from felix_jax.data.federated import to_device
    from felix_jax.data.partition import partition_from_counts
    from felix_jax.models import mlp

    assert jax.device_count() == 4, jax.devices()
    ds = make_image_dataset()
    data = to_device(ds, partition_from_counts(600, np.array([5, 70, 33, 100, 1, 64], np.int32), seed=0))
    model = mlp((8, 8, 3), hidden=(16,))
    store = VersionStore(model.init(jax.random.key(0)), capacity=1)
    cfg = LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="steps", local_steps=2)
    tasks = ([0] * 5, [0, 1, 2, 3, 5], [40, 41, 42, 43, 44])
    for kind in ("sign_flip", "gaussian:2"):
        adversaries = Adversaries(Attack.parse(kind, 10), np.array([False, True, False, True, False, True]))
        one = CohortEngine(model, data, cfg, devices=1, adversaries=adversaries).train(store.stacked, *tasks)
        four = CohortEngine(model, data, cfg, adversaries=adversaries).train(store.stacked, *tasks)
        diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                   for a, b in zip(jax.tree_util.tree_leaves(one.delta), jax.tree_util.tree_leaves(four.delta)))
        print(kind, diff)
"""


@pytest.mark.slow  # a subprocess with 4 forced CPU devices, 4 programs: ~50 s on 2 cores (the flag itself: above)
def test_each_task_keeps_its_flag_when_the_cohort_is_sharded_over_four_devices(forced_devices):
    out = forced_devices.run(SHARDED_SCRIPT)
    diffs = dict(line.split() for line in out.strip().splitlines()[-2:])
    assert set(diffs) == {"sign_flip", "gaussian:2"}
    assert all(float(d) < 1e-5 for d in diffs.values()), diffs


# ---------------------------------------------------------------- the draw and the options
def test_the_adversaries_are_a_seeded_nested_share_of_the_population():
    assert [adversary_count(12, f) for f in (0.0, 0.3, 0.5, 1.0)] == [0, 4, 6, 12]
    assert adversary_count(10, 0.25) == 3 and adversary_count(10, 0.3) == 3  # round half up, 0.3 as written
    drawn = adversarial_clients(100, 0.3, seed=7)
    assert drawn.sum() == 30 and np.array_equal(drawn, adversarial_clients(100, 0.3, seed=7))
    assert not np.array_equal(drawn, adversarial_clients(100, 0.3, seed=8))
    assert (adversarial_clients(100, 0.1, seed=7) <= drawn).all()  # a smaller fraction's are among them
    assert not adversarial_clients(100, 0.0, seed=7).any()


@pytest.mark.parametrize("kind,says", [("flip", "expected sign_flip, scale:X, gaussian:SIGMA or label_flip"),
                                       ("scale", "scale needs a number"), ("gaussian:0", "SIGMA must be"),
                                       ("gaussian:-1", "SIGMA must be"), ("sign_flip:2", "takes no value"),
                                       ("scale:inf", "X must be a finite number")])
def test_a_bad_kind_is_refused_in_one_line(kind, says):
    with pytest.raises(OptionError, match=says):
        Scenario().with_overrides({"adversary.kind": kind, "adversary.fraction": "0.1"})


def test_the_scenario_reaches_every_option_and_refuses_a_bad_one():
    sc = Scenario().with_overrides({"adversary.fraction": "0.3", "adversary.kind": "scale:10", "adversary.seed": "5"})
    assert sc.adversary == {"fraction": "0.3", "kind": "scale:10", "seed": "5"}
    assert sc.resolve_adversary() == AdversaryConfig(0.3, "scale:10", 5)
    assert Scenario().resolve_adversary() is None  # none: the cohort runs no adversary code
    with pytest.raises(OptionError, match=r"adversary.fraction=1.5: must be in \[0, 1\]"):
        Scenario().with_overrides({"adversary.fraction": "1.5"})
    with pytest.raises(OptionError, match="adversary.frac: unknown option"):
        Scenario().with_overrides({"adversary.frac": "0.1"})


# ---------------------------------------------------------------- a run
def run_tiny(tmp_path, name, **adversary):
    from felix_jax.cli import main

    sets = [f"adversary.{k}={v}" for k, v in adversary.items()]
    out = tmp_path / name
    argv = ["run", "--preset", "tiny", "--set", "max_aggregations=6", "--quiet", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    return out


def test_a_run_at_fraction_zero_is_bit_identical_and_a_run_with_adversaries_records_them(tmp_path, capsys):
    plain = run_tiny(tmp_path, "plain")
    zero = run_tiny(tmp_path, "zero", fraction=0, kind="sign_flip")
    some = run_tiny(tmp_path, "some", fraction=0.3, kind="sign_flip")
    capsys.readouterr()
    for name in ("metrics.csv", "events.csv"):
        assert (zero / name).read_bytes() == (plain / name).read_bytes(), name
    config = json.loads((some / "config.json").read_text())
    assert config["scenario"]["adversary"] == {"fraction": "0.3", "kind": "sign_flip"}
    assert Scenario.from_file(some / "config.json").resolve_adversary() == AdversaryConfig(0.3, "sign_flip")
    chosen = np.flatnonzero(adversarial_clients(12, 0.3, seed=0))  # the scenario's seed draws them
    events = [line.split(",") for line in (some / "events.csv").read_text().splitlines()[1:]]
    flagged = [(e[0], int(e[2]), e[4]) for e in events if e[1] == "adversarial"]
    dispatched = [(e[0], int(e[2]), e[4]) for e in events if e[1] == "dispatch" and e[3] == "train"]
    assert flagged == [d for d in dispatched if d[1] in chosen] and flagged  # each adversarial task, at dispatch
    aggregated = [e for e in events if e[1] == "aggregated" and int(e[2]) in chosen]
    summary = json.loads((some / "summary.json").read_text())
    assert summary["adversarial_clients"] == 4 and summary["adversarial_tasks"] == len(flagged)
    assert summary["adversarial_updates"] == len(aggregated)
    assert summary["adversarial_updates_accepted"] == sum(float(e[6]) > 0 for e in aggregated)
    plain_summary = json.loads((plain / "summary.json").read_text())
    assert plain_summary["adversarial_clients"] == 0 and plain_summary["adversarial_weight_mean"] is None
    # FedBuff weighs every update it gets: the adversarial ones too (weights 1/sqrt(1 + staleness))
    assert summary["adversarial_weight_total"] == pytest.approx(
        sum(1 / np.sqrt(1 + int(e[5])) for e in aggregated), rel=1e-9)
    assert 0 < summary["adversarial_weight_share"] < 1


@pytest.mark.slow  # three runs and their snapshots: ~50 s on 2 loaded cores
def test_a_run_with_adversaries_and_multi_krum_resumes_exactly(tmp_path):
    from felix_jax.experiment.presets import get_preset
    from felix_jax.experiment.runner import build_simulator
    from tests.test_snapshot import assert_same_run, killed_and_resumed

    sc = get_preset("tiny").with_overrides({
        "strategy": "multi-krum", "aggregation_goal": "5", "concurrency": "5", "max_aggregations": "4",
        "target_accuracy": "none", "adversary.fraction": "0.3", "adversary.kind": "gaussian:1"})
    uninterrupted = build_simulator(sc).run()
    assert uninterrupted.accounting.adversarial_updates > 0
    assert_same_run(uninterrupted, killed_and_resumed(sc, tmp_path / "snapshot", kill_at_version=2, every=2))
