"""The engine's call log: exact running totals, the last calls kept, bounded memory.

* the tasks-per-call percentiles from the counts equal numpy's over every call (hypothesis);
* the summary equals the one a list of every record gave (the formulas of the former batch_summary);
* indexing by call number, and a clear error past the kept window;
* snapshots: the log's state comes back, and an older snapshot's list of records is replayed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from felix_jax.cohort.call_log import CallLog, CallRecord, percentile_of_counts


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(1, 10_000), min_size=1, max_size=60),
       q=st.sampled_from([0, 1, 10, 25, 33.3, 50, 90, 99, 100]))
def test_percentile_of_counts_is_numpys(values, q):
    uniq, counts = np.unique(np.asarray(values), return_counts=True)
    assert percentile_of_counts(uniq, counts, q) == float(np.percentile(np.asarray(values), q))


def test_percentile_of_counts_by_hand():
    # calls of 1, 1, 4 and 10 tasks: n = 4, the virtual index (n - 1) q / 100
    values, counts = [10, 1, 4], [1, 2, 1]  # any order
    assert percentile_of_counts(values, counts, 10) == 1.0  # index 0.3, between 1 and 1
    assert percentile_of_counts(values, counts, 50) == 2.5  # index 1.5: 1 + (4 - 1) 0.5
    assert percentile_of_counts(values, counts, 90) == pytest.approx(8.2)  # index 2.7: 4 + (10 - 4) 0.7
    assert percentile_of_counts(values, counts, 100) == 10.0
    with pytest.raises(ValueError, match="no values"):
        percentile_of_counts([3], [0], 50)


def _records(rng, n):
    return [CallRecord(str(rng.choice(["train", "eval"])), int(rng.integers(1, 300)), 512, int(rng.integers(1, 9000)),
                       int(rng.integers(1, 900)), float(rng.exponential(0.01)), bool(rng.random() < 0.1),
                       None if rng.random() < 0.7 else int(rng.integers(1, 50)))
            for _ in range(n)]


def _summary_of_a_list(records):  # the former batch_summary, over every record
    out = {}
    for kind in ("train", "eval"):
        recs = [r for r in records if r.kind == kind]
        if not recs:
            continue
        padded = sum(r.executed_work for r in recs)
        useful = sum(r.useful_work for r in recs)
        sizes = np.array([r.num_tasks for r in recs])
        out[kind] = {"calls": len(recs), "tasks": int(sum(r.num_tasks if r.own_tasks is None else r.own_tasks
                                                          for r in recs)),
                     "mean_tasks_per_call": float(sizes.mean()), "p10_tasks_per_call": float(np.percentile(sizes, 10)),
                     "p90_tasks_per_call": float(np.percentile(sizes, 90)),
                     "padding_waste": 0.0 if padded == 0 else 1.0 - useful / padded,
                     "compiles": sum(r.compiled for r in recs), "seconds": float(sum(r.seconds for r in recs))}
    return out


def _logged(seed, n, keep):
    records = _records(np.random.default_rng(seed), n)
    log = CallLog(keep=keep)
    for r in records:
        log.append(r)
    return records, log


def test_the_summary_is_the_lists_and_memory_stays_bounded():
    records, log = _logged(0, 3000, keep=100)
    assert log.summary() == _summary_of_a_list(records)
    assert len(log) == 3000 and list(log) == records[-100:] and len(log._recent) == 100
    assert log.seconds == sum(r.seconds for r in records)
    assert log.compiled_seconds == sum(r.seconds for r in records if r.compiled)
    assert log[-1] is records[-1] and log[2900] is records[2900] and log[2950:] == records[2950:]
    with pytest.raises(IndexError, match="summarized, not kept"):
        log[5]
    with pytest.raises(IndexError, match="summarized, not kept"):
        log[10:]
    with pytest.raises(IndexError, match="of 3000"):
        log[3000]
    sizes = {t for k in log._kinds.values() for t in k.sizes}
    assert len(sizes) <= 299  # the counts hold a number per distinct task count, not per call


def test_a_snapshot_of_the_log_comes_back_and_an_old_list_is_replayed():
    records, log = _logged(1, 50, keep=10)
    back = CallLog(keep=10)
    back.load_state_dict(log.state_dict())
    assert back.summary() == log.summary() and list(back) == list(log) and len(back) == 50
    assert (back.seconds, back.compiled_seconds) == (log.seconds, log.compiled_seconds)
    old = CallLog(keep=10)
    old.load_state_dict(records)  # a snapshot from when the engine kept a list of every record
    assert old.summary() == log.summary() and list(old) == records[-10:]
