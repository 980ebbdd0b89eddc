"""Server-side test-set evaluation, chunked so a 10k-image call fits in memory.

Feeds only metrics (and the stopping rule), never a selection decision.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..data.federated import HeldOutSet
from ..models.base import Model, Params


class HeldOutMetrics(NamedTuple):
    accuracy: float
    loss: float


def _scan_test(model: Model, params: Params, test: HeldOutSet, chunk: int, add, init, keep_hits: bool = False):
    """Folds ``add(carry, y, losses, hits, valid)`` over the test set in chunks of ``chunk`` rows
    (the last chunk padded; ``valid`` masks the padding). ``keep_hits``: also every sample's
    correctness, (n,) bool, the very bits the fold was given: ``(carry, hits)``."""
    n = test.y.shape[0]
    num_chunks = -(-n // chunk)
    idx = jnp.arange(num_chunks * chunk).reshape(num_chunks, chunk)

    def body(carry, rows):
        valid = rows < n
        rows = jnp.minimum(rows, n - 1)
        y = test.y[rows]
        losses, logits = model.loss(params, test.inputs(rows), y)
        hit = (logits.argmax(-1) == y) & valid
        return add(carry, y, losses, hit, valid), (hit if keep_hits else None)

    carry, hits = jax.lax.scan(body, init, idx)
    return (carry, hits.reshape(-1)[:n]) if keep_hits else carry


def _add_count_and_loss(carry, y, losses, hit, valid):
    correct, loss_sum = carry
    # explicit dtypes: under JAX_ENABLE_X64 a bare sum is int64/float64 and the carry would change type
    return (correct + hit.sum(dtype=correct.dtype),
            loss_sum + jnp.where(valid, losses, 0.0).sum().astype(loss_sum.dtype))


def _count_and_loss_init():
    return jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)


def _eval_chunks_impl(model: Model, params: Params, test: HeldOutSet, chunk: int):
    return _scan_test(model, params, test, chunk, _add_count_and_loss, _count_and_loss_init())


_eval_chunks = jax.jit(_eval_chunks_impl, static_argnums=(0, 3))


def held_out_metrics(correct: float, loss: float) -> HeldOutMetrics:
    """An evaluation's (accuracy, loss); a non-finite loss (the model gave non-finite logits, whose
    argmax is meaningless) reports no accuracy: NaN."""
    return HeldOutMetrics(float(correct) if np.isfinite(loss) else float("nan"), float(loss))


def evaluate(model: Model, params: Params, test: HeldOutSet, chunk: int = 1000) -> HeldOutMetrics:
    """Accuracy and mean loss of ``params`` on the whole test set (accuracy NaN where the loss is not
    finite: :func:`held_out_metrics`)."""
    n = int(test.y.shape[0])
    if n == 0:
        raise ValueError("empty test set")
    correct, loss_sum = jax.device_get(_eval_chunks(model, params, test, min(chunk, n)))
    return held_out_metrics(float(correct) / n, float(loss_sum) / n)


@partial(jax.jit, static_argnums=(0, 3))
def _eval_versions(model: Model, versions: tuple, test: HeldOutSet, chunk: int):
    # one single-version computation per version, unrolled: the results are the eager path's bit for
    # bit (lax.map and vmap were measured to round the loss differently on CPU)
    return [_eval_chunks_impl(model, p, test, chunk) for p in versions]


def evaluate_many(model: Model, versions: list[Params], test: HeldOutSet, chunk: int = 1000,
                  pad_to: int | None = None) -> list[HeldOutMetrics]:
    """:func:`evaluate` on several model versions in one device call, one result per version.

    ``pad_to`` repeats the last version up to that many (one compiled shape for
    every batch of at most ``pad_to``); the padding's results are dropped.
    """
    n = _test_size(test)
    if not versions:
        return []
    results = jax.device_get(_eval_versions(model, _padded(versions, pad_to), test, min(chunk, n)))
    return [held_out_metrics(float(c) / n, float(s) / n) for c, s in results[:len(versions)]]


def _test_size(test: HeldOutSet) -> int:
    n = int(test.y.shape[0])
    if n == 0:
        raise ValueError("empty test set")
    return n


def _padded(versions: list[Params], pad_to: int | None) -> tuple:
    """``versions`` with the last repeated up to ``pad_to`` (one compiled shape per batch size)."""
    return tuple(versions) + (versions[-1],) * (max(len(versions), pad_to or 0) - len(versions))


def _eval_hits_impl(model: Model, params: Params, test: HeldOutSet, chunk: int):
    """:func:`_eval_chunks_impl`'s count and loss, plus every test sample's correctness (bool (n,))."""
    (correct, loss_sum), hits = _scan_test(model, params, test, chunk, _add_count_and_loss,
                                           _count_and_loss_init(), keep_hits=True)
    return correct, loss_sum, hits


@partial(jax.jit, static_argnums=(0, 3))
def _eval_hits_versions(model: Model, versions: tuple, test: HeldOutSet, chunk: int):
    return [_eval_hits_impl(model, p, test, chunk) for p in versions]


def evaluate_hits(model: Model, versions: list[Params], test: HeldOutSet, chunk: int = 1000,
                  pad_to: int | None = None) -> list[tuple[HeldOutMetrics, np.ndarray]]:
    """:func:`evaluate_many` that also returns which test samples each version classifies right, as
    ``np.packbits`` of the (n,) correctness (ceil(n / 8) uint8 bytes a version). The accuracy is the
    count of those bits over n, the same number :func:`evaluate` gives: the accuracy on any subset of
    the test set can then be read from the bits (:mod:`felix_jax.experiment.test_hits`)."""
    n = _test_size(test)
    if not versions:
        return []
    results = jax.device_get(_eval_hits_versions(model, _padded(versions, pad_to), test, min(chunk, n)))
    return [(held_out_metrics(float(c) / n, float(s) / n), np.packbits(np.asarray(h, bool)))
            for c, s, h in results[:len(versions)]]


@partial(jax.jit, static_argnums=(0, 3, 4))
def _eval_by_class(model: Model, params: Params, test: HeldOutSet, chunk: int, num_classes: int):
    def add(carry, y, losses, hit, valid):
        correct, loss_sum, count = carry
        cls = jnp.where(valid, y, num_classes)  # padding lands in a dropped extra class
        per_class = lambda v: jax.ops.segment_sum(v, cls, num_classes + 1)[:num_classes]  # noqa: E731
        return (correct + per_class(hit.astype(jnp.float32)),
                loss_sum + per_class(jnp.where(valid, losses, 0.0).astype(jnp.float32)),
                count + per_class(valid.astype(jnp.float32)))

    zeros = jnp.zeros((num_classes,), jnp.float32)
    return _scan_test(model, params, test, chunk, add, (zeros, zeros, zeros))


@partial(jax.jit, static_argnums=(0, 3, 4))
def _eval_by_class_versions(model: Model, versions: tuple, test: HeldOutSet, chunk: int, num_classes: int):
    # unrolled, one single-version computation each, as _eval_versions (bit for bit the eager path's)
    return [_eval_by_class.__wrapped__(model, p, test, chunk, num_classes) for p in versions]


def _weighted(counts_etc, class_weights) -> HeldOutMetrics:
    correct, loss_sum, counts = (np.asarray(a, np.float64) for a in counts_etc)
    w = np.asarray(class_weights, np.float64)
    present = counts > 0
    if not (w[present] > 0).any():
        raise ValueError("the class mix puts no weight on any class of the test set")
    w = np.where(present, w, 0.0) / w[present].sum()
    safe = np.maximum(counts, 1.0)
    return held_out_metrics(float((w * correct / safe).sum()), float((w * loss_sum / safe).sum()))


def evaluate_weighted_many(model: Model, versions: list[Params], test: HeldOutSet, class_weights: list,
                           chunk: int = 1000, pad_to: int | None = None) -> list[HeldOutMetrics]:
    """:func:`evaluate_weighted` on several versions (each with its class mix) in one device call."""
    n = int(test.y.shape[0])
    if n == 0:
        raise ValueError("empty test set")
    if not versions:
        return []
    num_classes = len(class_weights[0])
    size = max(len(versions), pad_to or 0)
    padded = tuple(versions) + (versions[-1],) * (size - len(versions))
    host = jax.device_get(_eval_by_class_versions(model, padded, test, min(chunk, n), num_classes))
    return [_weighted(h, w) for h, w in zip(host, class_weights)]


def evaluate_weighted(model: Model, params: Params, test: HeldOutSet, class_weights, chunk: int = 1000
                      ) -> HeldOutMetrics:
    """Accuracy and loss on the test set re-weighted to a class mix (``class_weights``, summing to
    1): sum_k w_k * (metric over the test samples of class k). Classes absent from the test set
    are dropped and the rest renormalised. The live-distribution test of client streams."""
    n = int(test.y.shape[0])
    if n == 0:
        raise ValueError("empty test set")
    w = np.asarray(class_weights, np.float64)
    return _weighted(jax.device_get(_eval_by_class(model, params, test, min(chunk, n), len(w))), w)
