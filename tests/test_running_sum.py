"""Updates folded into a running sum as they arrive (fleet/running_sum.py): the same verdicts, weights,
dispatches and model as the buffered path, up to the order of a float32 sum; a memory floor that does not
grow with K; the update guard's verdicts at arrival equal to its verdict on the whole buffer."""

import bisect
import functools
import hashlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort.budget import BudgetError
from felix_jax.cohort.store import DeltaStore
from felix_jax.experiment import get_preset
from felix_jax.experiment.resolution import resolved_sections
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet.running_sum import FOLD_ROWS, RunningSum, fold_page, folds_on_arrival
from felix_jax.fleet.snapshot import save_snapshot
from felix_jax.fleet.update_guard import UpdateGuardConfig, judge_arrival, judge_updates, median_of_sorted
from felix_jax.policies import make_aggregator
from felix_jax.policies.aggregators import BufferInfo

# K above one group of FOLD_ROWS (below it, the buffer is one group and is gathered: nothing runs)
K = 40
SCALE = {"num_clients": 400, "concurrency": 160, "aggregation_goal": K, "max_aggregations": 5,
         "target_accuracy": None, "availability": "avail50", "slot_s": 60.0}


def scenario(strategy: str, buffer: str, **overrides):
    return get_preset("tiny").with_overrides({**SCALE, "strategy": strategy, "aggregation_buffer": buffer, **overrides})


@functools.lru_cache(maxsize=None)
def run(strategy: str, buffer: str, **overrides):
    sim = build_simulator(scenario(strategy, buffer, **overrides))
    return sim, sim.run()


def digest(sim) -> str:
    return hashlib.sha1(repr(sim.acct.dispatch_log).encode()).hexdigest()


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


# ------------------------------------------------------------------ the guard's verdict at arrival
def test_median_of_sorted_is_numpys_median():
    rng = np.random.default_rng(0)
    for _ in range(300):
        pool, zeros = np.sort(rng.random(rng.integers(1, 12)) * 10), int(rng.integers(0, 15))
        assert median_of_sorted(list(pool), zeros) == np.median(np.concatenate([pool, np.zeros(zeros)]))
        assert median_of_sorted(list(pool)) == np.median(pool)


@pytest.mark.parametrize("seed", range(6))
def test_a_verdict_given_at_arrival_is_the_buffers(seed):
    # every verdict judge_arrival gives early (median over the buffer) is the one judge_updates gives the
    # whole buffer: rows far above the median, NaNs, norms past max_norm, short and long histories
    rng = np.random.default_rng(seed)
    cfg = UpdateGuardConfig(max_norm_ratio=float(rng.choice([2.0, 3.0, 10.0])), min_history=int(rng.integers(1, 8)),
                            max_norm=None if seed % 2 else 40.0)
    decided = 0
    for _ in range(60):
        k = int(rng.integers(1, 30))
        recent = rng.lognormal(0, 0.5, int(rng.integers(0, 20)))
        norms = rng.lognormal(0, 1.0, k) * np.where(rng.random(k) < 0.1, 30.0, 1.0)
        finite = rng.random(k) > 0.1
        norms[~finite] = np.nan
        final = judge_updates(finite, norms, recent, cfg)
        pool = sorted(recent)
        for i in range(k):
            if finite[i]:
                bisect.insort(pool, norms[i])
            word = judge_arrival(bool(finite[i]), norms[i], pool, k - i - 1, cfg)
            if word.decided:
                decided += 1
                assert word.accepted == final.accepted[i]
                assert (word.nonfinite, word.over_norm) == (final.nonfinite[i], final.over_norm[i])
            unknown = judge_arrival(bool(finite[i]), norms[i], pool, None, cfg)  # a size not known: no earlier
            assert not unknown.decided or unknown.accepted == final.accepted[i]
    assert decided > 0


def test_judge_arrival_by_hand():
    cfg = UpdateGuardConfig(max_norm_ratio=10.0, min_history=3)
    # recent 1, 2, 3 and this one's 2.0, one to come: the median is at least median(0, 1, 2, 2, 3) = 2
    assert judge_arrival(True, 20.0, [1.0, 2.0, 2.0, 3.0], 1, cfg).accepted
    word = judge_arrival(True, 21.0, [1.0, 2.0, 3.0, 21.0], 1, cfg)  # could be rejected: 21 > 10 * 2
    assert not word.decided
    assert judge_arrival(False, math.nan, [1.0], 5, cfg)[:4] == (True, False, True, False)
    # the online reading: judged now against the norms so far, its own included
    online = UpdateGuardConfig(max_norm_ratio=10.0, min_history=3, median_over="arrivals")
    assert judge_arrival(True, 21.0, [1.0, 2.0, 3.0, 21.0], 1, online).accepted  # 21 <= 10 * median 2.5
    assert judge_arrival(True, 30.0, [1.0, 2.0, 3.0, 30.0], 1, online)[:4] == (True, False, False, True)
    with pytest.raises(ValueError, match="median_over"):
        UpdateGuardConfig(median_over="window")


# ------------------------------------------------------------------ the device arithmetic
def test_fold_page_by_hand_and_one_compilation():
    page = {"a": jnp.arange(12.0).reshape(4, 3), "b": jnp.arange(4.0)}
    acc = {"a": jnp.zeros(3), "b": jnp.zeros(())}
    acc = fold_page(acc, page, np.array([2, 0, 0, 0], np.int32), np.array([0.5, 2.0, 9.0, 9.0], np.float32),
                    np.int32(2))
    np.testing.assert_array_equal(acc["a"], 0.5 * np.array([6.0, 7, 8]) + 2 * np.array([0.0, 1, 2]))
    assert float(acc["b"]) == 0.5 * 2 + 2 * 0
    before = fold_page._cache_size()
    fold_page(acc, page, np.array([1, 3, 0, 0], np.int32), np.ones(4, np.float32), np.int32(3))
    assert fold_page._cache_size() == before  # another count, the same program


def test_running_sum_folds_rows_where_they_lie():
    rng = np.random.default_rng(1)
    template = {"w": jnp.zeros((5,)), "b": jnp.zeros((2,))}
    store = DeltaStore(template, capacity=16, page_rows=8)
    rows = {"w": jnp.asarray(rng.normal(size=(20, 5)), jnp.float32), "b": jnp.asarray(rng.normal(size=(20, 2)),
                                                                                   jnp.float32)}
    slots = store.write(rows, np.arange(20))
    rs = RunningSum(template, group=4)
    pick = np.array([3, 17, 9, 0, 11, 12, 19])
    w = rng.random(len(pick)).astype(np.float32)
    rs.fold(store, slots[pick], w)
    got = rs.mean(2.0)
    for k in ("w", "b"):
        np.testing.assert_allclose(got[k], (w[:, None] * np.asarray(rows[k])[pick]).sum(0) / 2, rtol=1e-6)
    finite, norms, transformed = rs.measure(rows)
    np.testing.assert_allclose(norms, np.sqrt((np.asarray(rows["w"]) ** 2).sum(1) + (np.asarray(rows["b"]) ** 2)
                                               .sum(1)), rtol=1e-6)
    assert finite.all() and (transformed == norms).all()


def test_gather_into_a_reused_buffer_is_bit_for_bit():
    rng = np.random.default_rng(2)
    template = {"w": jnp.zeros((3,))}
    store = DeltaStore(template, capacity=16, page_rows=4)
    rows = {"w": jnp.asarray(rng.normal(size=(16, 3)), jnp.float32)}
    slots = store.write(rows, np.arange(16))
    first = store.gather(slots[[5, 1, 14, 2]])
    again = store.gather(slots[[0, 9, 3, 15]], into=first)
    np.testing.assert_array_equal(again["w"], np.asarray(rows["w"])[[0, 9, 3, 15]])
    assert first["w"].is_deleted()  # donated: written in place


# ------------------------------------------------------------------ which aggregators run
def test_which_aggregators_fold_updates_as_they_arrive():
    from felix_jax.fleet.config import FleetConfig

    cfg = FleetConfig(aggregation_goal=K)
    for name, options in (("fedbuff", {}), ("fedasync", {}), ("fedavg", {}), ("tierfuse", {}),
                          ("tierfuse", {"delta_bound": "clip"})):
        assert folds_on_arrival(make_aggregator(name, **options), cfg), name
    for name, options in (("fedbuff", {"match_step": "tierfuse"}), ("median", {}), ("trimmed-mean", {}),
                          ("krum", {}), ("refl_saa", {}), ("qfedavg", {})):
        assert not folds_on_arrival(make_aggregator(name, **options), cfg), name
    assert not folds_on_arrival(make_aggregator("fedbuff"), FleetConfig(aggregation_goal=K,
                                                                        aggregation_buffer="always"))
    assert not folds_on_arrival(make_aggregator("fedbuff"), FleetConfig(aggregation_goal=FOLD_ROWS))


@pytest.mark.parametrize("name", ["fedbuff", "fedasync", "fedavg", "tierfuse"])
def test_a_per_update_weight_is_its_rows_own(name):
    rng = np.random.default_rng(3)
    n = 50
    info = BufferInfo(staleness=rng.integers(0, 20, n), num_samples=rng.integers(1, 300, n).astype(np.float64),
                      utility=rng.random(n) * 400, loss_mean=rng.random(n) * 3, delta_norms=rng.random(n) * 2)
    agg = make_aggregator(name)
    whole = agg.weights(info)
    for i in range(n):
        one = agg.weights(info._make(None if f is None else np.asarray(f)[i:i + 1] for f in info))
        assert one.shape == (1,) and one[0] == whole[i]


# ------------------------------------------------------------------ the run: running sum against the buffer
@pytest.mark.parametrize("strategy", ["fedbuff", "felix"])
def test_running_sum_equals_the_buffered_path(strategy):
    (running, rec_r), (buffered, rec_b) = run(strategy, "auto"), run(strategy, "always")
    assert running._running is not None and buffered._running is None
    assert len(rec_r.aggregation_times) == len(rec_b.aggregation_times) == SCALE["max_aggregations"] + 1
    assert digest(running) == digest(buffered)  # the same selections, every one
    for x, y in zip(leaves(rec_r.params), leaves(rec_b.params)):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)  # float32 sums in another order
    np.testing.assert_allclose(running.acct.agg_weights, buffered.acct.agg_weights, rtol=1e-6)
    assert list(running.acct.staleness) == list(buffered.acct.staleness)
    assert [c.accuracy for c in rec_r.checkpoints] == [c.accuracy for c in rec_b.checkpoints]
    # nothing held between aggregations: the rows in use are the results computed ahead of their replies
    assert running.executor.deltas.num_used <= buffered.executor.deltas.num_used


def test_rows_held_for_the_median_are_judged_by_the_whole_buffer():
    # a short guard history (10 norms against K = 40): the median's lowest reach stays 0 for the first ~15
    # arrivals of each buffer, whose rows wait; judged again once more of the buffer is in, or by all of it
    short = {"update_guard.history": 10}
    sim = build_simulator(scenario("fedbuff", "auto", **short))
    judge, waited = sim._judge_arrival, [0]

    def counting(*args):
        word = judge(*args)
        waited[0] += not word.decided
        return word

    sim._judge_arrival = counting
    rec = sim.run()
    buffered, rec_b = run("fedbuff", "always", **short)
    assert waited[0] >= SCALE["max_aggregations"] * 10
    assert digest(sim) == digest(buffered)
    for x, y in zip(leaves(rec.params), leaves(rec_b.params)):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


def poison_task(sim, nth: int, kind: str):
    """The ``nth`` training task computed (1-based) comes out of its device call NaN or scaled 10^6, as a
    broken client would send it: the buffered path gathers it, the running sum measures it as it is stored."""
    train, seen = sim.engine.train, [0]

    def poisoned(stacked, slots, clients, ids, times=None, sink=None):
        def wrap(part, positions, rows):
            hit = [r for p, r in zip(positions, rows) if seen[0] < nth <= seen[0] + len(positions)
                   and p == positions[nth - seen[0] - 1]]
            seen[0] += len(positions)
            if hit:
                bad = (lambda d: d.at[hit[0]].set(jnp.nan)) if kind == "nan" else (lambda d: d.at[hit[0]].multiply(1e6))
                part = jax.tree_util.tree_map(bad, part)
            sink(part, positions, rows)
        return train(stacked, slots, clients, ids, times, sink=wrap)

    sim.engine.train = poisoned
    return sim


@pytest.mark.parametrize("kind", ["nan", "scale"])
def test_a_poisoned_update_is_rejected_as_the_buffer_rejects_it(kind):
    recs = {}
    for buffer in ("auto", "always"):
        sim = poison_task(build_simulator(scenario("fedbuff", buffer)), nth=70, kind=kind)
        recs[buffer] = sim, sim.run()
    (running, rec_r), (buffered, rec_b) = recs["auto"], recs["always"]
    expected = (1, 0) if kind == "nan" else (0, 1)
    for sim in (running, buffered):
        assert (sim.acct.rejected_updates_nonfinite, sim.acct.rejected_updates_norm) == expected
    assert digest(running) == digest(buffered)
    for x, y in zip(leaves(rec_r.params), leaves(rec_b.params)):
        assert np.isfinite(x).all()
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


def test_the_online_median_and_what_it_holds():
    # median_over=arrivals: every update judged at its arrival, no row held; a clean run accepts the same
    sim, rec = run("fedbuff", "auto", **{"update_guard.median_over": "arrivals"})
    _, base = run("fedbuff", "always")
    assert not sim._running.held and digest(sim) == digest(run("fedbuff", "always")[0])
    assert sim.acct.rejected_updates_norm == base.accounting.rejected_updates_norm == 0
    assert sim.acct.guard_verdicts_unlike_buffer == 0  # counted against the median over each whole buffer


def test_a_snapshot_in_the_middle_of_an_aggregation_resumes_exactly(tmp_path):
    sc = scenario("fedbuff", "auto")
    _, whole = run("fedbuff", "auto")
    first = build_simulator(sc)
    fold = first._fold_arrivals

    def fold_then_pause():  # after the third aggregation's first group: part folded in, the rest to come
        fold()
        if first.version >= 2 and first._running.acc is not None:
            first.request_stop("paused")

    first._fold_arrivals = fold_then_pause
    first.run()
    assert 0 < len(first._running) < K and first._running.acc is not None
    save_snapshot(first, tmp_path)
    resumed = build_simulator(sc)
    resumed.restore(tmp_path)
    rec = resumed.run()
    assert resumed.acct.dispatch_log == whole.accounting.dispatch_log
    for x, y in zip(leaves(rec.params), leaves(whole.params)):
        np.testing.assert_array_equal(x, y)


# ------------------------------------------------------------------ memory: the floor and config.json
def refusal(buffer: str, goal: int, **overrides) -> str:
    with pytest.raises(BudgetError) as caught:
        build_simulator(scenario("fedbuff", buffer, aggregation_goal=goal, concurrency=goal, memory_budget_gb=0.05,
                                 **overrides))
    return str(caught.value)


def test_the_memory_floor_does_not_grow_with_k():
    def need(message):  # the minimum less the runtime's resident memory (measured: it varies between builds)
        total = float(message.split("needs at least ", 1)[1].split(" MB", 1)[0].replace(",", ""))
        return total - float(message.split("(measured) ", 1)[1].split(" MB", 1)[0].replace(",", ""))

    online = {"update_guard.median_over": "arrivals"}
    small, large = refusal("auto", 100, **online), refusal("auto", 400, **online)
    assert "a running sum of the updates as they arrive" in small and "updates held" not in small
    assert abs(need(large) - need(small)) < 1.0  # tasks in flight (a few KB each) and records: not the buffer
    buffered = refusal("always", 400)
    assert "400 buffered updates and two copies at aggregation" in buffered and need(buffered) > need(large) + 700
    exact = refusal("auto", 400)  # the median over the whole buffer: up to about half of it held
    assert "201 updates held for the update guard's median" in exact
    assert exact.endswith("set update_guard.median_over=arrivals (no update held for the median) or lower "
                          "aggregation_goal")


def test_config_json_records_the_switch():
    assert resolved_sections(scenario("fedbuff", "always"))["fleet"]["aggregation_buffer"] == "always"
    assert resolved_sections(scenario("fedbuff", "auto"))["fleet"]["aggregation_buffer"] == "auto"
