"""The server's view of the fleet: numpy struct-of-arrays, one row per client.

Never a Python object per client, so it scales to 10^6 clients. It holds only
what the orchestrator may know (FeLiX's ClientMap: statistical utility, system
metric, last utility round, tier), plus bookkeeping the strategies share.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..traces import Tier


@dataclasses.dataclass
class ClientMap:
    tier: np.ndarray  # (N,) int8: tier as the server believes it
    busy: np.ndarray  # (N,) bool: has a task the server has not heard back from
    num_samples: np.ndarray  # (N,) int64: client data size (reported at registration)
    utility: np.ndarray  # (N,) float64: latest statistical utility U
    utility_round: np.ndarray  # (N,) int64: aggregation round U was measured at (-1: never)
    last_selected_round: np.ndarray  # (N,) int64: round of the last training selection (-1: never)
    times_trained: np.ndarray  # (N,) int64: training replies received
    duration_s: np.ndarray  # (N,) float64: last observed training-task duration (nan: unknown)
    # (N,) float64: training-task duration the client's system profile gives at registration (nan: unknown)
    registered_duration_s: np.ndarray

    @staticmethod
    def create(num_samples: np.ndarray, registered_duration_s: np.ndarray | None = None) -> "ClientMap":
        n = len(num_samples)
        registered = np.full(n, np.nan) if registered_duration_s is None else registered_duration_s
        return ClientMap(
            tier=np.full(n, Tier.AVL_TRAIN, np.int8),  # every client is registered available at t=0
            busy=np.zeros(n, bool),
            num_samples=np.asarray(num_samples, np.int64),
            utility=np.zeros(n),
            utility_round=np.full(n, -1, np.int64),
            last_selected_round=np.full(n, -1, np.int64),
            times_trained=np.zeros(n, np.int64),
            duration_s=np.full(n, np.nan),
            registered_duration_s=np.asarray(registered, np.float64).copy(),
        )

    @property
    def num_clients(self) -> int:
        return len(self.tier)

    def trainable(self, current_round: int, once_per_round: bool) -> np.ndarray:
        """Clients a training selector may pick now (believed AVL_TRAIN and idle)."""
        ok = self.tier == Tier.AVL_TRAIN
        np.greater(ok, self.busy, out=ok)  # ok & ~busy, in place (one pass fewer over N at 10^6 clients)
        if once_per_round:  # TierTrack: a client that left and returned is not picked twice a round
            ok &= self.last_selected_round != current_round
        return ok

    def evaluable(self) -> np.ndarray:
        """Clients an eval selector may use (believed AVL_TRAIN or AVL_EVAL, idle)."""
        ok = self.tier >= Tier.AVL_EVAL  # AVL_EVAL (1) or AVL_TRAIN (2): tier codes are 0, 1, 2
        return np.greater(ok, self.busy, out=ok)
