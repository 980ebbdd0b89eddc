"""Two readings of the FeLiX paper: its text, and the authors' code as it ran (docs/readings.md).

The paper's numbers came from the authors' code (``dhruvsgarg/flame`` at 6ef1133b, under
``lib/python/``), which differs from the paper's text in about thirty places. A :class:`Reading`
is one frozen set of switches for those places; the scenario field ``semantics`` names a
bundle (``paper``: the text, felix-jax's behaviour; ``paper_code``: the code as it ran) and
``reading.KEY=V`` flips any single switch on top of it, for ablation. The bundle is resolved
once per strategy (:meth:`Reading.resolved`: what each strategy ran with) and recorded in the
run's ``config.json`` under ``fleet.reading``.

Each field's comment names the difference (the ids of the audit, docs/readings.md) and the
authors' file:line it reproduces (abbreviations: AO = flame/selector/async_oort.py, SO =
flame/selector/oort.py, ATA = flame/mode/horizontal/asyncfl/top_aggregator.py, OTA =
flame/mode/horizontal/oort/top_aggregator.py, HT = flame/mode/horizontal/syncfl/trainer.py, TR =
examples/async_cifar10/trainer/pytorch/main.py, AG = examples/async_cifar10/aggregator/pytorch/main.py).

The train selector's switches of the code's reading (unsorted ``T_pref`` over eligible clients,
the raise-only pacer, no clip, no cut-off) are Oort options
(:class:`~felix_jax.policies.selectors.oort_math.OortConfig`); :meth:`Reading.selector_options`
gives them, and a scenario's own ``selector.KEY`` still wins over them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

import numpy as np

from ..cohort.stats import statistical_utility
from ..options import Range
from .knowledge import Knowledge
from .lifecycle import Interruption

SEMANTICS = ("paper", "paper_code")
AS_RAN = "as_ran"  # a per-strategy switch: what each strategy ran with (Reading.resolved)

_CHOICES = {
    "utility_scale": ("batch", "dataset"),
    "small_clients": ("one_step", "zero_step", "zero_step_reference"),
    "eval_utility": ("fresh", "accumulate"),
    "duration_source": ("work", "measured"),
    "oracle_clients": ("follow_trace", "always_available"),
    "async_exclusion": ("text", "every_async"),
    "stop_window_fill": ("partial", "full"),
    "interruption": (None, AS_RAN) + tuple(i.value for i in Interruption),
    "oracle_departure": (None, AS_RAN, "keep_slot", "free_slot"),
}


@dataclasses.dataclass(frozen=True)
class Reading:
    """Every switch where the authors' code differs from the paper's text (the defaults: the text).

    ``Reading()`` = ``Reading.paper()``; ``Reading.paper_code()`` is the code as it ran for the
    paper. Fields set to ``"as_ran"`` take each strategy's own value in :meth:`resolved`; ``None``
    leaves the scenario's field of the same name in charge.
    """

    semantics: str = "paper"  # the bundle these switches started from (paper | paper_code)
    # A1: U = sqrt(N x first-batch sum of squared losses), N the client's data size (HT:578-588),
    # instead of sqrt(|batch| x sum). "batch" | "dataset".
    utility_scale: str = "batch"
    # A1: the first batch's losses are those of the augmented batch the first step trains on
    # (HT:543-576, TR:337-363); False: a forward pass over the un-augmented batch.
    utility_augmented: bool = False
    # A2 / D3 / B6: "zero_step": a client with fewer samples than a batch takes no step (drop_last,
    # TR:271-278) and reports U = 0, from its eval replies too (the same loader: no batch to forward);
    # "one_step": one masked step over its samples. "zero_step_reference": the same clients as in the paper's
    # runs: those whose size at the paper's scale (partition=reference: the paper's own per-client size,
    # before a subset scales it down) is under a batch take no step; the rest take at least one.
    small_clients: str = "one_step"
    # A3: "accumulate": an eval reply does not reset the client's loss accumulator (TR:365-418), so it
    # reports sqrt(N x (previously reported U + first-batch sum)); "fresh": a clean measurement.
    eval_utility: str = "fresh"
    # A5 / M1: a client's recorded duration (Oort's system metric and Fig. 13's "trainer speed"):
    # "work" = the task's modelled work; "measured" = server time from dispatch to the processing of the
    # reply, waits and queueing included (ATA:299-431, send stamp ATA:869-872; sync OTA:219-223).
    duration_source: str = "work"
    # E1: a task whose client leaves its tier. None: the scenario's ``interruption``; "as_ran": every task
    # runs to the end (TR:296-307, 387-392), FeLiX's finished update held while its client is UN_AVL
    # (HT:303-317: run_to_end_hold), the others' sent at once (run_to_end).
    interruption: str | None = None
    # C7 / F3-F4: oracle server, a client leaving mid-task. None: the scenario's ``oracle_departure``;
    # "as_ran": async frees the slot at the next selection (AO:1185-1202: free_slot), sync keeps it.
    oracle_departure: str | None = None
    # F2: clients of oracle strategies. "always_available": they never leave (the oracle runs' trainer
    # JSONs were never rewritten: trace syn_0, notify off), only the server filters by the trace (AG:148-181,
    # STA:438-489); "follow_trace": they follow the run's trace.
    oracle_clients: str = "follow_trace"
    # C1 / C3: one serial server handles one message (train or eval reply) at a time, blocking this many
    # virtual seconds per message: the async loop sleeps 0.1 s in each of its two distributes per processed
    # message (ATA:777-782, 886-915). 0: a free server.
    server_per_message_s: float = 0.0
    # The same for sync servers: the sync OORT distribute has no sleep (OTA:146-207).
    server_per_message_sync_s: float = 0.0
    # C2: the server blocks this long after every aggregation (the inline test evaluation of the 10k test
    # set, ATA:907-921, AG:214-247, STA:526-545). Fitted on one number (docs/readings.md).
    server_per_aggregation_s: float = 0.0
    # B3: eval tasks count toward the c training slots (AO:233-245, 1206): training refills only while
    # train + eval in flight < c.
    eval_counts_toward_concurrency: bool = False
    # A14: sync OORT skips a stale reply before any bookkeeping (OTA:76-78, 104-106): a straggler's
    # utility and duration are never recorded. True: every reply records them.
    sync_records_stale: bool = True
    # A15: sync OORT draws a round's picks from every available client, busy stragglers of earlier rounds
    # included (SO:197, 413-425: no busy filter); a model sent to a busy trainer waits in its FIFO receive
    # queue (end.py:63-72) and is trained once the earlier tasks end, however stale (HT:194 skips only a
    # round it already returned). True: a sync server selects busy clients, whose new task starts when
    # their queued work ends; False: busy clients are not candidates.
    sync_busy_selectable: bool = False
    # A11: "every_async": every async strategy excludes a picked client for the rest of the aggregation round
    # (AO:722-873, 1307-1327), released early when its task times out (AO:1241-1295) or its client leaves
    # (a TierTrack notification or the oracle's departure, AO:875-916); "text": only TierTrack and a
    # free-slot oracle exclude, and nothing releases it.
    async_exclusion: str = "text"
    # D1: seconds of real training added to every training task's modelled delay (the trainer trains,
    # then sleeps its delay: TR:289-332). Not in the paper_code bundle: the paper's runs did not log it
    # (later measurements: 0.2-0.8 s per task).
    train_overhead_s: float = 0.0
    # S1: the stop rule with fewer test accuracies than its window (StopRule.full_window): "partial" = the
    # mean of those so far; "full" = not met until there are window of them: the authors' runs were
    # stopped by a shell loop that reads the aggregator's log and does nothing while it holds fewer than
    # 20 "test accuracy" lines (eurosys26_expts/scripts/*.sh: check_accuracy).
    stop_window_fill: str = "partial"
    # D1 (contention): the part of that training time that varies from task to task. The code's 300 trainer
    # processes shared 8 GPUs (TR:289-332: real training, then the delay), so a task's training took longer
    # or shorter with the load of the moment. Each training task adds a further u x this many seconds, u
    # uniform in [0, 1), drawn from (seed, client, task id) (:func:`task_uniform`). Not in the bundle: the
    # paper's runs did not log their training times (the 2026 measurements' 0.2-0.8 s per task, i.e.
    # train_overhead_s=0.2 with 0.6 here, came from another load, and their distribution is not given).
    train_overhead_spread_s: float = 0.0

    RANGES: ClassVar[Mapping[str, Range]] = {
        name: Range.at_least(0) for name in ("server_per_message_s", "server_per_message_sync_s",
                                             "server_per_aggregation_s", "train_overhead_s",
                                             "train_overhead_spread_s")}

    def __post_init__(self):
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                shown = ", ".join("none" if a is None else str(a) for a in allowed)
                raise ValueError(f"{name}={getattr(self, name)!r}: must be one of {shown}")
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics={self.semantics!r}: must be one of {', '.join(SEMANTICS)}")
        for name in ("server_per_message_s", "server_per_message_sync_s", "server_per_aggregation_s",
                     "train_overhead_s", "train_overhead_spread_s"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name}={v!r}: must be a finite number of seconds >= 0")

    @classmethod
    def paper(cls, **overrides) -> "Reading":
        """The paper's text (felix-jax's behaviour)."""
        return cls(**overrides)

    @classmethod
    def paper_code(cls, **overrides) -> "Reading":
        """The authors' code as it ran for the paper (docs/readings.md lists each switch's source).

        ``server_per_aggregation_s`` is the one fitted value: FeLiX on syn_0 at ~5.0 s of wall clock
        per aggregation (the authors' printed task counts over the paper's 6.6 h), with the
        ``cifar10-longhorizon`` learner (benchmarks/as_run_calibration.py).
        """
        return cls(**{"semantics": "paper_code", "utility_scale": "dataset", "utility_augmented": True,
                      "small_clients": "zero_step", "eval_utility": "accumulate", "duration_source": "measured",
                      "interruption": AS_RAN, "oracle_departure": AS_RAN, "oracle_clients": "always_available",
                      "server_per_message_s": 0.2, "server_per_message_sync_s": 0.0,
                      "server_per_aggregation_s": PAPER_CODE_AGGREGATION_S,
                      "eval_counts_toward_concurrency": True, "sync_records_stale": False,
                      "sync_busy_selectable": True,
                      "async_exclusion": "every_async", "stop_window_fill": "full", **overrides})

    def resolved(self, mode: str, knowledge: Knowledge) -> "Reading":
        """This reading for one strategy: ``"as_ran"`` switches take that strategy's value."""
        changes: dict[str, Any] = {}
        if self.interruption == AS_RAN:  # only FeLiX (client notifications on) holds a finished update
            changes["interruption"] = (Interruption.RUN_TO_END_HOLD.value if knowledge is Knowledge.TIERTRACK
                                       else Interruption.RUN_TO_END.value)
        if self.oracle_departure == AS_RAN:  # an oracle's; other servers keep the scenario's (unused)
            changes["oracle_departure"] = (None if knowledge is not Knowledge.ORACLE
                                           else "free_slot" if mode == "async" else "keep_slot")
        return dataclasses.replace(self, **changes) if changes else self

    def train_overhead(self, seed: int, client: int, task: int) -> float:
        """Seconds of real training added to training task ``task`` (its id) of ``client`` (D1):
        ``train_overhead_s + u x train_overhead_spread_s``, u = :func:`task_uniform` (seed, client, task)."""
        if not self.train_overhead_spread_s:
            return self.train_overhead_s
        return self.train_overhead_s + task_uniform(seed, client, task) * self.train_overhead_spread_s

    def per_message_s(self, mode: str) -> float:
        return self.server_per_message_s if mode == "async" else self.server_per_message_sync_s

    @property
    def serial_server(self) -> bool:
        """The server takes time (a queue of messages forms): any blocking cost is set."""
        return self.server_per_message_s > 0 or self.server_per_message_sync_s > 0 or self.server_per_aggregation_s > 0

    def utility(self, count: float, sumsq: float, num_samples: float, previous: float | None = None) -> float:
        """The statistical utility a client reports (Oort, Sec. 4.2): ``sqrt(n x (sumsq + previous))``.

        ``count`` and ``sumsq``: samples and sum of squared losses of the measured batch;
        ``n`` = ``count`` ("batch") or the client's data size ``num_samples`` ("dataset", A1);
        ``previous``: the U the client reported last, carried into an eval reply's accumulator
        (``eval_utility="accumulate"``, A3; pass None for a training reply, whose accumulator is reset).
        """
        n = num_samples if self.utility_scale == "dataset" else count
        carried = previous if (previous is not None and self.eval_utility == "accumulate") else 0.0
        return float(statistical_utility(np.float64(n), np.float64(sumsq) + carried))

    def selector_options(self, mode: str) -> dict[str, Any]:
        """The Oort options this reading sets (under a scenario's own ``selector.KEY``)."""
        if self.semantics != "paper_code":
            return {}
        return {
            # A4: T_pref = the duration at position int(n thr / 100) of an unsorted (join-order) list of the
            # train-eligible clients (async, AO:480-523) or of every client (sync, SO:427-467); never-trained
            # clients count as 60 s (AO:496-505, SO:443-449)
            "t_pref_over": "eligible_unsorted" if mode == "async" else "all_unsorted",
            "unknown_duration_s": 60.0,
            # A6: the pacer only raises, a record per selection call that exploited, checked at every call
            # in every pacer_step-th round (AO:396-418, 602-616, 1301; sync once a round, SO:343-365)
            "pacer_rule": "raise_only_per_call",
            "clip_bound": 1.0,  # A7: the p95 clip is dead code (AO:680-694 overwritten at AO:714)
            "cut_off": 0.0,  # A8: 0.95 x the lowest-ranked score for refills: every explored client qualifies
        }


_TASK_STREAM = 0x44  # the second word of the draw's key: this stream, apart from any other Philox use of the seed


def task_uniform(seed: int, client: int, task: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, client, task): Philox-4x64 with key
    (seed, stream tag) at counter (client, task, 0, 0), its first double. A counter-based draw: no state
    to carry, so a resumed run draws for each task what the uninterrupted run drew."""
    bits = np.random.Philox(key=np.array([seed % 2**64, _TASK_STREAM], np.uint64),
                            counter=np.array([client, task, 0, 0], np.uint64))
    return float(np.random.Generator(bits).random())


# The inline test evaluation's blocking time (C2), fitted on FeLiX syn_0 ~5.0 s per aggregation with the
# cifar10-longhorizon learner (benchmarks/as_run_calibration.py, BENCHMARKS.md "As-run calibration").
PAPER_CODE_AGGREGATION_S = 1.92


READING_VARIANTS = {"paper": Reading.paper, "paper_code": Reading.paper_code}

# Where each switch comes from: the audit's id (docs/readings.md) and the authors' file:line (``run --list``).
SWITCH_SOURCES = {
    "utility_scale": "A1: trainer.py (HT):578-588",
    "utility_augmented": "A1: HT:543-576, trainer main.py (TR):337-363",
    "small_clients": "A2/D3: TR:271-278",
    "eval_utility": "A3: TR:365-418",
    "duration_source": "A5/M1: asyncfl top_aggregator.py (ATA):299-431, 869-872; oort top_aggregator (OTA):219-223",
    "interruption": "E1: TR:296-307, 387-392; HT:303-317",
    "oracle_departure": "C7/F3/F4: async_oort.py (AO):1185-1202",
    "oracle_clients": "F2: aggregator main.py (AG):148-181, syncfl top_aggregator (STA):438-489, trainer JSONs",
    "server_per_message_s": "C1/C3: ATA:191, 777-782, 886-915",
    "server_per_message_sync_s": "C1: OTA:146-207 (no sleep)",
    "server_per_aggregation_s": "C2: ATA:907-921, AG:214-247, STA:526-545 (fitted: docs/readings.md)",
    "eval_counts_toward_concurrency": "B3: AO:233-245, 1206",
    "sync_records_stale": "A14: OTA:76-78, 104-106",
    "sync_busy_selectable": "A15: SO:197, 413-425; end.py:63-72; HT:194",
    "async_exclusion": "A11: AO:722-873, 875-916, 1241-1295, 1307-1327",
    "train_overhead_s": "D1: TR:289-332 (not in the bundle: unmeasured)",
    "stop_window_fill": "S1: eurosys26_expts/scripts/*.sh, check_accuracy (needs 20 accuracy lines)",
    "train_overhead_spread_s": "D1 contention: TR:289-332, 300 trainers on 8 GPUs (not in the bundle: unmeasured)",
    "selector.t_pref_over / unknown_duration_s": "A4: AO:480-523, 496-505; oort.py (SO):427-467",
    "selector.pacer_rule": "A6: AO:396-418, 602-616, 1301; SO:343-365",
    "selector.clip_bound": "A7: AO:680-694, 714",
    "selector.cut_off": "A8: AO:334-347",
}
