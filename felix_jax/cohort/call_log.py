"""The cohort engine's record of its device calls, bounded (docs/architecture.md, "What a run holds").

A run makes one device call or more per flush, and at 10^4 tasks in flight it flushes at about every
reply: kept as a list of records (~400 bytes a call), the log grew with the run, by gigabytes over a
virtual day. :class:`CallLog` keeps exact running totals per kind (calls, tasks, work, compilations,
seconds, and how many calls had each task count, which gives the tasks-per-call percentiles exactly)
and the last ``keep`` calls as :class:`CallRecord` for inspection. Indexing is by call number since
the run began; a call older than the kept window raises an ``IndexError`` that says so.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

KEEP = 4096  # the last calls kept as records


@dataclasses.dataclass
class CallRecord:
    kind: str  # "train" or "eval"
    num_tasks: int  # real tasks
    padded_tasks: int  # bucket size (a power of two per device)
    executed_work: int  # task-steps computed (chunks stop at their longest task)
    useful_work: int  # sum of real tasks' steps / batches
    seconds: float  # host wall time incl. device sync
    compiled: bool  # first call with this shape
    own_tasks: int | None = None  # a call shared with other experiments (cohort/group.py): this one's tasks


@dataclasses.dataclass
class _Totals:
    calls: int = 0
    tasks: int = 0  # this experiment's own tasks
    executed_work: int = 0
    useful_work: int = 0
    compiles: int = 0
    seconds: float = 0.0  # summed in call order, as a sum over the records gives
    sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # num_tasks -> calls


def percentile_of_counts(values, counts, q: float) -> float:
    """``np.percentile(np.repeat(values, counts), q)`` (the default, linear method) without the repeat:
    the two order statistics around the virtual index ``(n - 1) q / 100`` are read off the counts and
    interpolated as numpy does (``a + (b - a) t``, or ``b - (b - a) (1 - t)`` for ``t >= 0.5``)."""
    order = np.argsort(np.asarray(values))
    v = np.asarray(values)[order]
    c = np.asarray(counts, np.int64)[order]
    n = int(c.sum())
    if n == 0:
        raise ValueError("percentile of no values")
    ends = np.cumsum(c)  # the sorted multiset's index i holds v[searchsorted(ends, i, 'right')]
    virtual = np.float64(n - 1) * (np.float64(q) / np.float64(100))
    lo = int(math.floor(virtual))
    hi = min(lo + 1, n - 1)
    a = np.float64(v[int(np.searchsorted(ends, lo, side="right"))])
    b = np.float64(v[int(np.searchsorted(ends, hi, side="right"))])
    t = virtual - np.float64(lo)
    diff = b - a
    return float(b - diff * (1 - t)) if t >= 0.5 else float(a + diff * t)


class CallLog:
    """Running totals of every call and the last ``keep`` calls as records (a sequence by call number)."""

    def __init__(self, keep: int = KEEP):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = int(keep)
        self._recent: collections.deque[CallRecord] = collections.deque(maxlen=self.keep)
        self._count = 0
        self.seconds = 0.0  # every call's seconds, in call order
        self.compiled_seconds = 0.0  # the seconds of the calls that compiled
        self._kinds: dict[str, _Totals] = {}

    def append(self, rec: CallRecord) -> None:
        self._recent.append(rec)
        self._count += 1
        self.seconds += rec.seconds
        if rec.compiled:
            self.compiled_seconds += rec.seconds
        tot = self._kinds.setdefault(rec.kind, _Totals())
        tot.calls += 1
        tot.tasks += rec.num_tasks if rec.own_tasks is None else rec.own_tasks
        tot.executed_work += rec.executed_work
        tot.useful_work += rec.useful_work
        tot.compiles += bool(rec.compiled)
        tot.seconds += rec.seconds
        tot.sizes[int(rec.num_tasks)] += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        """The kept calls, oldest first."""
        return iter(self._recent)

    def __getitem__(self, i):
        first = self._count - len(self._recent)  # the call number of the oldest kept record
        if isinstance(i, slice):
            start, stop, step = i.indices(self._count)
            if start < first and start < stop:
                raise IndexError(f"calls before {first} are summarized, not kept (the last {self.keep} are)")
            return [self._recent[j - first] for j in range(start, stop, step)]
        j = i + self._count if i < 0 else i
        if not 0 <= j < self._count:
            raise IndexError(f"call {i} of {self._count}")
        if j < first:
            raise IndexError(f"call {j} is summarized, not kept (the last {self.keep} calls are)")
        return self._recent[j - first]

    def summary(self) -> dict:
        """Per kind: calls, tasks, tasks per call (mean, p10, p90), padding waste, compilations, seconds."""
        out = {}
        for kind in ("train", "eval"):
            tot = self._kinds.get(kind)
            if tot is None or not tot.calls:
                continue
            values, counts = zip(*sorted(tot.sizes.items()))
            out[kind] = {
                "calls": tot.calls,
                "tasks": tot.tasks,
                "mean_tasks_per_call": sum(v * c for v, c in zip(values, counts)) / tot.calls,
                "p10_tasks_per_call": percentile_of_counts(values, counts, 10),
                "p90_tasks_per_call": percentile_of_counts(values, counts, 90),
                "padding_waste": 0.0 if tot.executed_work == 0 else 1.0 - tot.useful_work / tot.executed_work,
                "compiles": tot.compiles,
                "seconds": float(tot.seconds),
            }
        return out

    def state_dict(self) -> dict:
        """Totals and the kept records (snapshots)."""
        return {"count": self._count, "seconds": self.seconds, "compiled_seconds": self.compiled_seconds,
                "recent": list(self._recent),
                "kinds": {k: {"calls": t.calls, "tasks": t.tasks, "executed_work": t.executed_work,
                              "useful_work": t.useful_work, "compiles": t.compiles, "seconds": t.seconds,
                              "sizes": sorted(t.sizes), "size_calls": [t.sizes[s] for s in sorted(t.sizes)]}
                          for k, t in self._kinds.items()}}

    def load_state_dict(self, state) -> None:
        """Restores :meth:`state_dict`; a snapshot written when the engine kept every call as a list of
        records is replayed into the totals."""
        self.__init__(self.keep)
        if isinstance(state, list):
            for rec in state:
                self.append(rec)
            return
        self._count = int(state["count"])
        self.seconds, self.compiled_seconds = float(state["seconds"]), float(state["compiled_seconds"])
        self._recent.extend(state["recent"])
        for k, t in state["kinds"].items():
            self._kinds[k] = _Totals(int(t["calls"]), int(t["tasks"]), int(t["executed_work"]), int(t["useful_work"]),
                                     int(t["compiles"]), float(t["seconds"]),
                                     collections.Counter({int(s): int(c) for s, c in zip(t["sizes"], t["size_calls"])}))
