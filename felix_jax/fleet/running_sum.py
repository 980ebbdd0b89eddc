"""The aggregation's running weighted sum: updates folded in as they arrive (docs/architecture.md 8,
"Updates folded in as they arrive").

A production asynchronous server (Papaya: Huba et al., MLSys 2022) never holds K updates: it adds each one
to a running sum as it arrives. Where an aggregator's weights are per update (``Aggregator.per_update``:
FedBuff's staleness, FedAsync's, TierFuse's staleness and utility, FedAvg's sample count), the server here
does the same. Each update's L2 norm (and whether it is finite) is measured as it is stored, with the rest
of its device call (:meth:`RunningSum.measure`: what :func:`~.update_guard.update_health` measures of a
buffer); at its arrival the update guard judges it (:func:`~.update_guard.judge_arrival`), and a group of
arrivals at a time (:data:`FOLD_ROWS`) the aggregator weighs the accepted ones and :func:`fold_page` adds
``sum_i w_i delta_i`` to the sum, a device array the size of one update, in place (donated), reading the
rows where they lie in the delta store; their rows are then free. At the aggregation the sum is divided by
K' (the updates accepted) or by their total weight (``normalize``), as
:func:`~..policies.aggregators.base.weighted_mean_delta` divides the buffer's.

Results are the buffered path's up to the order of a float32 sum (page by page in arrival order here, XLA's
dot over the buffer there). An update that the guard's median rule may still reject once the buffer is
complete (``median_over="buffer"``) keeps its row until the buffer so far decides it, at the latest until
the aggregation, and is folded in then if accepted.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..models.base import Params
from ..policies.aggregators.base import Aggregator
from ..policies.aggregators.deltas import update_norms
from .config import FleetConfig
from .update_guard import UpdateGuardConfig, update_health


# Updates folded in together: one device call per delta-store page their rows lie in, instead of one per
# update. On 2 loaded CPU cores a jitted call costs ~50 us to dispatch, and a device-to-host read that waits for
# a call ~0.6 ms, against ~0.1 ms of arithmetic on a 0.79 MB update (BENCHMARKS.md, "Memory bounded by a
# budget"); an update's norm is measured as it is stored (LazyExecutor.measure), with the rest of its device
# call, so its arrival reads no device value. Its row is freed once its group is folded in.
FOLD_ROWS = 32


def folds_on_arrival(aggregator: Aggregator, config: FleetConfig) -> bool:
    """Whether a run folds its updates into a running sum as they arrive: the aggregator's weights are
    per update and it needs nothing of the whole buffer (no ``combine``, no ``augment_info``), the fleet
    does not force the buffer (``aggregation_buffer="always"``), and an aggregation takes more updates than
    one group (:data:`FOLD_ROWS`; a buffer of one group is gathered and reduced as the buffered path does:
    the same memory, and the buffered path's numbers bit for bit)."""
    return (bool(getattr(aggregator, "per_update", False)) and aggregator.combine is None
            and aggregator.augment_info is None and config.aggregation_buffer == "auto"
            and config.aggregation_goal > FOLD_ROWS)


def held_rows(aggregation_goal: int, guard: UpdateGuardConfig, size_known: bool = True) -> int:
    """Delta rows a running aggregation of ``aggregation_goal`` updates holds until it closes, for the memory
    budget: none where every update is judged at its arrival (no median rule, or ``median_over="arrivals"``);
    else those the median over the whole buffer may still reject. Read as zero norms, the arrivals to come
    keep the median's lower bound at zero until about half the buffer (less the recent norms the guard
    remembers) has arrived, so about K/2 at the run's start; more where the norms spread wider than
    ``max_norm_ratio`` (the store then goes over rather than stall: the peak is measured). Where the
    aggregation's size is not known (``size_known=False``: a sync round that keeps late updates), all of them."""
    if not guard.enabled or guard.max_norm_ratio is None or guard.median_over == "arrivals":
        return 0
    return aggregation_goal // 2 + 1 if size_known else aggregation_goal


@dataclasses.dataclass
class Arrived:
    """One update of the running aggregation, as its arrival left it (host; snapshots)."""

    norm: float  # its L2 norm (float32's value): the guard's
    finite: bool
    delta_norm: float  # its norm after the aggregator's transform_deltas (BufferInfo.delta_norms)
    decided: bool  # the guard's verdict is final (else its row is held until the aggregation)
    accepted: bool
    nonfinite: bool
    over_norm: bool
    weight: float = 0.0  # the aggregator's, once weighed (accepted updates only)
    folded: bool = False  # in the running sum


@partial(jax.jit, donate_argnums=0)
def fold_page(acc: Params, page: Params, rows: jax.Array, weights: jax.Array, count: jax.Array) -> Params:
    """``acc + sum_{i < count} weights_i page[rows_i]``, leaf by leaf, in place (``acc`` donated), one row after
    another: each read where it lies (a gather of the rows first would be a fresh array, and its page
    faults cost more than the arithmetic). ``rows`` and ``weights`` have a fixed length (one compilation)."""
    def add(i, a):
        return jax.tree_util.tree_map(
            lambda x, p: x + weights[i] * jax.lax.dynamic_index_in_dim(p, rows[i], keepdims=False), a, page)
    return jax.lax.fori_loop(0, count, add, acc)


def _fold_transformed(acc: Params, page: Params, rows: jax.Array, weights: jax.Array, count: jax.Array,
                      transform=None) -> Params:
    """:func:`fold_page` for an aggregator with ``transform_deltas``: the rows gathered (it works on a stack),
    transformed and weighed (the rows past ``count`` at weight 0)."""
    taken = transform(jax.tree_util.tree_map(lambda p: p[rows], page))
    w = jnp.where(jnp.arange(weights.shape[0]) < count, weights, 0.0)
    return jax.tree_util.tree_map(
        lambda a, t: a + jnp.sum(w.reshape((-1,) + (1,) * (t.ndim - 1)) * t, axis=0), acc, taken)


@jax.jit
def divided(acc: Params, denom: jax.Array) -> Params:
    """The aggregate ``acc / denom`` (K', or the accepted updates' total weight)."""
    return jax.tree_util.tree_map(lambda a: a / denom, acc)


class RunningSum:
    """``sum_i w_i delta_i`` over the updates of the aggregation in progress, and what their arrivals left.

    ``template``: one update's leaves (shapes and dtypes); ``transform``: the aggregator's
    ``transform_deltas`` (row by row: a per-update aggregator's is), applied to the updates before they are
    measured for their weights and folded in; ``group``: updates received before they are judged, weighed
    and folded in together (:data:`FOLD_ROWS`).
    """

    def __init__(self, template: Params, transform=None, group: int = FOLD_ROWS):
        # the sum's dtype: the update's times a float32 weight (float32, or float64 under jax_enable_x64)
        self._template = jax.tree_util.tree_map(
            lambda r: jax.ShapeDtypeStruct(np.shape(r), jnp.promote_types(r.dtype, jnp.float32)), template)
        self.transform = transform
        self.group = max(1, int(group))
        self._fold = fold_page if transform is None else jax.jit(partial(_fold_transformed, transform=transform),
                                                                 donate_argnums=0)
        self.acc: Params | None = None  # None: nothing folded in yet (zeros)
        self.pending: list = []  # updates received and not yet judged (their rows in the delta store)
        self.held: list = []  # updates judged whose verdict waits for more of the buffer (rows in the store)
        self.arrivals: dict[int, Arrived] = {}  # task id -> its arrival as judged, in arrival order
        # the update guard's recent norms and the finite norms of this aggregation's arrivals, ascending (the
        # median's pool; None until the aggregation's first arrival)
        self.pool: list[float] | None = None

    def __len__(self) -> int:
        return len(self.arrivals) + len(self.pending)

    def measure(self, rows: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(finite, L2 norm, norm after ``transform``) of stacked updates (leaves (B, ...)): what
        :func:`~.update_guard.update_health` measures of a buffer, one value a row."""
        finite, norms = update_health(rows)
        transformed = norms if self.transform is None else np.asarray(update_norms(self.transform(rows)))
        return finite, norms, transformed

    def fold(self, store, slots, weights) -> None:
        """Adds the updates at delta-store ``slots`` (after ``transform``) times ``weights`` to the sum: one
        call per page they lie in and ``group`` of them (those at weight 0 are left out)."""
        weights = np.asarray(weights, np.float32)
        slots = np.asarray(slots, np.int64)[weights != 0]
        weights = weights[weights != 0]
        if not len(slots):
            return
        if self.acc is None:
            self.acc = self._zeros()
        page_of, row = np.divmod(slots, store.page_rows)
        for page in np.unique(page_of):
            mine = np.flatnonzero(page_of == page)
            for start in range(0, len(mine), self.group):
                part = mine[start:start + self.group]
                rows = np.full(self.group, row[part[0]], np.int32)  # the padding repeats a row taken, unused
                rows[:len(part)] = row[part]
                w = np.zeros(self.group, np.float32)
                w[:len(part)] = weights[part]
                self.acc = self._fold(self.acc, store.pages[page], rows, w, np.int32(len(part)))

    def mean(self, denom: float) -> Params:
        """The sum over ``denom``; zeros where nothing was folded in."""
        return divided(self._zeros() if self.acc is None else self.acc, jnp.float32(denom))

    def reset(self) -> None:
        """The next aggregation starts from nothing."""
        self.acc, self.pending, self.held, self.arrivals, self.pool = None, [], [], {}, None

    def state_dict(self) -> dict:
        return {"acc": self.acc, "pending": list(self.pending), "held": list(self.held),
                "arrivals": dict(self.arrivals), "pool": None if self.pool is None else list(self.pool)}

    def load_state_dict(self, state: dict) -> None:
        self.acc = state["acc"]
        self.pending, self.held = list(state["pending"]), list(state["held"])
        self.arrivals = {int(k): v for k, v in state["arrivals"].items()}
        self.pool = None if state["pool"] is None else [float(v) for v in state["pool"]]

    def _zeros(self) -> Params:
        leaves, tree = jax.tree_util.tree_flatten(self._template)
        return _zeros_like(tree, tuple((tuple(s.shape), jnp.dtype(s.dtype)) for s in leaves))


@partial(jax.jit, static_argnums=(0, 1))
def _zeros_like(tree, specs) -> Params:  # one compiled call: op by op, each leaf's zeros is a dispatch
    return jax.tree_util.tree_unflatten(tree, [jnp.zeros(shape, dtype) for shape, dtype in specs])
