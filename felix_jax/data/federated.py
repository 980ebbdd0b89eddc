"""Federated data on the device: the data set once, clients as index-table rows.

The whole training set is put on the accelerator once (compact dtype, e.g. uint8
images); a client is a row of ``index_table`` (indices into the training set)
plus ``counts[client]`` valid entries. Gathering a client's batch is a device-side
take, so the cohort engine never copies per-client data from the host.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from .dataset import ArrayDataset
from .partition import Partition
from .streams import DeviceStreams


@flax.struct.dataclass
class FederatedData:
    """Device-resident training data and the client index table (a jax pytree)."""

    x: jax.Array  # (N, *input_shape) stored dtype (uint8 images, float32 features)
    y: jax.Array  # (N,) int32
    index_table: jax.Array  # (num_clients, max_count) int32, rows padded with 0 past counts
    counts: jax.Array  # (num_clients,) int32, >= 1
    input_scale: jax.Array  # () float32
    input_mean: jax.Array  # (C,) or (1,) float32, broadcast over the last input axis
    input_std: jax.Array  # (C,) or (1,) float32
    # client streams (data/streams.py): index_table rows are then arrivals in time order, and a task
    # trains on the part of its row usable at its start time; None: static client data
    streams: DeviceStreams | None = None

    @property
    def num_clients(self) -> int:
        return int(self.index_table.shape[0])

    @property
    def max_count(self) -> int:
        return int(self.index_table.shape[1])

    def inputs(self, idx: jax.Array) -> jax.Array:
        """Model inputs (float32) for training-set rows ``idx``."""
        return normalize(self.x[idx], self.input_scale, self.input_mean, self.input_std)


def normalize(x: jax.Array, scale: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    return (x.astype(jnp.float32) * scale - mean) / std


def _norm_arrays(ds: ArrayDataset) -> tuple[jax.Array, jax.Array, jax.Array]:
    return (jnp.asarray(ds.input_scale, jnp.float32), jnp.asarray(ds.input_mean, jnp.float32),
            jnp.asarray(ds.input_std, jnp.float32))


def to_device(ds: ArrayDataset, partition: Partition) -> FederatedData:
    """Puts the training split and the partition's index table on the device."""
    table = np.asarray(partition.index_table)
    counts = np.asarray(partition.counts)
    if table.shape[0] != counts.shape[0]:
        raise ValueError(f"partition has {table.shape[0]} index rows but {counts.shape[0]} counts")
    if counts.min(initial=1) < 1:
        raise ValueError("every client needs at least one sample")
    if table.size and (table.min() < 0 or table.max() >= ds.train_x.shape[0]):
        raise ValueError("partition indexes rows outside the training set")
    scale, mean, std = _norm_arrays(ds)
    return FederatedData(
        x=jnp.asarray(ds.train_x),
        y=jnp.asarray(ds.train_y, jnp.int32),
        index_table=jnp.asarray(table, jnp.int32),
        counts=jnp.asarray(counts, jnp.int32),
        input_scale=scale,
        input_mean=mean,
        input_std=std,
    )


@flax.struct.dataclass
class HeldOutSet:
    """Device-resident held-out data for the server's accuracy checkpoints."""

    x: jax.Array  # (M, *input_shape) stored dtype
    y: jax.Array  # (M,) int32
    input_scale: jax.Array
    input_mean: jax.Array
    input_std: jax.Array

    def inputs(self, idx: jax.Array) -> jax.Array:
        return normalize(self.x[idx], self.input_scale, self.input_mean, self.input_std)


def held_out_to_device(ds: ArrayDataset) -> HeldOutSet:
    scale, mean, std = _norm_arrays(ds)
    return HeldOutSet(jnp.asarray(ds.test_x), jnp.asarray(ds.test_y, jnp.int32), scale, mean, std)
