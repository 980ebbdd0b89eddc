"""Device-side helpers on a buffer of stacked deltas (pytree leaves shaped (K, ...)).

``update_norms`` fills :attr:`BufferInfo.delta_norms`; ``clip_or_normalize_deltas``
is TierFuse's optional server-side bound on each client's influence (paper
Sec. 3.4, "optional server-side weight clipping or L2 normalization"), applied
by the server to the buffer before :func:`apply_weighted_deltas`. Both are jitted
and shape-polymorphic only through retracing, so the server keeps K fixed
(padded) to avoid recompiles.
"""

from __future__ import annotations

import enum
from functools import partial

import jax
import jax.numpy as jnp


class DeltaBound(str, enum.Enum):
    """Per-update L2 bound: ``CLIP`` scales down to ``max_norm`` if larger;
    ``NORMALIZE`` rescales every non-zero update to norm ``max_norm``."""

    CLIP = "clip"
    NORMALIZE = "normalize"


@jax.jit
def update_norms(deltas) -> jax.Array:
    """Global L2 norm of each of the K updates, over all leaves: (K,) float32."""
    sq = [jnp.sum(jnp.square(d.astype(jnp.float32)).reshape(d.shape[0], -1), axis=1)
          for d in jax.tree_util.tree_leaves(deltas)]
    return jnp.sqrt(sum(sq))


@partial(jax.jit, static_argnames=("mode",))
def _bound(deltas, max_norm, *, mode: DeltaBound):
    norms = update_norms(deltas)
    safe = jnp.maximum(norms, jnp.finfo(jnp.float32).tiny)
    ratio = jnp.asarray(max_norm, jnp.float32) / safe
    # A zero update stays zero under either mode (0 * anything finite).
    scale = jnp.minimum(1.0, ratio) if mode is DeltaBound.CLIP else ratio
    return jax.tree_util.tree_map(
        lambda d: d * scale.reshape((-1,) + (1,) * (d.ndim - 1)).astype(d.dtype), deltas)


def clip_or_normalize_deltas(deltas, mode: DeltaBound | str | None, max_norm: float | jax.Array = 1.0):
    """Bound each update's global L2 norm; ``mode=None`` returns ``deltas`` unchanged.

    ``deltas`` leaves are (K, ...); ``mode`` is ``'clip'``, ``'normalize'`` or a
    :class:`DeltaBound`. ``max_norm`` is traced, so changing it does not recompile.
    """
    if mode is None:
        return deltas
    return _bound(deltas, max_norm, mode=DeltaBound(mode))
