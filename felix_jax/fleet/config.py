"""Fleet configuration: frozen, validated, strings resolved to enums once."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from .knowledge import Knowledge
from .lifecycle import Interruption
from .reading import Reading
from .server_optimizer import SERVER_OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class FleetConfig:
    """How the server runs (the paper's reference settings "Async runs", "Sync OORT", "TierTrack")."""

    mode: Literal["sync", "async"] = "async"
    knowledge: Knowledge = Knowledge.NONE
    concurrency: int = 30  # async: c tasks in flight
    aggregation_goal: int = 10  # K updates per aggregation
    overcommit: float = 1.3  # sync: select int(overcommit * K) clients per round
    timeout_s: float = 90.0  # server's timer per task; inf disables it
    timeout_frees_slot: bool = False  # the FeLiX code keeps the slot until the reply
    interruption: Interruption = Interruption.RESUME
    utility_from: Literal["first_batch", "all_steps"] = "first_batch"  # FeLiX code: first batch of 32
    control_message_bytes: int = 64  # one TierTrack notification
    sees_eval_tier: bool = False  # strategies with an eval selector may use AVL_EVAL clients
    # sgd (w + eta * aggregate) | momentum (FedAvgM) | adagrad (FedAdagrad) | adam (FedAdam) | yogi (FedYogi):
    # fleet/server_optimizer.py
    server_optimizer: str = "sgd"
    server_momentum: float = 0.9  # FedAvgM's beta; FedAdagrad's / FedAdam's / FedYogi's beta_1 (Reddi et al., Alg. 2)
    server_tau: float = 1e-3  # the adaptivity tau of FedAdagrad / FedAdam / FedYogi (Reddi et al., Alg. 2)
    # FedProx's proximal weight mu: every client trains on F_k(w) + mu/2 ||w - w_start||^2 (cohort/local.py)
    prox_mu: float = 0.0
    # What an oracle server does when the client of a running task leaves its tier (the trace says so):
    # "keep_slot" (default): nothing until the reply or the timeout. The paper defines oracle TraceAvail
    # as prior knowledge of the traces, used to pick clients that are available; its Fig. 12 credits
    # TierTrack over that oracle with the one mechanism the oracle lacks, "to reactively resample when a
    # selected client disappears mid-computation". "free_slot": the server frees the slot at the
    # departure and refills it, as TierTrack does (an oracle that watches the trace during the task).
    # The authors' async code did free it (async_oort.py:1185-1202), its sync code did not: the
    # paper_code reading sets that per strategy (docs/readings.md).
    oracle_departure: Literal["keep_slot", "free_slot"] = "keep_slot"
    # the reading of the paper this fleet runs (fleet/reading.py), resolved for its strategy
    reading: Reading = Reading()
    # "auto": an aggregator whose weights are per update (Aggregator.per_update) folds each update into a running
    # sum as it arrives and holds no buffer of K updates (fleet/running_sum.py); "always": every aggregator
    # gathers its K updates at the aggregation (the buffered path, to check the running sum against)
    aggregation_buffer: Literal["auto", "always"] = "auto"

    def __post_init__(self):
        object.__setattr__(self, "knowledge", Knowledge(self.knowledge))
        object.__setattr__(self, "interruption", Interruption(self.interruption))
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {self.mode!r}")
        if self.aggregation_goal < 1:
            raise ValueError("aggregation_goal must be >= 1")
        if self.mode == "async" and self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.overcommit < 1.0:
            raise ValueError("overcommit must be >= 1")
        if self.server_optimizer not in SERVER_OPTIMIZERS:
            raise ValueError(f"server_optimizer must be one of {', '.join(SERVER_OPTIMIZERS)}, "
                             f"got {self.server_optimizer!r}")
        if not 0 <= self.server_momentum < 1:
            raise ValueError(f"server_momentum must be in [0, 1), got {self.server_momentum!r}")
        if not (self.server_tau > 0 and math.isfinite(self.server_tau)):
            raise ValueError(f"server_tau must be a finite number > 0, got {self.server_tau!r}")
        if not (self.prox_mu >= 0 and math.isfinite(self.prox_mu)):
            raise ValueError(f"prox_mu must be a finite number >= 0, got {self.prox_mu!r}")
        if not (self.timeout_s > 0 or math.isinf(self.timeout_s)):
            raise ValueError("timeout_s must be > 0 (or inf)")
        if self.aggregation_buffer not in ("auto", "always"):
            raise ValueError(f"aggregation_buffer must be 'auto' or 'always', got {self.aggregation_buffer!r}")
        if self.oracle_departure not in ("keep_slot", "free_slot"):
            raise ValueError(f"oracle_departure must be 'keep_slot' or 'free_slot', got {self.oracle_departure!r}")

    @property
    def detaches_on_departure(self) -> bool:
        """A running task leaves the in-flight set when its client leaves the tier (TierTrack, or an
        oracle with ``oracle_departure="free_slot"``); a client that left and returned is then not
        picked twice in one aggregation round (the paper's reference settings "TierTrack")."""
        return self.knowledge is Knowledge.TIERTRACK or (self.knowledge is Knowledge.ORACLE
                                                         and self.oracle_departure == "free_slot")

    @property
    def round_size(self) -> int:
        """Clients a sync round selects."""
        return max(self.aggregation_goal, int(self.overcommit * self.aggregation_goal))


@dataclasses.dataclass(frozen=True)
class StopRule:
    """When a run ends; time-to-target uses the paper's rule (the paper's reference settings)."""

    target_accuracy: float | None = None
    window: int = 20  # mean of the last `window` accuracies >= target, and the last one too
    # Fewer than `window` test accuracies so far (the initial model's counts as one): False: the mean
    # of those there are (the paper's text says nothing of this case); True: the rule is not met until
    # there are `window` of them (the authors' stop script: "Less than 20 accuracy values found").
    full_window: bool = False
    max_virtual_s: float = 48 * 3600.0
    max_aggregations: int = 10_000
    eval_every: int = 1  # test-set evaluation every n aggregations
    # Test-set evaluations batched into one device call: the model versions wait, the run goes on,
    # and the stop rule is applied to them in order afterwards; a target found late rolls the run's
    # record back to that checkpoint, so every reported result is that of eval_batch=1 (the work done
    # past it, host seconds and events, is not rolled back).
    eval_batch: int = 1
    stop_at_target: bool = True  # False: record the first time the target is reached and go on
    # keep every checkpoint's per-test-sample correctness (packed bits), so that the accuracy on any subset
    # of the test set can be read from the same run (the run's test_hits.npz)
    keep_hits: bool = False

    def __post_init__(self):
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if self.eval_every < 1 or self.eval_batch < 1:
            raise ValueError(f"eval_every and eval_batch must be >= 1, got {self.eval_every} and {self.eval_batch}")

    def reached(self, accuracies: list[float]) -> bool:
        if self.target_accuracy is None or not accuracies:
            return False
        if self.full_window and len(accuracies) < self.window:
            return False
        recent = accuracies[-self.window:]  # fewer than `window` early on: mean of those so far
        # math.fsum: the correctly rounded sum, the same on every Python (3.12's built-in sum compensates
        # and 3.11's does not, and a mean that equals the target exactly, as 250-image accuracies' means
        # often do on a 0.01 grid, then fell on either side)
        return math.fsum(recent) / len(recent) >= self.target_accuracy and accuracies[-1] >= self.target_accuracy
