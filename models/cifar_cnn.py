"""The FeLiX paper's CIFAR-10 CNN (REFERENCE.md, "The paper's CIFAR-10 setup").

conv3->64, conv64->128, conv128->256 (3x3, VALID, ReLU, 2x2 max-pool each), then
dense 1024->128->256->10: 537,610 parameters. With VALID padding a 32x32 input
shrinks 30->15->13->6->4->2, so the flattened feature is 2*2*256 = 1024.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from .base import Model, make_model
from .layers import ConvImpl, conv3x3, max_pool_2x2


class CifarCNN(nn.Module):
    num_classes: int = 10
    conv_impl: ConvImpl = "shift"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, features in enumerate((64, 128, 256)):
            x = conv3x3(self.conv_impl, features, padding="VALID", name=f"conv_{i}")(x)
            x = max_pool_2x2(nn.relu(x))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(128, name="dense_0")(x))
        x = nn.relu(nn.Dense(256, name="dense_1")(x))
        return nn.Dense(self.num_classes, name="dense_2")(x)


def cifar_cnn(conv_impl: ConvImpl = "shift", num_classes: int = 10,
              input_shape: tuple[int, int, int] = (32, 32, 3)) -> Model:
    """The paper's CNN; ``conv_impl='flax'`` gives the plain ``nn.Conv`` version."""
    return make_model(f"cifar_cnn[{conv_impl}]", CifarCNN(num_classes, conv_impl), input_shape, num_classes)
