"""The update guard: client updates must be finite and of plausible size (docs/architecture.md "Nothing lost").

One client that sends NaN, Inf or a wildly scaled update must not poison the
global model, and must not pass silently either. Before any aggregator sees a
buffer, the server measures every update (:func:`update_health`: per-update
finiteness and global L2 norm; one jitted call, the norms the aggregators need
anyway, unless a norm is not finite) and decides on the host
(:func:`judge_updates`, a pure function) which ones to drop, by reason:

* ``nonfinite``: the update holds a NaN or an Inf;
* ``norm``: its L2 norm exceeds ``max_norm`` (absolute), or ``max_norm_ratio``
  times the median norm of recently accepted updates (this buffer's finite
  updates included, so one outlier among K cannot hide behind itself), or
  overflows float32 (entries beyond about 1e19).

The norms of accepted updates feed the next buffer's median
(:func:`remember_norms`).

A server that folds each update into a running sum as it arrives (fleet/running_sum.py)
judges it then (:func:`judge_arrival`), with the same rules. Only the median rule
needs the buffer's later norms. With ``median_over="buffer"`` (the default) the
verdict stays the one :func:`judge_updates` gives the whole buffer: an update is
accepted at its arrival only where no later arrivals could lower the median enough
to reject it (the median with every arrival still to come read as a zero norm), and
held until the aggregation otherwise. With ``median_over="arrivals"`` each update is
judged at its arrival against the median of the recent norms and this buffer's
arrivals so far, its own included: the buffer's last arrival is judged as
:func:`judge_updates` would judge it, an earlier one without the norms that come
after it. :func:`tree_all_finite` checks the global model after
the server step; a model that is non-finite even so ends the run as diverged, and
so do ``max_empty_buffers`` buffers in a row without one accepted update (every
client's training blows up, e.g. a learning rate far too large: the model would
never change again).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..options import Range
from ..policies.aggregators.deltas import update_norms


MEDIAN_OVER = ("buffer", "arrivals")


@dataclasses.dataclass(frozen=True)
class UpdateGuardConfig:
    """Which client updates the server accepts.

    >>> UpdateGuardConfig(max_norm_ratio=5.0).history
    100
    """

    enabled: bool = True  # False: every update reaches the aggregator (the divergence stop still applies)
    max_norm_ratio: float | None = 10.0  # reject norm > ratio * median of recent accepted norms; None: off
    history: int = 100  # accepted norms kept for the median
    min_history: int = 5  # norms (recent + this buffer's finite ones) needed before the ratio rule applies
    max_norm: float | None = None  # absolute bound on an update's L2 norm; None: off
    max_empty_buffers: int | None = 5  # stop as diverged after this many buffers in a row had no update accepted
    # whose norms the ratio rule's median is over: "buffer" (the recent norms and the whole buffer's; an update
    # folded in as it arrives is held until the aggregation where later arrivals could still reject it) or
    # "arrivals" (the recent norms and this buffer's so far: every update judged at its arrival)
    median_over: str = "buffer"

    RANGES: ClassVar[Mapping[str, Range]] = {
        "max_norm_ratio": Range.above(1), "history": Range.at_least(1), "min_history": Range.at_least(1),
        "max_norm": Range.above(0), "max_empty_buffers": Range.at_least(1)}

    def __post_init__(self):
        if not isinstance(self.enabled, bool):
            raise ValueError(f"update guard: enabled must be true or false, got {self.enabled!r}")
        for name in ("max_norm_ratio", "max_norm"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"update guard: {name} must be a finite number or None, got {v!r}")
        if self.max_norm_ratio is not None and self.max_norm_ratio <= 1.0:
            raise ValueError(f"update guard: max_norm_ratio must be > 1 (a multiple of the median norm) or None, "
                             f"got {self.max_norm_ratio!r}")
        if self.max_norm is not None and self.max_norm <= 0.0:
            raise ValueError(f"update guard: max_norm must be > 0 or None, got {self.max_norm!r}")
        if self.median_over not in MEDIAN_OVER:
            raise ValueError(f"update guard: median_over must be one of {', '.join(MEDIAN_OVER)}, "
                             f"got {self.median_over!r}")
        for name in ("history", "min_history", "max_empty_buffers"):
            v = getattr(self, name)
            if v is None and name == "max_empty_buffers":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                allowed = "an integer >= 1 or None" if name == "max_empty_buffers" else "an integer >= 1"
                raise ValueError(f"update guard: {name} must be {allowed}, got {v!r}")


class Verdict(NamedTuple):
    """The guard's decision on K updates (host numpy)."""

    accepted: np.ndarray  # (K,) bool
    nonfinite: np.ndarray  # (K,) bool: rejected, holds NaN or Inf
    over_norm: np.ndarray  # (K,) bool: rejected, finite but its norm is out of bounds
    reference_norm: float | None  # the median the ratio rule used; None when it did not apply


@jax.jit
def rows_finite(deltas) -> jax.Array:
    """(K,) bool: every entry of update i is finite."""
    leaves = [d.reshape(d.shape[0], -1) for d in jax.tree_util.tree_leaves(deltas)]
    return jnp.stack([jnp.all(jnp.isfinite(d), axis=1) for d in leaves]).all(axis=0)


def update_health(deltas) -> tuple[np.ndarray, np.ndarray]:
    """Per-update finiteness and global L2 norm of K stacked updates (leaves (K, ...)), on the host.

    Returns ``(finite, norms)``: (K,) bool and (K,) float32. The norms are
    :func:`~felix_jax.policies.aggregators.deltas.update_norms`, one jitted call;
    every entry is finite exactly when the norm is, except when the squares of
    finite entries overflow, so only a buffer with a non-finite norm pays a
    second call (:func:`rows_finite`) to tell the two apart.
    """
    norms = np.asarray(update_norms(deltas))
    finite = np.isfinite(norms)
    if not finite.all():
        finite = np.asarray(rows_finite(deltas))
    return finite, norms


@jax.jit
def zero_rejected(deltas, accepted: jax.Array):
    """Rejected rows replaced by zeros (``NaN * 0`` is NaN, so zero weight alone is not enough)."""
    def zero(d):
        keep = accepted.reshape((-1,) + (1,) * (d.ndim - 1))
        return jnp.where(keep, d, jnp.zeros((), d.dtype))

    return jax.tree_util.tree_map(zero, deltas)


@jax.jit
def tree_all_finite(tree) -> jax.Array:
    """True when every entry of every leaf is finite (a scalar bool)."""
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]).all()


def judge_updates(finite, norms, recent, config: UpdateGuardConfig) -> Verdict:
    """Accept or reject each of K updates (host side, pure).

    ``finite`` and ``norms`` come from :func:`update_health`; ``recent`` holds the
    norms of previously accepted updates (oldest first). With the guard disabled
    every update is accepted.

    >>> v = judge_updates([True, True, False, True], [1.0, 2.0, float("nan"), 50.0], [1.0, 3.0],
    ...                   UpdateGuardConfig(max_norm_ratio=10.0, min_history=3))
    >>> v.accepted.tolist(), v.nonfinite.tolist(), v.over_norm.tolist(), v.reference_norm
    ([True, True, False, False], [False, False, True, False], [False, False, False, True], 2.0)
    """
    finite = np.asarray(finite, bool)
    norms = np.asarray(norms, np.float64)
    k = len(norms)
    if not config.enabled:
        none = np.zeros(k, bool)
        return Verdict(np.ones(k, bool), none, none.copy(), None)
    nonfinite = ~finite
    over = finite & ~np.isfinite(norms)  # finite entries whose squares overflow: out of any bound
    if config.max_norm is not None:
        over |= finite & ~(norms <= config.max_norm)
    reference = None
    if config.max_norm_ratio is not None:
        pool = np.concatenate([np.asarray(recent, np.float64), norms[finite & np.isfinite(norms)]])
        if len(pool) >= config.min_history:
            reference = float(np.median(pool))
            if reference > 0:  # a median of zero updates bounds nothing
                over |= finite & ~(norms <= config.max_norm_ratio * reference)
            else:
                reference = None
    return Verdict(~(nonfinite | over), nonfinite, over, reference)


def remember_norms(recent, norms, verdict: Verdict, config: UpdateGuardConfig) -> np.ndarray:
    """The guard's next state: the last ``config.history`` accepted norms, oldest first."""
    kept = np.asarray(norms, np.float64)[verdict.accepted]
    return np.concatenate([np.asarray(recent, np.float64), kept])[-config.history:]


class Arrival(NamedTuple):
    """The guard's word on one update as it arrives (:func:`judge_arrival`)."""

    decided: bool  # False: the median rule may still reject it once the buffer is complete (median_over="buffer")
    accepted: bool  # when decided
    nonfinite: bool  # rejected: holds NaN or Inf
    over_norm: bool  # rejected: finite, its norm out of bounds


def median_of_sorted(pool, zeros: int = 0) -> float:
    """``np.median`` of ``pool`` (norms, ascending, all >= 0) with ``zeros`` zero norms added, without building
    them: two look-ups (the mean of the two middle values is numpy's, ``(a + b) / 2``)."""
    n = len(pool) + zeros
    upper, lower = n // 2, (n - 1) // 2  # the middle ranks (one rank when n is odd)
    high = float(pool[upper - zeros]) if upper >= zeros else 0.0
    if lower == upper:
        return high
    low = float(pool[lower - zeros]) if lower >= zeros else 0.0
    return (low + high) / 2


def judge_arrival(finite: bool, norm: float, pool, remaining: int | None, config: UpdateGuardConfig) -> Arrival:
    """One update at its arrival (host side, pure): accepted, rejected, or (``median_over="buffer"``) not
    decided until the buffer is complete.

    ``pool`` holds, in ascending order, the recent accepted norms and the finite norms of this buffer's
    arrivals so far, this one's included (the pool :func:`judge_updates` takes its median of, less the
    arrivals to come; kept sorted with ``bisect.insort``, so a median is two look-ups);
    ``remaining``: the updates the buffer will still take (None: not known). A non-finite update, one whose
    norm overflows or exceeds ``max_norm``, is rejected at once, as :func:`judge_updates` rejects it. Under
    ``median_over="buffer"`` an update is accepted at once only where the median cannot fall low enough to
    reject it whatever arrives later: adding a value no larger than the median lowers it or keeps it, so
    the lowest it can reach is the median with every arrival to come as a zero norm. Otherwise it waits.

    >>> cfg = UpdateGuardConfig(max_norm_ratio=10.0, min_history=3)
    >>> judge_arrival(True, 2.0, [1.0, 2.0, 2.0, 3.0], 1, cfg).accepted  # median >= 2 whatever comes
    True
    >>> judge_arrival(True, 2.0, [1.0, 2.0], 5, cfg).decided  # five zeros could still make the median 0
    False
    """
    if not config.enabled:
        return Arrival(True, True, False, False)
    if not finite:
        return Arrival(True, False, True, False)
    norm = float(norm)
    if not math.isfinite(norm) or (config.max_norm is not None and not norm <= config.max_norm):
        return Arrival(True, False, False, True)
    if config.max_norm_ratio is None:
        return Arrival(True, True, False, False)
    if config.median_over == "arrivals" or remaining == 0:
        reference = median_of_sorted(pool) if len(pool) >= config.min_history else 0.0
        over = reference > 0 and not norm <= config.max_norm_ratio * reference
        return Arrival(True, not over, False, over)
    if norm <= surely_accepted_below(pool, remaining, config):
        return Arrival(True, True, False, False)
    return Arrival(False, False, False, False)


def surely_accepted_below(pool, remaining: int | None, config: UpdateGuardConfig) -> float:
    """The largest norm the ratio rule accepts whatever the buffer's ``remaining`` arrivals bring (``pool``:
    the recent norms and the buffer's finite ones so far, ascending): ``max_norm_ratio`` times the lowest the
    median can fall to (every arrival to come a zero norm); 0 where that is 0 (none is sure), inf where the rule
    cannot apply (the buffer's pool stays under ``min_history``). :func:`judge_arrival` accepts a finite update at
    or under it; an update held above it can be judged again against a fuller buffer with it."""
    if config.max_norm_ratio is None or (remaining is not None and len(pool) + remaining < config.min_history):
        return math.inf
    lowest = median_of_sorted(pool, remaining) if remaining is not None and len(pool) else 0.0
    return config.max_norm_ratio * lowest if lowest > 0 else 0.0
