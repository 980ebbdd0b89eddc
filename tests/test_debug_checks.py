"""The cohort engine's debug checks (felix_jax/cohort/checks.py): off by default, read once when an
engine is built, on for the test suite (conftest); bad shapes, dtypes, slots and non-finite client
updates stop a call with a message that says what is wrong and where."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import CohortEngine, LocalEvalConfig, LocalTrainConfig, VersionStore
from felix_jax.cohort import checks
from felix_jax.cohort.engine import CohortEvalOutput
from felix_jax.cohort.stats import LossStats
from tests.conftest import LINEAR, linear_data

DATA, _ = linear_data()
CFG = LocalTrainConfig(batch_size=2, learning_rate=2.0, mode="steps", local_steps=1)
EVAL = LocalEvalConfig(batch_size=2)


def _engine(debug_checks=True, **kw):
    return CohortEngine(LINEAR, DATA, CFG, EVAL, debug_checks=debug_checks, **kw)


def _store(*versions):
    store = VersionStore(LINEAR.init(None), capacity=len(versions))
    for v, params in enumerate(versions):
        store.put(v, params)
    return store.stacked


ZERO = LINEAR.init(None)
NAN = jax.tree_util.tree_map(lambda z: z + jnp.nan, ZERO)


def test_off_by_default_on_for_the_suite_and_read_once(monkeypatch):
    assert _engine(None).debug_checks  # conftest turns them on for the test run
    monkeypatch.delenv(checks.DEBUG_CHECKS_ENV)
    engine = _engine(None)
    assert not engine.debug_checks
    monkeypatch.setenv(checks.DEBUG_CHECKS_ENV, "1")
    assert not engine.debug_checks  # read when the engine was built
    assert not _engine(False).debug_checks  # the argument wins over the environment
    monkeypatch.setenv(checks.DEBUG_CHECKS_ENV, "0")
    assert not _engine(None).debug_checks and _engine(True).debug_checks


def test_off_no_check_runs(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a debug check ran")

    for name in ("check_inputs", "check_train_output", "check_eval_output", "param_template"):
        monkeypatch.setattr(checks, name, refuse)
    engine = _engine(False)
    out = engine.train(_store(NAN), [0], [0], [1])  # a non-finite update passes unchecked
    assert not np.isfinite(np.asarray(out.delta["w"])).any()
    engine.evaluate(_store(ZERO), [0], [1], [2])
    with pytest.raises(AssertionError, match="a debug check ran"):
        _engine(True).train(_store(ZERO), [0], [0], [1])


def test_a_non_finite_update_is_named():
    engine = _engine()
    stacked = _store(ZERO, NAN)
    out = engine.train(stacked, [0, 0], [0, 1], [3, 4])  # both from the finite version: fine
    assert np.isfinite(np.asarray(out.delta["w"])).all()
    with pytest.raises(AssertionError, match=r"^cohort engine debug check \(FELIX_JAX_DEBUG_CHECKS\): non-finite "
                                             r"client update: 1 of 3 tasks: task 1 \(client 0, task id 8\)$"):
        engine.train(stacked, [0, 1, 0], [1, 0, 0], [7, 8, 9])


def test_a_store_of_the_wrong_shape_or_dtype_is_refused():
    engine = _engine()
    wide = {"w": jnp.zeros((2, 1, 3)), "b": jnp.zeros((2, 2))}  # W of a 3-class model
    with pytest.raises(AssertionError, match=r"version store leaf \['w'\] \(model parameter \(1, 2\) float32\).*"
                                             r"shape"):
        engine.train(wide, [0], [0], [1])
    half = jax.tree_util.tree_map(lambda a: a.astype(jnp.float16), _store(ZERO))
    with pytest.raises(AssertionError, match=r"version store leaf \['b'\].*float16"):
        engine.evaluate(half, [0], [0], [1])
    with pytest.raises(AssertionError, match="does not have the model's parameter tree"):
        engine.train({"w": wide["w"]}, [0], [0], [1])


def test_a_slot_past_the_store_is_refused():
    stacked = _store(ZERO, ZERO)
    # unchecked, jax clamps the gather and the task silently starts from the last slot
    assert _engine(False).train(stacked, [5], [0], [1]).num_steps.tolist() == [1]
    with pytest.raises(AssertionError, match=r"slots: \[1, 5\] outside \[0, 2\) of the version store"):
        _engine().train(stacked, [1, 5], [0, 0], [1, 2])


def test_outputs_of_the_wrong_shape_are_refused():
    engine = _engine()
    stacked = _store(ZERO)
    good = engine.train(stacked, [0, 0], [0, 1], [1, 2])
    # a shared cohort (a sweep batch) answers for the engine: one that gets the shapes wrong is caught
    engine.shared = lambda kind, *_call: good._replace(num_steps=good.num_steps[:1])
    with pytest.raises(AssertionError, match=r"train output num_steps \(one entry per task, 2 tasks\)"):
        engine.train(stacked, [0, 0], [0, 1], [1, 2])
    flat = jax.tree_util.tree_map(lambda d: d.reshape(d.shape[0], -1)[:, :1], good.parts[0])
    engine.shared = lambda kind, *_call: good._replace(parts=(flat,))
    with pytest.raises(AssertionError, match=r"train output part 0 leaf \['b'\]"):
        engine.train(stacked, [0, 0], [0, 1], [1, 2])
    engine.shared = lambda kind, *_call: CohortEvalOutput(LossStats(*np.zeros((3, 2), np.float32)),
                                                          np.zeros(2, np.int32))
    with pytest.raises(AssertionError, match=r"eval output correct .*int32"):
        engine.evaluate(stacked, [0, 0], [0, 1], [1, 2])
