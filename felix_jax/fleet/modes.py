"""Server modes: when to dispatch and when to aggregate (the paper's reference settings).

- :class:`AsyncMode`: keeps ``concurrency`` training tasks in flight, refilling a
  slot whenever a task ends (or, under TierTrack, its client leaves); buffers
  updates and aggregates every ``aggregation_goal`` (FedBuff / FeLiX). An eval
  selector, if any, may send at most ``eval_budget`` eval tasks per round.
- :class:`SyncMode`: each round selects ``int(overcommit * K)`` clients, waits for
  K fresh updates, aggregates them; later replies of that round are stale: kept
  for the next aggregation if the aggregator accepts stale updates (REFL SAA),
  else dropped (FedAvg). A round with too few eligible clients keeps topping up
  as clients become available; tasks on clients that vanished are never replaced,
  so the round stalls until they return: the paper's sync stall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulator import FleetSimulator, Update


class AsyncMode:
    name = "async"

    def __init__(self):
        self.buffer: list["Update"] = []

    def refill(self, sim: "FleetSimulator") -> None:
        sim.refresh_view()
        need = sim.cfg.concurrency - sim.in_flight_count("train")
        if sim.reading.eval_counts_toward_concurrency:  # the FeLiX code: evals sit in the same c slots
            need -= sim.in_flight_count("eval")
        got = sim.select_and_dispatch(need, "train")
        if sim.eval_selector is not None:
            sim.select_and_dispatch(sim.eval_budget - sim._evals_this_round, "eval")
        if got < need:
            sim.schedule_wake()

    def on_task_detached(self, sim: "FleetSimulator", task) -> None:
        """A task left the in-flight set at its client's departure: its slot is free (the in-flight
        count has dropped), nothing else to do."""

    def on_train_reply(self, sim: "FleetSimulator", update: "Update") -> None:
        self.buffer.append(update)
        sim.receive_update(update)
        k = sim.cfg.aggregation_goal
        if len(self.buffer) >= k:
            batch, self.buffer = self.buffer[:k], self.buffer[k:]
            sim.aggregate(batch)

    def state_dict(self) -> dict:
        return {"buffer": list(self.buffer)}

    def load_state_dict(self, state: dict) -> None:
        self.buffer = list(state["buffer"])


class SyncMode:
    name = "sync"

    def __init__(self):
        self.round = -1
        self.dispatched = 0
        self.fresh: list["Update"] = []
        self.stale: list["Update"] = []

    def refill(self, sim: "FleetSimulator") -> None:
        if sim.round != self.round:  # a new round starts
            self.round, self.dispatched, self.fresh = sim.round, 0, []
        k, n_sel = sim.cfg.aggregation_goal, sim.cfg.round_size
        if self.dispatched >= k:  # the round has its K tasks out: wait for them
            return
        sim.refresh_view()
        self.dispatched += sim.select_and_dispatch(n_sel - self.dispatched, "train")
        if self.dispatched < k:
            sim.schedule_wake()

    def on_task_detached(self, sim: "FleetSimulator", task) -> None:
        """A training task of this round left at its client's departure (a server that knows it:
        ``detaches_on_departure``): the round may select a replacement."""
        if task.kind == "train" and task.round == self.round:
            self.dispatched -= 1

    def on_train_reply(self, sim: "FleetSimulator", update: "Update") -> None:
        if update.task.round == sim.round and update.staleness == 0:
            self.fresh.append(update)
            sim.receive_update(update)
            if len(self.fresh) >= sim.cfg.aggregation_goal:
                used_stale = self.stale if sim.aggregator.accepts_stale else []
                sim.acct.late_updates_used += len(used_stale)
                batch, self.fresh, self.stale = self.fresh + used_stale, [], []
                sim.aggregate(batch)
        elif sim.aggregator.accepts_stale:
            self.stale.append(update)
            sim.receive_update(update)
        else:
            sim.acct.discarded_updates += 1
            sim.executor.drop_delta(update.outcome)

    def state_dict(self) -> dict:
        return {"round": self.round, "dispatched": self.dispatched, "fresh": list(self.fresh),
                "stale": list(self.stale)}

    def load_state_dict(self, state: dict) -> None:
        self.round, self.dispatched = int(state["round"]), int(state["dispatched"])
        self.fresh, self.stale = list(state["fresh"]), list(state["stale"])
