"""Static-shape bucketing of a task batch (host side, numpy).

XLA compiles once per shape, so a flush of tasks is cut into groups whose task
count is padded to a power of two and whose scan length comes from a ladder
(1, 2, 3, 4, 6, 8, 12, 16, ...: at most 33% padding per task). Tasks differ in
step count in epoch mode (client sizes 1..1,193 in the paper's split), so which
groups to merge is a small optimisation: an exact dynamic programme over the
sorted ladder groups that minimises padded task-steps plus a per-call overhead.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def ladder_ceil(n: int) -> int:
    """Smallest value >= n in the ladder 1, 2, 3, 4, 6, 8, 12, 16, 24, ..."""
    n = max(int(n), 1)
    p = next_pow2(n)
    three_quarters = 3 * p // 4
    return three_quarters if (p >= 4 and n <= three_quarters) else p


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One compiled call: ``indices`` into the flush, padded to ``num_tasks``."""

    indices: np.ndarray  # (n,) positions of the real tasks in the flush
    num_tasks: int  # >= len(indices): a power of two per device (``bucket_size``)
    length: int  # scan length (steps or batches) from the ladder

    @property
    def padded_work(self) -> int:
        return self.num_tasks * self.length


def bucket_size(n: int, min_tasks: int = 1, devices: int = 1) -> int:
    """Padded task count of a call with ``n`` real tasks: a power of two per device, times ``devices``.

    At least ``min_tasks`` in all. One device: the next power of two >= max(n, min_tasks).
    """
    per_device = max(-(-int(n) // devices), -(-int(min_tasks) // devices))
    return devices * next_pow2(per_device)


def plan_buckets(lengths: np.ndarray, max_tasks: int = 256, call_overhead: int = 8, min_tasks: int = 1,
                 chunk: int | None = None, devices: int = 1) -> list[Bucket]:
    """Groups tasks with per-task ``lengths`` into buckets; see module docstring.

    ``call_overhead`` is the fixed cost of one extra call, in task-steps; larger
    values merge more aggressively. Buckets hold at least ``min_tasks`` (padded).
    ``chunk``: the engine steps chunks of this many tasks (sorted by length) and
    stops each at its longest task, so a group costs about the sum over its chunks
    of chunk size x chunk maximum (``None``: one chunk, the whole bucket).
    ``devices``: the bucket is split over this many devices, each holding a power of
    two of tasks (``bucket_size``), dealt round-robin (``plan.task_layout``), so a
    device's chunk spans ``chunk x devices`` consecutive sorted tasks.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or lengths.size == 0:
        return []
    if lengths.min() < 0:
        raise ValueError("task lengths must be >= 0")
    if max_tasks < 1 or max_tasks & (max_tasks - 1):
        raise ValueError(f"max_tasks must be a power of two, got {max_tasks}")
    if min_tasks < 1 or min_tasks & (min_tasks - 1) or min_tasks > max_tasks:
        raise ValueError(f"min_tasks must be a power of two <= max_tasks, got {min_tasks}")
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    order = np.argsort(lengths, kind="stable")
    rungs = np.array([ladder_ceil(v) for v in lengths[order]])
    bounds = np.flatnonzero(np.diff(rungs)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(order)]])
    g = len(starts)

    sorted_lengths = lengths[order]

    def cost(i: int, j: int) -> int:  # merge ladder groups i..j (inclusive) into one call
        n = ends[j] - starts[i]
        calls = -(-n // max_tasks)
        if chunk is None:
            per_call = bucket_size(min(n, max_tasks), min_tasks, devices)
            return calls * (per_call * int(rungs[ends[j] - 1]) + call_overhead)
        return calls * call_overhead + executed_work(sorted_lengths[starts[i]: ends[j]], chunk * devices)

    best = [0] + [np.iinfo(np.int64).max] * g
    choice = [0] * (g + 1)
    for j in range(1, g + 1):
        for i in range(j):
            c = best[i] + cost(i, j - 1)
            if c < best[j]:
                best[j], choice[j] = c, i
    buckets: list[Bucket] = []
    j = g
    while j > 0:
        i = choice[j]
        idx = order[starts[i]: ends[j - 1]]
        length = int(rungs[ends[j - 1] - 1])
        for k in range(0, len(idx), max_tasks):
            part = idx[k: k + max_tasks]
            buckets.append(Bucket(part, bucket_size(len(part), min_tasks, devices), length))
        j = i
    return buckets[::-1]


def executed_work(sorted_lengths: np.ndarray, chunk: int) -> int:
    """Task-steps computed when ascending ``sorted_lengths`` run in chunks that stop at their maximum."""
    n = len(sorted_lengths)
    if n == 0:
        return 0
    maxima = sorted_lengths[np.minimum(np.arange(chunk - 1, n + chunk - 1, chunk), n - 1)]
    sizes = np.minimum(chunk, n - np.arange(0, n, chunk))
    return int(np.sum(maxima * sizes))


def padding_waste(lengths: np.ndarray, buckets: list[Bucket]) -> float:
    """Fraction of computed task-steps that were padding (0 = none)."""
    padded = sum(b.padded_work for b in buckets)
    return 0.0 if padded == 0 else 1.0 - float(np.sum(lengths)) / padded
