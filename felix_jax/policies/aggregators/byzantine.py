"""Byzantine-robust selection: Krum, Multi-Krum (Blanchard et al., NeurIPS'17) and Bulyan (El Mhamdi et al.,
ICML'18).

With n updates ``V_1 .. V_n`` of which at most ``f`` are Byzantine, Krum scores each update by its squared
distances to its ``n - f - 2`` nearest neighbours (Blanchard et al., Sec. 4):

    s(i) = sum_{i -> j} ||V_i - V_j||^2    (i -> j: V_j is among the n - f - 2 closest vectors to V_i)

and outputs ``V_i*``, ``i* = argmin_i s(i)``; it is Byzantine-resilient for ``2f + 2 < n`` (Sec. 4). Multi-Krum
(Sec. 5) averages the ``m`` updates of lowest score (``m = 1`` is Krum, ``m = n`` the mean; ``m = n - f`` the
paper's and Flower's choice, the default here). Bulyan (El Mhamdi et al., Sec. 4, for ``n >= 4f + 3``) first
selects ``theta = n - 2f`` updates by iterated Krum (Krum over the updates not yet selected, ``theta`` times),
then per coordinate ``c`` averages the ``beta = theta - 2f`` selected values closest to their median:

    G_c = (1 / beta) sum_{X in M_c} X_c,    M_c = argmin_{R in S, |R| = beta} sum_{X in R} |X_c - median_c(S)|

Each rule is split in two over the aggregator's hooks (:class:`~.base.Aggregator`). ``augment_info`` runs the
selection on the device (:func:`krum_selection`, :func:`bulyan_selection`: one jitted call over the whole
buffer, the pairwise squared distances as one (K, K) matrix) and the weights are that selection, 1 for a
selected update and 0 for the others: ``events.csv`` then logs which updates each aggregation took and
``summary.json`` counts them (an adversarial update the rule left out is an update of weight 0). ``combine``
reduces the selected rows: their mean (Krum, Multi-Krum), or the ``beta`` values nearest the median per
coordinate (Bulyan). :func:`multi_krum_update` and :func:`bulyan_update` are the whole rules in one call.

Fixed shapes: every call sees all K rows with a (K,) mask; the rows outside it (rejected by the update guard)
are at distance +inf from every other, so they are no one's neighbour and never selected. ``n`` is the
accepted count K' (``keep.sum()``, inside jit): one compilation per (K, leaf shapes, f, m), whatever the mask.
Ties go to the earlier row of the buffer (its arrival order): equal scores select the lower index, and in
Bulyan's coordinate-wise step the values equally far from the median are taken in row order. Distances are
summed over every leaf of the update, in float32 (or wider), each entry as ``sum((V_j - V_i)^2)`` (not from
Gram products, whose cancellation could break ties between equal distances).

Too few updates: the rule needs ``n >= 2f + 3`` (Krum, Multi-Krum) or ``n >= 4f + 3`` (Bulyan). A scenario
whose ``aggregation_goal`` K is below that is refused when it is built (:func:`too_few_updates`). A buffer
where the update guard leaves fewer accepted updates than that selects none: every weight is 0, the server
takes no step and the version advances (as for a buffer of zero weights); the rule is never run with fewer
updates than its resilience needs. Multi-Krum's ``m`` is then at most K'. Bulyan's iterated Krum runs on
ever smaller sets (down to ``2f + 1`` updates), where ``n - f - 2`` would be below one: each step counts at
least one neighbour, as Flower's ``aggregate_bulyan`` does.

The server step is ``w <- w + server_lr * update`` with ``server_lr = 0.3`` (FedBuff's async eta, as the
trimmed mean and median, :mod:`.robust`); ``aggregator.server_lr=1`` is the classic rule that makes the
selected (local) model the new one.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import ClassVar, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo


def _check_f_and_server_lr(f: int, server_lr: float) -> None:
    if isinstance(f, bool) or not isinstance(f, int) or f < 0:
        raise ValueError(f"f={f!r}: must be a whole number >= 0")
    if not (math.isfinite(server_lr) and server_lr > 0):
        raise ValueError(f"server_lr={server_lr!r}: must be a finite number > 0")


@dataclasses.dataclass(frozen=True)
class KrumConfig:
    f: int = 1  # Byzantine updates tolerated per aggregation (needs K >= 2f + 3)
    server_lr: float = 0.3  # eta (the paper's async runs, as FedBuff's)

    RANGES: ClassVar[Mapping[str, Range]] = {"f": Range.at_least(0), "server_lr": Range.above(0)}

    def __post_init__(self):
        _check_f_and_server_lr(self.f, self.server_lr)


@dataclasses.dataclass(frozen=True)
class MultiKrumConfig:
    f: int = 1  # Byzantine updates tolerated per aggregation (needs K >= 2f + 3)
    m: int | None = None  # updates averaged; None: K' - f (Blanchard et al.'s experiments, Flower)
    server_lr: float = 0.3  # eta (the paper's async runs, as FedBuff's)

    RANGES: ClassVar[Mapping[str, Range]] = {"f": Range.at_least(0), "m": Range.at_least(1),
                                             "server_lr": Range.above(0)}
    HELP: ClassVar[Mapping[str, str]] = {"m": "none: K - f, the accepted updates less f"}

    def __post_init__(self):
        _check_f_and_server_lr(self.f, self.server_lr)
        if self.m is not None and (isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 1):
            raise ValueError(f"m={self.m!r}: must be a whole number >= 1 (or none: K - f)")


@dataclasses.dataclass(frozen=True)
class BulyanConfig:
    f: int = 1  # Byzantine updates tolerated per aggregation (needs K >= 4f + 3)
    server_lr: float = 0.3  # eta (the paper's async runs, as FedBuff's)

    RANGES: ClassVar[Mapping[str, Range]] = {"f": Range.at_least(0), "server_lr": Range.above(0)}

    def __post_init__(self):
        _check_f_and_server_lr(self.f, self.server_lr)


def required_updates(config) -> int | None:
    """The fewest updates the rule configured by ``config`` runs on: ``2f + 3`` for Krum and Multi-Krum
    (``n > 2f + 2``), ``4f + 3`` for Bulyan; None for a config that is no rule of this module's."""
    if isinstance(config, (KrumConfig, MultiKrumConfig)):
        return 2 * config.f + 3
    if isinstance(config, BulyanConfig):
        return 4 * config.f + 3
    return None


def too_few_updates(config, name: str, aggregation_goal: int) -> str | None:
    """Why aggregator ``name`` configured by ``config`` cannot run on ``aggregation_goal`` updates per
    aggregation, in one line; None when it can (or ``config`` is no rule of this module's).

    >>> too_few_updates(KrumConfig(f=1), "krum", 4)
    'aggregator krum with f=1 needs at least 2f + 3 = 5 updates per aggregation (n > 2f + 2, Blanchard et al. \
NeurIPS 2017), but aggregation_goal=4: set aggregation_goal >= 5 or a smaller aggregator.f'
    >>> too_few_updates(BulyanConfig(f=1), "bulyan", 7) is None
    True
    """
    need = required_updates(config)
    if need is None:
        return None
    if aggregation_goal < need:
        rule = ("at least 4f + 3 = {} updates per aggregation (El Mhamdi et al. ICML 2018)"
                if isinstance(config, BulyanConfig) else
                "at least 2f + 3 = {} updates per aggregation (n > 2f + 2, Blanchard et al. NeurIPS 2017)")
        return (f"aggregator {name} with f={config.f} needs {rule.format(need)}, but aggregation_goal="
                f"{aggregation_goal}: set aggregation_goal >= {need} or a smaller aggregator.f")
    m = getattr(config, "m", None)
    if m is not None and m > aggregation_goal:
        return (f"aggregator {name} with m={m} averages more updates than an aggregation holds "
                f"(aggregation_goal={aggregation_goal}): set aggregator.m <= {aggregation_goal}, or none (K - f)")
    return None


def plain_mean_reason(config, accepted: int) -> str | None:
    """Why the rule configured by ``config`` is the plain mean of ``accepted`` updates (f = 0 and Multi-Krum's
    m or Bulyan's beta covering them all), in a few words; None when it is not.

    >>> plain_mean_reason(MultiKrumConfig(f=0), 5)
    'f=0 and m = K - f = 5 average every update'
    >>> plain_mean_reason(BulyanConfig(f=0), 5)
    'f=0: Bulyan selects theta = 5 and averages beta = 5 values, all of them'
    >>> plain_mean_reason(MultiKrumConfig(f=1), 5) is None
    True
    """
    if isinstance(config, MultiKrumConfig) and (config.m if config.m is not None else accepted - config.f) >= accepted:
        return f"f={config.f} and m = {'K - f = ' if config.m is None else ''}{accepted} average every update"
    if isinstance(config, BulyanConfig) and config.f == 0:
        return f"f=0: Bulyan selects theta = {accepted} and averages beta = {accepted} values, all of them"
    return None


# ---------------------------------------------------------------- the selections (device)
def _wide(x: jax.Array) -> jax.Array:
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def squared_distances(deltas) -> jax.Array:
    """(K, K): ``||V_i - V_j||^2`` over every leaf of the (K, ...) ``deltas``, entry by entry (exactly
    symmetric, 0 on the diagonal). Row by row (``lax.map``): memory K x the update, not K^2 x."""
    rows = [_wide(leaf).reshape(leaf.shape[0], -1) for leaf in jax.tree_util.tree_leaves(deltas)]
    k = rows[0].shape[0]
    return jax.lax.map(lambda i: sum(jnp.sum(jnp.square(x - x[i]), axis=1) for x in rows), jnp.arange(k))


def krum_scores(distances: jax.Array, alive: jax.Array, f: int) -> jax.Array:
    """(K,): Krum's ``s(i)`` of each row ``alive`` among the ``alive`` rows (n = ``alive.sum()``): the sum of
    its ``n - f - 2`` smallest squared distances to the other alive rows (at least one, at most ``n - 1``);
    +inf for the rows not alive, and at most the largest finite float for those alive (so an alive row always
    ranks first, even at overflowing distances)."""
    k = distances.shape[0]
    n = alive.sum()
    neighbours = jnp.minimum(jnp.maximum(n - f - 2, 1), n - 1)
    others = alive[None, :] & ~jnp.eye(k, dtype=bool)
    nearest = jnp.sort(jnp.where(others, distances, jnp.inf), axis=1)
    score = jnp.where(jnp.arange(k)[None, :] < neighbours, nearest, 0.0).sum(axis=1)
    return jnp.where(alive, jnp.minimum(score, jnp.finfo(score.dtype).max), jnp.inf)


@partial(jax.jit, static_argnames=("f", "m"))
def krum_selection(deltas, keep: jax.Array, *, f: int, m: int | None = 1) -> jax.Array:
    """(K,) bool: the updates Multi-Krum averages among the rows ``keep`` (``m=1``: Krum's one; ``m=None``:
    K' - f of them; m is at most K'), the ``m`` of lowest score, ties to the lower row; none when K' < 2f + 3."""
    accepted = keep.sum()
    score = krum_scores(squared_distances(deltas), keep, f)
    rank = jnp.argsort(jnp.argsort(score, stable=True), stable=True)  # each row's place in score order
    count = jnp.minimum(accepted - f if m is None else m, accepted)
    return keep & (rank < count) & (accepted >= 2 * f + 3)


@partial(jax.jit, static_argnames=("f",))
def bulyan_selection(deltas, keep: jax.Array, *, f: int) -> jax.Array:
    """(K,) bool: Bulyan's ``theta = K' - 2f`` updates among the rows ``keep``, chosen by iterated Krum (each
    step Krum's pick among the rows not chosen yet, with the same f); none when K' < 4f + 3."""
    distances = squared_distances(deltas)
    accepted = keep.sum()
    theta = accepted - 2 * f

    def step(i, state):
        alive, chosen = state
        pick = jnp.argmin(krum_scores(distances, alive, f))  # the first of equal scores
        take = i < theta
        return alive.at[pick].set(alive[pick] & ~take), chosen.at[pick].set(chosen[pick] | take)

    _, chosen = jax.lax.fori_loop(0, keep.shape[0], step, (keep, jnp.zeros_like(keep)))
    return chosen & (accepted >= 4 * f + 3)


# ---------------------------------------------------------------- the reductions (device)
@jax.jit
def selected_mean(deltas, keep: jax.Array):
    """The mean of the rows ``keep`` of the (K, ...) ``deltas`` leaves (zeros when none): Krum's and
    Multi-Krum's output over their selection."""
    count = keep.sum()

    def mean(d):
        mask = keep.reshape((-1,) + (1,) * (d.ndim - 1))
        total = jnp.where(mask, _wide(d), 0.0).sum(axis=0)
        return (total / jnp.maximum(count, 1).astype(total.dtype)).astype(d.dtype)

    return jax.tree_util.tree_map(mean, deltas)


@partial(jax.jit, static_argnames=("f",))
def closest_to_median_mean(deltas, keep: jax.Array, *, f: int):
    """Bulyan's second step over the ``theta = keep.sum()`` rows ``keep``: per coordinate, the mean of the
    ``beta = theta - 2f`` values nearest their median (the mean of the two middle values at an even theta);
    equally near values in row order. Zeros when ``beta < 1``."""
    theta = keep.sum()
    beta = theta - 2 * f

    def reduce(d):
        wide = _wide(d)
        mask = keep.reshape((-1,) + (1,) * (d.ndim - 1))
        ordered = jnp.sort(jnp.where(mask, wide, jnp.inf), axis=0)  # the theta kept values first
        low = jax.lax.dynamic_index_in_dim(ordered, jnp.maximum((theta - 1) // 2, 0), keepdims=False)
        high = jax.lax.dynamic_index_in_dim(ordered, jnp.maximum(theta // 2, 0), keepdims=False)
        median = 0.5 * low + 0.5 * high
        order = jnp.argsort(jnp.where(mask, jnp.abs(wide - median), jnp.inf), axis=0, stable=True)
        nearest = jnp.take_along_axis(wide, order, axis=0)
        pos = jnp.arange(d.shape[0]).reshape((-1,) + (1,) * (d.ndim - 1))
        total = jnp.where(pos < beta, nearest, 0.0).sum(axis=0)
        return jnp.where(beta >= 1, total / jnp.maximum(beta, 1).astype(total.dtype), 0.0).astype(d.dtype)

    return jax.tree_util.tree_map(reduce, deltas)


def multi_krum_update(deltas, keep: jax.Array, *, f: int, m: int | None = None):
    """Multi-Krum over the rows ``keep`` in one call (``m=1``: Krum): the mean of its selection."""
    return selected_mean(deltas, krum_selection(deltas, keep, f=f, m=m))


def bulyan_update(deltas, keep: jax.Array, *, f: int):
    """Bulyan over the rows ``keep`` in one call: iterated Krum, then the coordinate-wise beta nearest the median."""
    return closest_to_median_mean(deltas, bulyan_selection(deltas, keep, f=f), f=f)


# ---------------------------------------------------------------- the aggregators
class SelectionInfo(NamedTuple):
    """:class:`BufferInfo` plus the rule's selection (``augment_info``)."""

    staleness: np.ndarray  # (K,) int
    num_samples: np.ndarray  # (K,) float
    utility: np.ndarray  # (K,) float
    loss_mean: np.ndarray  # (K,) float
    delta_norms: np.ndarray  # (K,) float
    selected: np.ndarray  # (K,) bool: the rule selected the update
    label_time_s: np.ndarray | None = None  # as BufferInfo's
    proxy_fraction: np.ndarray | None = None
    start_loss: np.ndarray | None = None
    work_fraction: np.ndarray | None = None

    @classmethod
    def of(cls, info: BufferInfo, selected) -> "SelectionInfo":
        return cls(**info._asdict(), selected=np.asarray(selected, bool))


def selection_weights(info: SelectionInfo) -> np.ndarray:
    """1 per selected update, 0 for the others (float64)."""
    selected = getattr(info, "selected", None)
    if selected is None:
        raise TypeError("a Krum / Bulyan aggregator weighs its selection: it needs the SelectionInfo its "
                        "augment_info makes from the buffer")
    return np.asarray(selected, np.float64)


def _selecting(name: str, select, combine, server_lr: float) -> Aggregator:
    def augment_info(info: BufferInfo, deltas) -> SelectionInfo:
        # the server marks the rows the update guard rejected with staleness -1 (zero deltas, not updates)
        keep = jnp.asarray(np.asarray(info.staleness) >= 0)
        return SelectionInfo.of(info, np.asarray(select(deltas, keep)))

    return Aggregator(name, selection_weights, normalize=True, server_lr=server_lr, accepts_stale=True,
                      augment_info=augment_info, combine=combine)


def make_krum(config: KrumConfig = KrumConfig()) -> Aggregator:
    return _selecting("krum", partial(krum_selection, f=config.f, m=1),
                      lambda deltas, keep, weights: selected_mean(deltas, keep), config.server_lr)


def make_multi_krum(config: MultiKrumConfig = MultiKrumConfig()) -> Aggregator:
    return _selecting("multi-krum", partial(krum_selection, f=config.f, m=config.m),
                      lambda deltas, keep, weights: selected_mean(deltas, keep), config.server_lr)


def make_bulyan(config: BulyanConfig = BulyanConfig()) -> Aggregator:
    return _selecting("bulyan", partial(bulyan_selection, f=config.f),
                      lambda deltas, keep, weights: closest_to_median_mean(deltas, keep, f=config.f),
                      config.server_lr)
