"""On-device augmentation as in the paper: random crop (4-pixel padding) + flip.

Applied to the raw stored image (before normalisation) so the padding is black,
exactly like torchvision's ``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def random_crop_flip(key: jax.Array, images: jax.Array, pad: int = 4) -> jax.Array:
    """Augments a batch (B, H, W, C) with per-image crop offsets and flips."""
    b, h, w, _ = images.shape
    k_off, k_flip = jax.random.split(key)
    offsets = jax.random.randint(k_off, (b, 2), 0, 2 * pad + 1)
    flips = jax.random.bernoulli(k_flip, 0.5, (b,))
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))

    def one(img, off, flip):
        crop = jax.lax.dynamic_slice(img, (off[0], off[1], 0), (h, w, img.shape[-1]))
        return jnp.where(flip, crop[:, ::-1, :], crop)

    return jax.vmap(one)(padded, offsets, flips)
