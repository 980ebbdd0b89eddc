"""Bytes, messages and event counters of one run (host side)."""

from __future__ import annotations

import dataclasses
from array import array

import numpy as np

# The per-update and per-pick records are typed columns (array.array: 8 bytes an entry, against a list's
# 8-byte slot plus a 24- or 32-byte number object), so the memory a run keeps per task is a fifth of a
# list's; their typecodes:
_COLUMNS = {"staleness": "q", "agg_weights": "d", "utility_age": "q", "picked_utility": "d",
            "picked_duration_s": "d", "selection_seconds": "d"}


def _column(name: str):
    return dataclasses.field(default_factory=lambda: array(_COLUMNS[name]))


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
    # update_guard.median_over=arrivals: updates judged at their arrival otherwise than the median over their whole
    # buffer would have judged them (fleet/running_sum.py; 0 under the buffer's median)
    guard_verdicts_unlike_buffer: int = 0
    # adversarial clients (cohort/adversary.py): how many the population holds, their training tasks, their
    # updates that entered an aggregation, those accepted with weight > 0, and the weight they were given
    adversarial_clients: int = 0
    adversarial_tasks: int = 0
    adversarial_updates: int = 0
    adversarial_updates_accepted: int = 0
    adversarial_weight_total: float = 0.0
    # aggregations whose server step was taken (an accepted update of positive weight, a finite model);
    # a buffer with none still closes its round and advances the version
    model_steps: int = 0
    interrupted_tasks: int = 0
    abandoned_tasks: int = 0
    # interruption=partial: training tasks cut short by their client's departure that send the update of
    # the steps they finished (those with none are abandoned_tasks)
    partial_updates: int = 0
    timeouts: int = 0
    detached_tasks: int = 0  # left the in-flight set at the client's departure (TierTrack, or oracle free_slot)
    # the eval tier at work (FeLiX's eval selector): eval tasks by the client's tier at dispatch
    evals_on_avl_eval: int = 0  # on AVL_EVAL clients (could not have trained)
    evals_on_avl_train: int = 0  # on idle AVL_TRAIN clients left after the train refill
    # training picks whose utility (the one the selector saw) came from an eval reply / that had none yet
    train_picks_eval_utility: int = 0
    train_picks_unexplored: int = 0
    # training picks of a client still busy with an earlier task (a sync server that selects busy clients,
    # reading.sync_busy_selectable): the new task waits for the old one
    train_picks_busy: int = 0
    staleness: array = _column("staleness")  # of every aggregated update
    agg_weights: array = _column("agg_weights")
    utility_age: array = _column("utility_age")  # at selection, in rounds (-1: no utility yet)
    # the paper's Fig. 13: the utility the selector saw, per training pick of a client that had one, and
    # every training task's duration (its compute and transfer time, waiting for the tier excluded)
    picked_utility: array = _column("picked_utility")
    picked_duration_s: array = _column("picked_duration_s")
    selection_seconds: array = _column("selection_seconds")  # host time per decision
    # one row per event: (time_s, event, client, kind, version, staleness, weight, tier); see
    # felix_jax/experiment/event_log.py (events.csv)
    events: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        for name, code in _COLUMNS.items():  # lists (a snapshot's, a caller's) become the typed columns
            value = getattr(self, name)
            if not (isinstance(value, array) and value.typecode == code):
                setattr(self, name, array(code, value))

    def mark(self) -> dict:
        """The counters now, and the lists' lengths: :meth:`rollback` returns to this point."""
        return {f.name: (len(v) if isinstance(v := getattr(self, f.name), (list, array)) else v)
                for f in dataclasses.fields(self)}

    def rollback(self, mark: dict) -> None:
        """Back to a :meth:`mark`: counters restored, lists cut to their lengths then."""
        for name, value in mark.items():
            current = getattr(self, name)
            if isinstance(current, (list, array)):
                del current[value:]
            else:
                setattr(self, name, value)

    @property
    def dispatch_log(self) -> list:
        """``(time_s, client, kind, round)`` per dispatched task, in dispatch order (from :attr:`events`)."""
        return [(r[0], r[2], r[3], r[4]) for r in self.events if r[1] == "dispatch"]

    @property
    def bytes_total(self) -> int:
        return (self.bytes_down_train + self.bytes_up_train + self.bytes_down_eval + self.bytes_up_eval
                + self.control_bytes)

    def distributions(self) -> dict:
        """``distributions.json``'s per-update and per-pick lists (JSON numbers)."""
        return {"staleness": self.staleness.tolist(), "agg_weights": self.agg_weights.tolist(),
                "utility_age": self.utility_age.tolist()}

    def summary(self) -> dict:
        def pct(values, q):
            return float(np.percentile(values, q)) if len(values) else None

        out = {f.name: v for f in dataclasses.fields(self)
               if not isinstance(v := getattr(self, f.name), (list, array))}
        out["bytes_total"] = self.bytes_total
        out["bytes_train"] = self.bytes_down_train + self.bytes_up_train
        out["bytes_eval"] = self.bytes_down_eval + self.bytes_up_eval
        # training uploads that moved the model not at all (the paper's "uplink wasted")
        weights = np.asarray(self.agg_weights, np.float64)
        out["updates_accepted"] = int(np.count_nonzero(weights > 0))  # moved the model
        out["updates_wasted"] = (self.discarded_updates + self.zero_weight_updates + self.rejected_updates_nonfinite
                                 + self.rejected_updates_norm)
        out["staleness_p50"], out["staleness_p90"], out["staleness_p99"] = (
            pct(self.staleness, 50), pct(self.staleness, 90), pct(self.staleness, 99))
        ages = np.asarray(self.utility_age, np.int64)
        known_age = ages[ages >= 0]  # picks with a utility (explored clients)
        out["utility_age_p50"], out["utility_age_p95"] = pct(known_age, 50), pct(known_age, 95)
        picks = self.dispatched_train
        out["train_picks_eval_utility_share"] = self.train_picks_eval_utility / picks if picks else None
        out["picked_utility_mean"] = float(np.mean(self.picked_utility)) if len(self.picked_utility) else None
        out["picked_utility_p50"] = pct(self.picked_utility, 50)
        out["picked_duration_mean_s"] = float(np.mean(self.picked_duration_s)) if len(self.picked_duration_s) else None
        out["agg_weight_p50"] = pct(self.agg_weights, 50)
        adversarial = self.adversarial_updates_accepted  # their mean weight, and their share of all the weight
        out["adversarial_weight_mean"] = self.adversarial_weight_total / adversarial if adversarial else None
        out["adversarial_weight_share"] = (self.adversarial_weight_total / float(weights.sum()) if weights.sum() > 0
                                           and self.adversarial_clients else None)
        # the weights of fresh (staleness 0) and late updates (the paper's Fig. 15: TierFuse vs FedBuff)
        stale = np.asarray(self.staleness, np.int64)
        if stale.shape == weights.shape and stale.size:
            late = stale > 0
            out["late_update_share"] = float(late.mean())
            out["agg_weight_fresh_mean"] = float(weights[~late].mean()) if (~late).any() else None
            out["agg_weight_late_mean"] = float(weights[late].mean()) if late.any() else None
        else:
            out["late_update_share"] = out["agg_weight_fresh_mean"] = out["agg_weight_late_mean"] = None
        out["selection_ms_mean"] = 1000 * float(np.mean(self.selection_seconds)) if len(self.selection_seconds) else None
        return out
