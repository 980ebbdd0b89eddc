"""The FeLiX paper's CIFAR-10 CNN (the paper's reference settings, "The paper's CIFAR-10 setup").

conv3->64, conv64->128, conv128->256 (3x3, VALID, ReLU, 2x2 max-pool each), then
dense 1024->128->256->10: 537,610 parameters. With VALID padding a 32x32 input
shrinks 30->15->13->6->4->2, so the flattened feature is 2*2*256 = 1024.

The widths are configurable (``conv`` channels, ``dense`` hidden sizes); the
default is exactly the paper's network (same parameter tree, same model name).
Narrower variants, same layout (three VALID 3x3 convs + pools, dense hiddens, a
10-way head), for cheap long-horizon CPU runs:

- ``conv=(16, 32, 64), dense=(64, 64)``: 44,842 parameters (12 times fewer);
  registered as ``cifar_cnn_narrow``.
- ``conv=(8, 16, 32), dense=(32, 32)``: 11,546 parameters; registered as
  ``cifar_cnn_tiny``.

Parameter count: sum over convs of ``9*c_in*c_out + c_out`` plus over the dense
layers of ``d_in*d_out + d_out``, with the first dense input ``4*conv[-1]``
(2x2 spatial) for 32x32 inputs.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from .base import Model, make_model
from .layers import ConvImpl, conv3x3, max_pool_2x2

PAPER_CONV = (64, 128, 256)
PAPER_DENSE = (128, 256)


class CifarCNN(nn.Module):
    num_classes: int = 10
    conv_impl: ConvImpl = "shift"
    conv: Sequence[int] = PAPER_CONV
    dense: Sequence[int] = PAPER_DENSE

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, features in enumerate(self.conv):
            x = conv3x3(self.conv_impl, features, padding="VALID", name=f"conv_{i}")(x)
            x = max_pool_2x2(nn.relu(x))
        x = x.reshape(x.shape[0], -1)
        for i, features in enumerate(self.dense):
            x = nn.relu(nn.Dense(features, name=f"dense_{i}")(x))
        return nn.Dense(self.num_classes, name=f"dense_{len(self.dense)}")(x)


def cifar_cnn(conv_impl: ConvImpl = "shift", num_classes: int = 10,
              input_shape: tuple[int, int, int] = (32, 32, 3),
              conv: Sequence[int] = PAPER_CONV, dense: Sequence[int] = PAPER_DENSE) -> Model:
    """The paper's CNN; ``conv_impl='flax'`` gives the plain ``nn.Conv`` version.

    ``conv`` (channels of the three 3x3 convs) and ``dense`` (hidden sizes) give
    narrower variants; the defaults are the paper's (537,610 parameters), named
    ``cifar_cnn[IMPL]``; other widths are named ``cifar_cnn[IMPL]c16-32-64d64-64``.
    """
    conv, dense = tuple(int(c) for c in conv), tuple(int(d) for d in dense)
    name = f"cifar_cnn[{conv_impl}]"
    if (conv, dense) != (PAPER_CONV, PAPER_DENSE):
        name += "c" + "-".join(map(str, conv)) + "d" + "-".join(map(str, dense))
    return make_model(name, CifarCNN(num_classes, conv_impl, conv, dense), input_shape, num_classes)
