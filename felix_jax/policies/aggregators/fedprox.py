"""FedProx's server (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

FedProx changes the clients, not the server: each client minimises ``h_k(w) = F_k(w) + mu/2
||w - w^t||^2`` (Eq. 2; ``cohort/local.py``, ``prox_mu``) and may stop early: the server takes the
partial work of a device that did not finish (Sec. 3, "gamma-inexact" solutions; here
``interruption=partial``, ``fleet/lifecycle.py``). The server averages the local models as FedAvg
does, ``w^{t+1} = sum_k n_k w_k / sum_k n_k`` over the first K fresh updates of a sync round, late
ones dropped.

A partial update's weight (``partial_weight``):

- ``"samples"`` (default): its client's ``n_k``, as a complete update's. FedProx's code weighs every
  solution by its client's sample count whatever the epochs it ran (``flearn/trainers/fedbase.py``,
  ``aggregate``: "w is the number of local samples"; stragglers run fewer epochs in
  ``flearn/trainers/fedprox.py`` and are appended alike): the proximal term, not the weight, is what
  keeps a partial update in its place.
- ``"processed"``: ``n_k * k / K``, the share of its ``K`` local steps it finished times ``n_k``: the
  samples it processed, relative to a complete update (FedAvg's reading of a sample weight).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Literal, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo


@dataclasses.dataclass(frozen=True)
class FedProxConfig:
    server_lr: float = 1.0  # eta; 1: the new model is the weighted mean of the local models
    partial_weight: Literal["samples", "processed"] = "samples"  # see the module docstring

    RANGES: ClassVar[Mapping[str, Range]] = {"server_lr": Range.above(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")
        if self.partial_weight not in ("samples", "processed"):
            raise ValueError(f"partial_weight must be 'samples' or 'processed', got {self.partial_weight!r}")


def fedprox_weights(num_samples: np.ndarray, work_fraction: np.ndarray | None,
                    partial_weight: str = "samples") -> np.ndarray:
    """``n_k``, or ``n_k * k / K`` with ``partial_weight="processed"`` (``work_fraction`` = k/K; None:
    every update complete): (K,) float64, normalised by the server step."""
    n = np.asarray(num_samples, dtype=np.float64)
    if partial_weight == "samples" or work_fraction is None:
        return n
    return n * np.asarray(work_fraction, dtype=np.float64)


def make_fedprox(config: FedProxConfig = FedProxConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        return fedprox_weights(info.num_samples, info.work_fraction, config.partial_weight)

    return Aggregator("fedprox", weights, normalize=True, server_lr=config.server_lr, accepts_stale=False)
