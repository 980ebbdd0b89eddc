"""Robust rules: the coordinate-wise trimmed mean and median (Yin et al., ICML'18).

Neither is a weighted mean, so both set the aggregator's ``combine`` hook
(:class:`~.base.Aggregator`) and the server uses it in place of the weighted
reduction. Per coordinate, the accepted updates' values are sorted and the
``t = floor(trim * K')`` lowest and ``t`` highest are dropped before the mean
(K' the accepted updates: K=5, ``trim=0.2`` drops one at each end, so
``[1, 2, 3, 4, 100] -> 3``; K'=3 drops none, a plain mean). The median keeps
the middle value (the mean of the two middle ones for an even K'). One
corrupted update among K' then moves no coordinate beyond the range of the
honest ones, however large it is.

``floor(trim * K')`` is counted exactly, ``trim`` read as the decimal it is
written as (Python's shortest repr of the float: ``0.3`` is 3/10, so
``0.3 * 10`` drops 3, never 2 from binary rounding, and ``0.3333333333 * 3``
drops 0, never 1 from a rounding allowance), and never more than
``(K'-1) // 2`` at each end: at least one value is always averaged. At
K' <= 2 the median, and at a K' where ``t = 0`` the trimmed mean, is the
plain mean of the accepted updates (:func:`plain_mean_reason`; a run says so
in its warnings).

Shapes stay static: every call sees all K rows; the rows outside ``keep``
(rejected by the update guard, zeroed by it) are pushed to ``+inf`` before the
sort, so the K' accepted values fill positions ``0 .. K'-1`` and the positions
averaged are picked by index from ``keep.sum()`` inside jit. One compilation
per (K, leaf shapes, trim), whatever the mask.

The weights are uniform (1 per accepted update): they count and log the
updates as FedBuff's do for fresh ones; the rule itself ignores staleness.
The server step is ``w <- w + server_lr * trimmed_mean``; ``server_lr = 0.3``
is the paper's async eta (FedBuff, TierFuse), so a trimmed mean with
``trim=0`` moves the model as FedBuff does on a fresh buffer. The classic sync
rule (the new model is the trimmed mean of the local models) is
``aggregator.server_lr=1``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from functools import partial
from typing import ClassVar, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo


def _check_server_lr(server_lr: float) -> None:
    if not (math.isfinite(server_lr) and server_lr > 0):
        raise ValueError(f"server_lr={server_lr!r}: must be a finite number > 0")


@dataclasses.dataclass(frozen=True)
class TrimmedMeanConfig:
    trim: float = 0.2  # share of the accepted updates dropped at each end, per coordinate
    server_lr: float = 0.3  # eta (the paper's async runs)

    RANGES: ClassVar[Mapping[str, Range]] = {"trim": Range(0.0, 0.5, high_open=True),
                                             "server_lr": Range.above(0)}

    def __post_init__(self):
        if not (0.0 <= self.trim < 0.5):
            raise ValueError(f"trim={self.trim!r}: must be in [0, 0.5)")
        _check_server_lr(self.server_lr)


@dataclasses.dataclass(frozen=True)
class MedianConfig:
    server_lr: float = 0.3  # eta (the paper's async runs)

    RANGES: ClassVar[Mapping[str, Range]] = {"server_lr": Range.above(0)}

    def __post_init__(self):
        _check_server_lr(self.server_lr)


def trimmed_count(trim: float, accepted: int) -> int:
    """``floor(trim * K')``: how many values are dropped at each end, counted exactly with ``trim`` as
    the decimal it is written as (``Fraction(repr(trim))``: ``0.29 * 100`` is 28.999... in floating
    point and drops 29; ``0.4999999999 * 2`` is below 1 and drops none), and at most ``(K'-1) // 2``,
    so at least one value is left.

    >>> trimmed_count(0.2, 5), trimmed_count(0.2, 3), trimmed_count(0.29, 100), trimmed_count(0.49, 2)
    (1, 0, 29, 0)
    >>> trimmed_count(0.3, 10), trimmed_count(0.3333333333, 3), trimmed_count(0.4999999999, 2)
    (3, 0, 0)
    """
    exact = math.floor(Fraction(repr(float(trim))) * int(accepted))
    return max(0, min(exact, (int(accepted) - 1) // 2))


def plain_mean_reason(config, accepted: int) -> str | None:
    """Why the robust rule configured by ``config`` is the plain (unweighted) mean of ``accepted``
    updates, in a few words; None when it is not (or ``config`` is no robust rule's).

    >>> plain_mean_reason(MedianConfig(), 2)
    'the median of 2 values is their mean'
    >>> plain_mean_reason(TrimmedMeanConfig(trim=0.2), 4)
    'trim=0.2 drops floor(0.2 x 4) = 0 values at each end'
    >>> plain_mean_reason(TrimmedMeanConfig(trim=0.2), 5) is None
    True
    """
    if isinstance(config, MedianConfig) and accepted <= 2:
        return "the median of one value is that value" if accepted == 1 else \
            f"the median of {accepted} values is their mean"
    if isinstance(config, TrimmedMeanConfig) and trimmed_count(config.trim, accepted) == 0:
        return f"trim={config.trim:g} drops floor({config.trim:g} x {accepted}) = 0 values at each end"
    return None


def _sorted_kept(d: jax.Array, keep: jax.Array) -> jax.Array:
    """``d``'s rows sorted per coordinate, the rows outside ``keep`` last (as +inf), in float32 or wider."""
    wide = d.astype(jnp.promote_types(d.dtype, jnp.float32))
    mask = keep.reshape((-1,) + (1,) * (d.ndim - 1))
    return jnp.sort(jnp.where(mask, wide, jnp.inf), axis=0)


def _mean_of_positions(d: jax.Array, keep: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """Per coordinate, the mean of the sorted accepted values at positions ``low .. high-1``
    (zeros when no row is kept)."""
    ordered = _sorted_kept(d, keep)
    pos = jnp.arange(d.shape[0]).reshape((-1,) + (1,) * (d.ndim - 1))
    inside = (pos >= low) & (pos < high)
    total = jnp.where(inside, ordered, 0.0).sum(axis=0)
    mean = total / jnp.maximum(high - low, 1).astype(total.dtype)
    return jnp.where(keep.any(), mean, 0.0).astype(d.dtype)


@partial(jax.jit, static_argnames=("trim",))
def trimmed_mean_update(deltas, keep: jax.Array, *, trim: float):
    """The coordinate-wise trimmed mean of the rows ``keep`` of the (K, ...) ``deltas`` leaves,
    ``floor(trim * K')`` values dropped at each end (K' = ``keep.sum()``)."""
    k = keep.shape[0]
    table = jnp.asarray([trimmed_count(trim, n) for n in range(k + 1)], jnp.int32)  # K static: a constant
    accepted = keep.sum()
    cut = table[accepted]
    return jax.tree_util.tree_map(lambda d: _mean_of_positions(d, keep, cut, accepted - cut), deltas)


@jax.jit
def median_update(deltas, keep: jax.Array):
    """The coordinate-wise median of the rows ``keep`` of the (K, ...) ``deltas`` leaves (the mean
    of the two middle values for an even K')."""
    accepted = keep.sum()
    low, high = (accepted - 1) // 2, accepted // 2 + 1
    return jax.tree_util.tree_map(lambda d: _mean_of_positions(d, keep, low, high), deltas)


def uniform_weights(info: BufferInfo) -> np.ndarray:
    """1 per update (float64): the robust rules count every accepted update alike."""
    return np.ones(len(info.staleness), np.float64)


def make_trimmed_mean(config: TrimmedMeanConfig = TrimmedMeanConfig()) -> Aggregator:
    def combine(deltas, keep, weights):
        return trimmed_mean_update(deltas, keep, trim=config.trim)

    return Aggregator("trimmed-mean", uniform_weights, normalize=True, server_lr=config.server_lr,
                      accepts_stale=True, combine=combine)


def make_median(config: MedianConfig = MedianConfig()) -> Aggregator:
    def combine(deltas, keep, weights):
        return median_update(deltas, keep)

    return Aggregator("median", uniform_weights, normalize=True, server_lr=config.server_lr,
                      accepts_stale=True, combine=combine)
