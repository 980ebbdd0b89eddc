"""Debug checks at the cohort engine's boundary: shapes, dtypes and finite client updates.

Off by default. ``FELIX_JAX_DEBUG_CHECKS=1`` (read once, when a :class:`~.engine.CohortEngine` is
built) or ``CohortEngine(..., debug_checks=True)`` turns them on; the test suite runs with them on
(``tests/conftest.py``). When on, every ``train`` / ``evaluate`` call checks, on the host:

* its inputs: the stacked version store has the model's parameter tree, each leaf shaped
  ``(capacity, *parameter shape)`` with the parameter's dtype, and every slot lies in
  ``[0, capacity)`` (a gather past the end would silently read the last row);
* its outputs: each delta part has the parameter tree, leaves ``(bucket size, *parameter shape)``
  with the parameter's dtype; the loss statistics and step counts have one entry per task
  (steps int32, statistics floating); and every client update is finite
  (``chex.assert_tree_all_finite``), a failure naming the tasks, clients and task ids.

A failed check raises ``AssertionError`` starting with :data:`PREFIX`. Off, the engine only tests
one boolean per call; chex is imported only when a check runs.
"""

from __future__ import annotations

import os

import jax
import numpy as np

DEBUG_CHECKS_ENV = "FELIX_JAX_DEBUG_CHECKS"
PREFIX = f"cohort engine debug check ({DEBUG_CHECKS_ENV})"


def debug_checks_from_env() -> bool:
    """Whether ``$FELIX_JAX_DEBUG_CHECKS`` asks for the checks (set and not ``0``)."""
    return os.environ.get(DEBUG_CHECKS_ENV, "").strip() not in ("", "0")


def param_template(model):
    """The model's parameter shapes and dtypes (``jax.ShapeDtypeStruct`` leaves), without computing them."""
    return jax.eval_shape(model.init, jax.random.key(0))


def _fail(what: str, detail) -> AssertionError:
    return AssertionError(f"{PREFIX}: {what}: {detail}")


def _leaves(tree, template, what: str):
    """(path, leaf, template leaf) triples, after checking that ``tree`` has ``template``'s structure."""
    import chex

    try:
        chex.assert_trees_all_equal_structs(tree, template)
    except AssertionError as e:
        raise _fail(f"{what} does not have the model's parameter tree", e) from None
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(template)[0]]
    return zip(paths, jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(template))


def check_stacked(tree, template, what: str) -> int:
    """Every leaf of ``tree`` is ``(n, *template leaf shape)`` with the template's dtype; returns n."""
    import chex

    rows = None
    for path, leaf, want in _leaves(tree, template, what):
        n = leaf.shape[0] if leaf.ndim else None
        rows = n if rows is None else rows
        try:
            chex.assert_shape(leaf, (rows,) + tuple(want.shape))
            chex.assert_type(leaf, want.dtype)
        except AssertionError as e:
            raise _fail(f"{what} leaf {path} (model parameter {tuple(want.shape)} {want.dtype})", e) from None
    return int(rows)


def check_inputs(template, stacked, slots) -> None:
    capacity = check_stacked(stacked, template, "the version store")
    if len(slots) and (int(np.min(slots)) < 0 or int(np.max(slots)) >= capacity):
        raise _fail("slots", f"{sorted(set(np.asarray(slots).tolist()))} outside [0, {capacity}) of the version store")


def _check_per_task(arrays: dict, n: int, what: str) -> None:
    """``arrays``: name -> (array, expected type); each must be ``(n,)`` of that type."""
    import chex

    for name, (value, kind) in arrays.items():
        try:
            chex.assert_shape(value, (n,))
            chex.assert_type(value, kind)
        except AssertionError as e:
            raise _fail(f"{what} {name} (one entry per task, {n} tasks)", e) from None


def _stats(name: str, stats) -> dict:
    return {f"{name}.{f}": (getattr(stats, f), float) for f in stats._fields}


def check_train_output(template, out, clients, task_ids) -> None:
    """``out``: a ``CohortTrainOutput`` for tasks ``clients[i]`` / ``task_ids[i]``."""
    import chex

    n = len(clients)
    _check_per_task({"part_of": (out.part_of, int), "rows": (out.rows, int), "num_steps": (out.num_steps, np.int32),
                     **_stats("first_batch", out.first_batch), **_stats("all_steps", out.all_steps)},
                    n, "train output")
    for p, part in enumerate(out.parts):
        size = check_stacked(part, template, f"train output part {p}")
        mine = np.flatnonzero(out.part_of == p)
        rows = np.asarray(out.rows)[mine]
        if len(rows) and int(rows.max()) >= size:
            raise _fail(f"train output part {p}", f"rows {rows.tolist()} past its {size} rows")
        real = [np.asarray(leaf)[rows] for leaf in jax.tree_util.tree_leaves(part)]  # padding rows left out
        try:
            chex.assert_tree_all_finite(real)
        except AssertionError:
            finite = np.logical_and.reduce([np.isfinite(r).reshape(len(rows), -1).all(axis=1) for r in real])
            bad = mine[~finite]
            named = ", ".join(f"task {i} (client {int(clients[i])}, task id {int(task_ids[i])})" for i in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise _fail("non-finite client update", f"{len(bad)} of {n} tasks: {named}{more}") from None


def check_eval_output(out, n: int) -> None:
    """``out``: a ``CohortEvalOutput`` for ``n`` tasks."""
    _check_per_task({**_stats("stats", out.stats), "correct": (out.correct, np.float32)}, n, "eval output")
