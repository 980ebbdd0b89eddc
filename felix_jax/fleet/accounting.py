"""Bytes, messages and event counters of one run (host side)."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Accounting:
    bytes_down_train: int = 0
    bytes_up_train: int = 0
    bytes_down_eval: int = 0
    bytes_up_eval: int = 0
    control_messages: int = 0
    control_bytes: int = 0
    dispatched_train: int = 0
    dispatched_eval: int = 0
    replies_train: int = 0
    replies_eval: int = 0
    discarded_updates: int = 0  # late updates an aggregator dropped
    late_updates_used: int = 0  # stale updates a sync aggregator kept (REFL SAA)
    # aggregated with weight 0 (REFL SAA or FedBuff beyond their staleness bound, TierFuse beyond T_max):
    # uploaded for nothing, like a discarded update
    zero_weight_updates: int = 0
    rejected_updates_nonfinite: int = 0  # dropped by the update guard: NaN or Inf
    rejected_updates_norm: int = 0  # dropped by the update guard: L2 norm out of bounds
    interrupted_tasks: int = 0
    abandoned_tasks: int = 0
    timeouts: int = 0
    detached_tasks: int = 0  # left the in-flight set on a TierTrack notification
    staleness: list = dataclasses.field(default_factory=list)  # of every aggregated update
    agg_weights: list = dataclasses.field(default_factory=list)
    utility_age: list = dataclasses.field(default_factory=list)  # at selection
    selection_seconds: list = dataclasses.field(default_factory=list)  # host time per decision
    dispatch_log: list = dataclasses.field(default_factory=list)  # (time_s, client, kind, round) per task

    def mark(self) -> dict:
        """The counters now, and the lists' lengths: :meth:`rollback` returns to this point."""
        return {f.name: (len(v) if isinstance(v := getattr(self, f.name), list) else v)
                for f in dataclasses.fields(self)}

    def rollback(self, mark: dict) -> None:
        """Back to a :meth:`mark`: counters restored, lists cut to their lengths then."""
        for name, value in mark.items():
            current = getattr(self, name)
            if isinstance(current, list):
                del current[value:]
            else:
                setattr(self, name, value)

    @property
    def bytes_total(self) -> int:
        return (self.bytes_down_train + self.bytes_up_train + self.bytes_down_eval + self.bytes_up_eval
                + self.control_bytes)

    def summary(self) -> dict:
        def pct(values, q):
            return float(np.percentile(values, q)) if len(values) else None

        out = {k: v for k, v in dataclasses.asdict(self).items() if not isinstance(v, list)}
        out["bytes_total"] = self.bytes_total
        out["bytes_train"] = self.bytes_down_train + self.bytes_up_train
        out["bytes_eval"] = self.bytes_down_eval + self.bytes_up_eval
        # training uploads that moved the model not at all (the paper's "uplink wasted")
        out["updates_wasted"] = (self.discarded_updates + self.zero_weight_updates + self.rejected_updates_nonfinite
                                 + self.rejected_updates_norm)
        out["staleness_p50"], out["staleness_p90"], out["staleness_p99"] = (
            pct(self.staleness, 50), pct(self.staleness, 90), pct(self.staleness, 99))
        out["utility_age_p50"] = pct(self.utility_age, 50)
        out["agg_weight_p50"] = pct(self.agg_weights, 50)
        out["selection_ms_mean"] = 1000 * float(np.mean(self.selection_seconds)) if self.selection_seconds else None
        return out
