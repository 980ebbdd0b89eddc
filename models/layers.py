"""Layers written for fast per-client vectorization.

Why a hand-written 3x3 convolution: when the cohort engine vmaps over per-client
parameters, ``flax.linen.Conv`` becomes a grouped convolution, which XLA's CPU
backend runs 7-10x slower than a loop over clients, and a conv weight gradient
inside ``lax.scan`` is 20-45x slower on CPU unless unrolled (jax-ml/jax#12868).
Writing the 3x3 conv as 9 shifted slices concatenated on the channel axis and one
matmul ("im2col") turns both into batched matmuls. The parameters (``kernel``
(3, 3, Cin, Cout), ``bias`` (Cout,)) and initialisers are exactly those of
``nn.Conv``, so parameter trees are interchangeable and outputs equal (tested).
"""

from __future__ import annotations

from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

Padding = Literal["VALID", "SAME"]


def conv3x3_shifted(x: jax.Array, kernel: jax.Array, bias: jax.Array | None, stride: int = 1,
                    padding: Padding = "VALID") -> jax.Array:
    """3x3 convolution (NHWC, HWIO) as 9 shifted slices + one matmul."""
    if padding == "SAME":  # XLA's rule: out = ceil(in / stride), extra padding goes high
        pads = []
        for size in x.shape[1:3]:
            total = max((-(-size // stride) - 1) * stride + 3 - size, 0)
            pads.append((total // 2, total - total // 2))
        x = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    n, h, w, c = x.shape
    out_h = (h - 3) // stride + 1
    out_w = (w - 3) // stride + 1
    slices = [
        x[:, i: i + stride * (out_h - 1) + 1: stride, j: j + stride * (out_w - 1) + 1: stride, :]
        for i in range(3)
        for j in range(3)
    ]
    patches = jnp.concatenate(slices, axis=-1)  # (N, out_h, out_w, 9 * Cin), (i, j, c) order
    y = patches @ kernel.reshape(9 * c, kernel.shape[-1])
    return y if bias is None else y + bias


class Conv3x3(nn.Module):
    """``nn.Conv(features, (3, 3), strides, padding)`` as 9 shifted slices + a matmul."""

    features: int
    stride: int = 1
    padding: Padding = "VALID"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (3, 3, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,)) if self.use_bias else None
        return conv3x3_shifted(x, kernel, bias, self.stride, self.padding)


ConvImpl = Literal["shift", "flax"]


def conv3x3(impl: ConvImpl, features: int, *, stride: int = 1, padding: Padding = "VALID",
            use_bias: bool = True, name: str | None = None) -> nn.Module:
    """A 3x3 conv layer in the chosen formulation; both give the same parameter tree."""
    if impl == "flax":
        return nn.Conv(features, (3, 3), strides=stride, padding=padding, use_bias=use_bias, name=name)
    if impl == "shift":
        return Conv3x3(features, stride=stride, padding=padding, use_bias=use_bias, name=name)
    raise ValueError(f"unknown conv impl {impl!r}; expected 'shift' or 'flax'")


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2/2 max pooling in floor mode (PyTorch's default) via a reshape.

    A reshape + max keeps the backward pass a plain select, which vectorizes over
    clients better on CPU than ``reduce_window``'s select-and-scatter.
    """
    n, h, w, c = x.shape
    x = x[:, : h // 2 * 2, : w // 2 * 2, :]
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
