"""The two readings of the paper (felix_jax/fleet/reading.py): each switch of the code's reading
against hand-computed values, and the bundles as each strategy resolves them."""

import math

import jax
import numpy as np
import pytest

from felix_jax.cohort import CohortEngine, LocalTrainConfig
from felix_jax.cohort.local import local_train
from felix_jax.data.federated import to_device
from felix_jax.data.partition import partition_from_counts
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator, fleet_config
from felix_jax.fleet import Interruption, task_timeline
from felix_jax.fleet.clientmap import ClientMap
from felix_jax.fleet.knowledge import Knowledge
from felix_jax.fleet.modes import AsyncMode
from felix_jax.fleet.reading import Reading
from felix_jax.options import OptionError
from felix_jax.policies.selectors.base import SelectionContext
from felix_jax.policies.selectors.oort import make_oort_selector
from felix_jax.policies.selectors.oort_math import OortConfig, Pacer, PacerState
from tests.conftest import make_image_dataset, needs_data
from tests.test_fleet import MODEL, E, T, U, make_sim, trace_of

CODE = Reading.paper_code()


# ------------------------------------------------------------------ utility (A1, A3)
def test_utility_batch_scale_is_the_texts():
    # 32 samples at loss 1.5: sumsq = 32 * 2.25 = 72; U = sqrt(32 * 72) = 48
    assert Reading().utility(32.0, 72.0, 114) == pytest.approx(48.0)


def test_utility_dataset_scale_multiplies_by_the_clients_data_size():
    # the code's U = sqrt(N x first-batch sum): N = 114 -> sqrt(114 * 72) = 90.598...
    assert CODE.utility(32.0, 72.0, 114) == pytest.approx(math.sqrt(8208.0))


def test_eval_reply_carries_the_previous_utility_into_the_accumulator():
    # AS-RUN A3: one eval inflates U ~1.5x at N = 114 and ~2.25x at N = 1,193 (loss 1.5)
    for n, ratio in ((114, 1.50), (1193, 2.25)):
        u_train = CODE.utility(32.0, 72.0, n)
        u_eval = CODE.utility(32.0, 72.0, n, previous=u_train)
        assert u_eval == pytest.approx(math.sqrt(n * (u_train + 72.0)))
        assert u_eval / u_train == pytest.approx(ratio, abs=0.02)
    # the text's reading: a clean measurement, whatever came before
    assert Reading().utility(32.0, 72.0, 114, previous=1e6) == pytest.approx(48.0)


# ------------------------------------------------------------------ bundles
@pytest.mark.parametrize("strategy, interruption, departure", [
    ("felix", "run_to_end_hold", "keep_slot"),  # TierTrack: the held send; no oracle
    ("oort-async", "run_to_end", "keep_slot"),
    ("oort-async-oracle", "run_to_end", "free_slot"),  # C7: the async oracle frees the slot
    ("oort-oracle", "run_to_end", "keep_slot"),  # F4: the sync one does not
    ("oort", "run_to_end", "keep_slot"),
])
def test_paper_code_resolves_what_each_strategy_ran_with(strategy, interruption, departure):
    sc = get_preset("tiny").with_overrides({"strategy": strategy, "semantics": "paper_code"})
    cfg = fleet_config(sc, sc.resolve_strategy().strategy)
    assert cfg.interruption.value == interruption and cfg.oracle_departure == departure
    assert cfg.reading.semantics == "paper_code" and cfg.reading.server_per_message_s == 0.2


def test_the_papers_reading_changes_nothing():
    sc = get_preset("tiny").with_overrides({"strategy": "felix"})
    cfg = fleet_config(sc, sc.resolve_strategy().strategy)
    assert cfg.reading == Reading() and cfg.interruption is Interruption.RESUME and not cfg.reading.serial_server
    assert sc.resolve_strategy().selector == OortConfig()


def test_one_switch_flips_on_top_of_the_bundle_and_a_scenario_option_wins_over_it():
    sc = get_preset("tiny").with_overrides({"strategy": "oort-async", "semantics": "paper_code",
                                            "reading.server_per_message_s": "0", "reading.interruption": "resume",
                                            "selector.cut_off": "0.05"})
    cfg = fleet_config(sc, sc.resolve_strategy().strategy)
    assert cfg.reading.server_per_message_s == 0.0 and cfg.interruption is Interruption.RESUME
    assert cfg.reading.utility_scale == "dataset"  # the rest of the bundle stays
    sel = sc.resolve_strategy().selector
    assert (sel.cut_off, sel.t_pref_over, sel.pacer_rule) == (0.05, "eligible_unsorted", "raise_only_per_call")
    sync = get_preset("tiny").with_overrides({"strategy": "oort", "semantics": "paper_code"}).resolve_strategy()
    assert sync.selector.t_pref_over == "all_unsorted"  # sync OORT's list holds every client
    fedscale = get_preset("tiny").with_overrides({"strategy": "oort-oracle-fedscale", "semantics": "paper_code"})
    assert fedscale.resolve_strategy().selector.t_pref_over == "registered"  # another variant keeps its own


def test_bad_reading_options_are_one_line():
    for overrides, match in (({"semantics": "code"}, "semantics"),
                             ({"reading.utility_scale": "huge"}, "utility_scale"),
                             ({"reading.server_per_aggregation_s": "-1"}, "server_per_aggregation_s"),
                             ({"reading.nope": "1"}, "reading.nope"),
                             ({"reading.semantics": "paper_code"}, "semantics")):
        with pytest.raises(OptionError, match=match):
            get_preset("tiny").with_overrides(overrides)


# ------------------------------------------------------------------ lifecycle (E1)
def test_held_send_waits_while_the_client_is_away_but_not_in_avl_eval():
    away = trace_of([(0, T), (10, U), (50, T)])
    train = frozenset({T})
    end = task_timeline(away, 0, 0.0, 20.0, train, Interruption.RUN_TO_END)
    hold = task_timeline(away, 0, 0.0, 20.0, train, Interruption.RUN_TO_END_HOLD)
    assert (end.finish_s, end.first_stop_s) == (20.0, 10.0)  # sent at once though the client is away
    assert (hold.finish_s, hold.first_stop_s, hold.interruptions) == (50.0, 10.0, 0)  # held until it is back
    assert task_timeline(away, 0, 0.0, 5.0, train, Interruption.RUN_TO_END_HOLD).finish_s == 5.0
    evals = trace_of([(0, T), (10, E), (30, U), (50, T)])
    assert task_timeline(evals, 0, 0.0, 20.0, train, Interruption.RUN_TO_END_HOLD).finish_s == 20.0  # AVL_EVAL
    assert task_timeline(evals, 0, 0.0, 35.0, train, Interruption.RUN_TO_END_HOLD).finish_s == 50.0
    gone = trace_of([(0, T), (10, U)])
    assert math.isinf(task_timeline(gone, 0, 0.0, 20.0, train, Interruption.RUN_TO_END_HOLD).finish_s)


# ------------------------------------------------------------------ selection (A4, A6)
def _view(durations, eligible):
    view = ClientMap.create(np.full(len(durations), 64))
    for c, d in enumerate(durations):
        view.record_utility(c, 10.0 + c, 1)
        if np.isfinite(d):
            view.record_training(c, d)
    mask = np.zeros(len(durations), bool)
    mask[eligible] = True
    return view, mask


def test_t_pref_is_one_eligible_clients_duration_in_client_order():
    durations = [50.0, 5.0, 40.0, 3.0, np.nan, 7.0, 9.0, 2.0, 8.0, 1.0]
    view, mask = _view(durations, [0, 2, 3, 4, 6, 7, 8, 9])
    cfg = OortConfig(t_pref_over="eligible_unsorted")
    sel = make_oort_selector(cfg)
    ctx = SelectionContext(view, mask, 5, 0.0, np.random.default_rng(0), None, 8)
    _, state = sel.select(sel.init(), ctx, 1)
    assert state.t_pref == 3.0  # int(8 * 30 / 100) = 2: the third eligible client (3), unsorted
    cfg40 = OortConfig(t_pref_over="eligible_unsorted", round_threshold=40.0)
    _, state = make_oort_selector(cfg40).select(make_oort_selector(cfg40).init(), ctx, 1)
    assert state.t_pref == 60.0  # int(8 * 0.4) = 3: client 4, never trained: 60 s
    sync = OortConfig(t_pref_over="all_unsorted")
    _, state = make_oort_selector(sync).select(make_oort_selector(sync).init(), ctx, 1)
    assert state.t_pref == 3.0  # int(10 * 0.3) = 3 of all clients: client 3
    sorted_cfg = OortConfig()
    _, state = make_oort_selector(sorted_cfg).select(make_oort_selector(sorted_cfg).init(), ctx, 1)
    assert state.t_pref == 3.0  # the text: sorted explored durations [1,2,3,5,...], index int(9 * 0.3) = 2


def test_raise_only_pacer_by_hand():
    pacer = Pacer(step=2, delta=5.0)
    state = PacerState(30.0)
    for u in (5.0, 5.0, 1.0):
        state = pacer.record(state, u)
    assert pacer.raise_only(state).threshold == 30.0  # fewer than 2 steps of records: no decision
    state = pacer.record(state, 1.0)  # older 5 + 5 > newer 1 + 1
    assert pacer.raise_only(state).threshold == 35.0
    assert pacer.raise_only(pacer.raise_only(state)).threshold == 40.0  # checked again, raised again
    rising = PacerState(30.0, 4, (1.0, 1.0, 5.0, 5.0))
    assert pacer.raise_only(rising).threshold == 30.0  # never falls
    assert pacer.raise_only(PacerState(98.0, 4, (5.0, 5.0, 1.0, 1.0))).threshold == 100.0


def test_per_call_pacer_records_each_exploiting_call_and_checks_only_in_every_step_th_round():
    view, mask = _view([5.0] * 10, list(range(10)))
    cfg = OortConfig(pacer_rule="raise_only_per_call", pacer_step=2, exploration_factor=0.0, exploration_min=0.0)
    sel = make_oort_selector(cfg)
    state = sel.init()
    rng = np.random.default_rng(0)
    for _ in range(4):  # round 1: records, no check
        _, state = sel.select(state, SelectionContext(view, mask, 1, 0.0, rng, None, 10), 1)
    assert len(state.pacer.history) == 4 and state.pacer.threshold == 30.0
    falling = PacerState(30.0, 4, (50.0, 50.0, 1.0, 1.0))
    _, after = sel.select(state._replace(pacer=falling), SelectionContext(view, mask, 2, 0.0, rng, None, 10), 1)
    assert after.pacer.threshold == 35.0  # round 2 = a multiple of the step: checked at the call
    _, after = sel.select(state._replace(pacer=falling), SelectionContext(view, mask, 3, 0.0, rng, None, 10), 1)
    assert after.pacer.threshold == 30.0


# ------------------------------------------------------------------ local training (A1, A2)
def test_small_clients_take_no_step_under_the_codes_loader():
    text, code = LocalTrainConfig(batch_size=32), LocalTrainConfig(batch_size=32, min_one_step=False)
    counts = np.array([1, 31, 32, 70])
    assert text.num_steps(counts).tolist() == [1, 1, 1, 2]
    assert code.num_steps(counts).tolist() == [0, 0, 1, 2]


def _train_one(cfg, num_steps):
    ds = make_image_dataset(num_train=40, num_test=8)
    data = to_device(ds, partition_from_counts(40, np.array([20, 20]), seed=0))
    params = MODEL.init(jax.random.key(0))
    return params, local_train(MODEL, cfg, 2, params, data, 0, jax.random.key(1), num_steps)


def test_a_zero_step_client_reports_a_zero_delta_and_zero_utility_statistics():
    cfg = LocalTrainConfig(batch_size=32, min_one_step=False, augment=True, utility_on_augmented=True)
    _, out = _train_one(cfg, cfg.num_steps(np.array([20]))[0])
    assert all(float(np.abs(d).max()) == 0.0 for d in jax.tree_util.tree_leaves(out.delta))
    assert float(out.first_batch.count) == 0.0 and CODE.utility(out.first_batch.count, out.first_batch.sumsq, 20) == 0


def test_a_zero_step_task_measures_nothing_with_an_un_augmented_utility_probe_too():
    # with augmentation and the text's un-augmented probe, train_init forwards the first batch before any
    # step; a task that takes no step had no batch in the code's loader, so it reports no statistics
    # (20 samples under a batch of 32 would otherwise report count 20)
    cfg = LocalTrainConfig(batch_size=32, min_one_step=False, augment=True, utility_on_augmented=False)
    _, out = _train_one(cfg, cfg.num_steps(np.array([20]))[0])
    assert float(out.first_batch.count) == 0.0 and float(out.first_batch.sumsq) == 0.0
    # a task that steps keeps its probe: one masked step over the 20 samples
    one = LocalTrainConfig(batch_size=32, augment=True)
    _, out = _train_one(one, one.num_steps(np.array([20]))[0])
    assert float(out.first_batch.count) == 20.0 and float(out.first_batch.sumsq) > 0.0


def test_a_steps_mode_client_under_a_batch_still_has_a_batch():
    # the steps loader never drops a client: takes_no_step follows the step count, not the batch size alone
    engine = _engine_of([10, 40], mode="steps", local_steps=2, min_one_step=False)
    assert engine.num_train_steps(np.arange(2)).tolist() == [2, 2]
    assert [engine.takes_no_step(c, n) for c, n in enumerate([10, 40])] == [False, False]


def test_utility_on_the_augmented_batch_is_the_first_steps_own_losses():
    clean = LocalTrainConfig(batch_size=8, augment=True)
    augmented = LocalTrainConfig(batch_size=8, augment=True, utility_on_augmented=True)
    _, a = _train_one(clean, 1)
    _, b = _train_one(augmented, 1)
    assert float(a.first_batch.count) == float(b.first_batch.count) == 8.0
    assert float(a.first_batch.sumsq) != float(b.first_batch.sumsq)  # crop+flip changes the losses
    assert float(b.first_batch.sumsq) == pytest.approx(float(b.all_steps.sumsq))  # one step: the same batch


# ------------------------------------------------------------------ the serial server (C1-C3), A5
def test_serial_server_queues_replies_and_blocks_after_an_aggregation():
    # three clients of 10 s, c = 3, K = 3; 0.2 s per message, 1.0 s after an aggregation. Replies reach the
    # server at 10 s and are processed at 10.2, 10.4, 10.6; clients 0 and 1 go out again at 10.2 and 10.4
    # (from version 0), the aggregation at 10.6 blocks until 11.6, when client 2 goes out (from version 1).
    # Round 2: replies at 20.2, 20.4, 21.6 are processed at 20.4, 20.6, 21.8.
    always3 = trace_of([(0, T)], [(0, T)], [(0, T)])
    reading = Reading(server_per_message_s=0.2, server_per_aggregation_s=1.0, duration_source="measured")
    sim = make_sim(always3, [10.0] * 3, concurrency=3, goal=3, max_aggregations=2, reading=reading)
    rec = sim.run()
    assert rec.aggregation_times == pytest.approx([0.0, 10.6, 21.8])
    assert list(rec.accounting.staleness) == [0, 0, 0, 1, 1, 0]
    # measured durations: dispatch to processing, the queue included
    assert sim.view.duration_s.tolist() == pytest.approx([20.4 - 10.2, 20.6 - 10.4, 21.8 - 11.6])
    free = make_sim(always3, [10.0] * 3, concurrency=3, goal=3, max_aggregations=2).run()
    assert free.aggregation_times == [0.0, 10.0, 20.0]


def test_serial_server_run_resumes_from_a_snapshot_exactly(tmp_path):
    from tests.test_snapshot import assert_same_run, killed_and_resumed

    sc = get_preset("tiny").with_overrides({"strategy": "felix", "semantics": "paper_code", "availability": "avail50",
                                            "max_aggregations": "12", "target_accuracy": "none",
                                            "eval_selector.min_age": "2"})
    reference = build_simulator(sc).run()
    assert reference.accounting.replies_eval > 0  # the eval tier ran: its replies queue too
    assert_same_run(reference, killed_and_resumed(sc, tmp_path))


# ------------------------------------------------------------------ oracle clients (F2, C7)
def test_oracle_clients_that_never_leave_reply_on_time_and_free_slot_still_frees_the_slot():
    # client 0 leaves at 5 s until 100 s; client 1 is always there. Oracle, c = 2, K = 1, 10 s tasks.
    tr = trace_of([(0, T), (5, U), (100, T)], [(0, T)])
    follow = make_sim(tr, [10.0, 10.0], knowledge="oracle", max_aggregations=2).run()
    assert follow.aggregation_times == [0.0, 10.0, 20.0]  # client 1 twice; client 0's task waits for 100 s
    stays = Reading(oracle_clients="always_available")
    sim = make_sim(tr, [10.0, 10.0], knowledge="oracle", max_aggregations=2, reading=stays)
    assert sim.run().aggregation_times == [0.0, 10.0, 10.0]  # both reply at 10 s
    sim = make_sim(tr, [10.0, 10.0], knowledge="oracle", max_aggregations=2, reading=stays,
                   oracle_departure="free_slot")
    rec = sim.run()
    assert rec.accounting.detached_tasks == 1  # the trace's departure at 5 s freed client 0's slot
    assert rec.aggregation_times == [0.0, 10.0, 10.0]  # and its update still counts


# ------------------------------------------------------------------ sync stragglers (A14), slots (B3)
def test_sync_straggler_is_never_recorded_under_the_codes_reading():
    tr = trace_of([(0, T)], [(0, T)], [(0, T)])
    for records, trained in ((True, 1), (False, 0)):
        sim = make_sim(tr, [10.0, 20.0, 30.0], mode="sync", goal=2, overcommit=1.5, max_aggregations=2,
                       aggregator="fedavg", reading=Reading(sync_records_stale=records))
        sim.run()  # client 2's reply at 30 s is stale (its round closed at 20 s)
        assert sim.view.times_trained[2] == trained
        assert (sim.view.utility_round[2] >= 0) == records and np.isfinite(sim.view.duration_s[2]) == records


class _FakeSim:
    def __init__(self, reading, train, evals):
        self.cfg = type("Cfg", (), {"concurrency": 30})()
        self.reading, self.eval_selector, self.eval_budget, self._evals_this_round = reading, None, 0, 0
        self._in_flight, self.asked = {"train": train, "eval": evals}, []

    def refresh_view(self):
        pass

    def in_flight_count(self, kind):
        return self._in_flight[kind]

    def select_and_dispatch(self, k, kind):
        self.asked.append(k)
        return max(k, 0)

    def schedule_wake(self):
        pass


def test_eval_tasks_take_training_slots_under_the_codes_reading():
    text, code = _FakeSim(Reading(), 25, 3), _FakeSim(Reading(eval_counts_toward_concurrency=True), 25, 3)
    AsyncMode().refill(text)
    AsyncMode().refill(code)
    assert text.asked == [5] and code.asked == [2]


# ------------------------------------------------------------------ per-round exclusion (A11)
def test_every_async_strategy_excludes_a_picked_client_until_the_round_ends_and_a_timeout_releases_it():
    # client 1 is away until 1000 s; c = 2, K = 2, no availability knowledge. Both go out at 0 s.
    tr = trace_of([(0, T)], [(0, U), (1000, T)])
    free = make_sim(tr, [10.0, 10.0], goal=2, max_aggregations=1, max_s=2000.0).run()
    assert free.aggregation_times == [0.0, 20.0]  # the text: client 0 goes out again at 10 s, same round
    code = Reading(async_exclusion="every_async")
    rec = make_sim(tr, [10.0, 10.0], goal=2, max_aggregations=1, max_s=2000.0, reading=code).run()
    assert rec.aggregation_times == [0.0, 1010.0]  # the code: client 0 waits for the round to end
    sim = make_sim(tr, [10.0, 10.0], goal=2, max_aggregations=1, max_s=500.0, reading=code)
    sim.run()
    assert sim.acct.timeouts == 1 and sim.view.last_selected_round.tolist() == [0, -1]  # released at 90 s


def test_run_list_shows_every_switch_with_both_values_and_its_source(capsys):
    import dataclasses

    from felix_jax.cli.listing import print_readings
    from felix_jax.fleet.reading import SWITCH_SOURCES

    print_readings()
    out = capsys.readouterr().out
    for f in dataclasses.fields(Reading):
        if f.name != "semantics":
            line = next(ln for ln in out.splitlines() if ln.split()[:1] == [f.name])
            assert SWITCH_SOURCES[f.name] in line
    assert "selector.pacer_rule" in out and "raise_only_per_call" in out


@pytest.mark.parametrize("strategy", ["felix", "oort", "oort-oracle", "oort-async", "oort-async-oracle", "refl",
                                      "fedavg", "fedbuff"])
def test_every_table_1_strategy_runs_in_the_codes_reading_and_records_it(strategy, tmp_path):
    from felix_jax.experiment.runner import run

    sc = get_preset("tiny").with_overrides({"strategy": strategy, "semantics": "paper_code", "availability": "avail50",
                                            "max_aggregations": "6", "target_accuracy": "none"})
    result = run(sc, out_dir=tmp_path, plot=False)
    assert result.record.stop_reason == "max_aggregations"
    import json
    config = json.loads((tmp_path / "config.json").read_text())
    reading = config["fleet"]["reading"]
    assert reading["semantics"] == "paper_code" and reading["server_per_message_s"] == 0.2
    assert config["fleet"]["interruption"] in ("run_to_end", "run_to_end_hold")


def test_train_overhead_adds_to_every_training_task():
    always = trace_of([(0, T)])
    rec = make_sim(always, [10.0], concurrency=1, max_aggregations=2, reading=Reading(train_overhead_s=2.5)).run()
    assert rec.aggregation_times == [0.0, 12.5, 25.0]


def test_task_uniform_depends_on_seed_client_and_task_only():
    from felix_jax.fleet.reading import task_uniform

    # pinned: a change of the draw would change every run that uses the spread
    assert task_uniform(0, 0, 0) == pytest.approx(0.6461860284, abs=1e-9)
    # the first 64-bit word of Philox-4x64 at key (seed, 0x44), counter (client, task, 0, 0), top 53 bits
    raw = np.random.Philox(key=np.array([7, 0x44], np.uint64), counter=np.array([3, 2, 0, 0], np.uint64)).random_raw()
    assert task_uniform(7, 3, 2) == (int(raw) >> 11) * 2.0 ** -53
    assert task_uniform(0, 0, 0) == task_uniform(0, 0, 0)  # no state: the same key, the same draw
    keys = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (7, 3, 2)]
    assert len({task_uniform(*k) for k in keys}) == len(keys)
    draws = np.array([task_uniform(5, c, t) for c in range(20) for t in range(250)])
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.02 and abs((draws < 0.25).mean() - 0.25) < 0.03  # uniform: 5,000 draws


def test_train_overhead_spread_adds_a_draw_per_training_task():
    from felix_jax.fleet.reading import task_uniform

    # one client, c = 1, K = 1: task t (ids 0, 1, 2) lasts 10 + 0.2 + 0.6 u(seed, 0, t); each aggregation
    # is one task after the last
    always = trace_of([(0, T)])
    reading = Reading(train_overhead_s=0.2, train_overhead_spread_s=0.6)
    assert reading.train_overhead(3, 0, 1) == pytest.approx(0.2 + 0.6 * task_uniform(3, 0, 1))
    rec = make_sim(always, [10.0], concurrency=1, max_aggregations=3, seed=3, reading=reading).run()
    expected = np.cumsum([10.2 + 0.6 * task_uniform(3, 0, t) for t in range(3)])
    assert rec.aggregation_times[1:] == pytest.approx(list(expected), abs=1e-9)
    assert all(0.2 <= b - a - 10.0 < 0.8 for a, b in zip(rec.aggregation_times, rec.aggregation_times[1:]))
    other = make_sim(always, [10.0], concurrency=1, max_aggregations=3, seed=4, reading=reading).run()
    assert other.aggregation_times != rec.aggregation_times  # another seed, other draws
    # off (the default, and both bundles): the task is its work alone
    assert Reading().train_overhead(3, 0, 1) == 0.0 and CODE.train_overhead_spread_s == 0.0
    plain = make_sim(always, [10.0], concurrency=1, max_aggregations=3, seed=3).run()
    assert plain.aggregation_times == [0.0, 10.0, 20.0, 30.0]


def test_a_sync_round_closes_at_the_kth_reply_of_its_spread_tasks():
    from felix_jax.fleet.reading import task_uniform

    # sync, K = 2 of 3 picks (overcommit 1.5), every delay 10 s, spread 3 s: round 1's tasks are ids 0-2
    # on clients 0-2 (all picked: the only three), so it closes at 10 + the 2nd smallest 3 u(0, c, c)
    three = trace_of([(0, T)], [(0, T)], [(0, T)])
    reading = Reading(train_overhead_spread_s=3.0)
    sim = make_sim(three, [10.0] * 3, mode="sync", concurrency=3, goal=2, overcommit=1.5, max_aggregations=1,
                   reading=reading)
    picks, dispatch = [], sim._dispatch
    sim._dispatch = lambda client, kind: (picks.append((sim._next_task_id, client)), dispatch(client, kind))
    rec = sim.run()
    assert sorted(c for _, c in picks[:3]) == [0, 1, 2] and [t for t, _ in picks[:3]] == [0, 1, 2]
    ends = sorted(10.0 + 3.0 * task_uniform(0, c, t) for t, c in picks[:3])
    assert rec.aggregation_times[1] == pytest.approx(ends[1], abs=1e-9)
    assert rec.aggregation_times[1] > 10.0  # without the spread every round would close at 10 s


def test_a_small_clients_eval_reports_zero_utility_under_the_codes_loader():
    # B6: a client under one batch has no eval batch either: its U stays 0 (the code), while a client
    # with a full batch reports sqrt(N x (previous U + sumsq)) as usual
    from felix_jax.fleet.executor import EvalOutcome
    from felix_jax.cohort import LossStats

    sim = make_sim(trace_of([(0, T)], [(0, T)]), [10.0, 10.0], reading=Reading(small_clients="zero_step",
                                                                               eval_utility="accumulate",
                                                                               utility_scale="dataset"))
    sim.engine.train_cfg = LocalTrainConfig(batch_size=32, min_one_step=False)  # the code's epoch loader
    sim.view.num_samples[0] = 10  # client 0 holds under one batch; client 1 holds 40
    for client in (0, 1):
        sim.view.record_utility(client, 0.0 if client == 0 else 5.0, 0)
    stats = LossStats(32.0, 40.0, 72.0)
    for client, expected in ((0, math.sqrt(10 * (0.0 + 0.0))), (1, math.sqrt(40 * (5.0 + 72.0)))):
        sim._dispatch(client, "eval")
        tid = max(sim.tasks)
        sim.executor.result = lambda _tid, s=stats: EvalOutcome(s, 0.0)
        sim._handle_reply(tid)
        assert sim.view.utility[client] == pytest.approx(expected)


# ------------------------------------------------------------------ the paper's own zero-step clients (A2 at scale)
def _engine_of(counts, no_step=None, **cfg):
    ds = make_image_dataset(num_train=int(sum(counts)), num_test=8)
    data = to_device(ds, partition_from_counts(int(sum(counts)), np.asarray(counts), seed=0))
    return CohortEngine(MODEL, data, LocalTrainConfig(batch_size=32, **cfg), no_step=no_step)


def test_no_step_clients_take_no_step_whatever_they_hold():
    # counts 10, 20, 40, 70 at batch 32 with at least one step: 1, 1, 1, 2; clients 1 and 3 marked: 0 each
    engine = _engine_of([10, 20, 40, 70], no_step=np.array([False, True, False, True]))
    assert engine.num_train_steps(np.arange(4)).tolist() == [1, 0, 1, 0]
    assert engine.num_train_steps(np.array([3, 0])).tolist() == [0, 1]
    assert [engine.takes_no_step(c, n) for c, n in enumerate([10, 20, 40, 70])] == [False, True, False, True]
    # the code's loader at the emulated scale: under a batch means no step, with or without a mask
    plain = _engine_of([10, 20, 40, 70], min_one_step=False)
    assert plain.num_train_steps(np.arange(4)).tolist() == [0, 0, 1, 2]
    assert [plain.takes_no_step(c, n) for c, n in enumerate([10, 20, 40, 70])] == [True, True, False, False]


def test_no_step_must_be_one_boolean_per_client():
    with pytest.raises(ValueError, match="one boolean per client"):
        _engine_of([10, 20], no_step=np.array([0, 1]))
    with pytest.raises(ValueError, match="one boolean per client"):
        _engine_of([10, 20], no_step=np.array([True]))


def test_a_no_step_clients_eval_reports_zero_utility():
    # B6 for a marked client: it holds 40 samples (over a batch of 16), but its loader gives it none
    from felix_jax.fleet.executor import EvalOutcome
    from felix_jax.cohort import LossStats

    sim = make_sim(trace_of([(0, T)], [(0, T)]), [10.0, 10.0], reading=Reading(eval_utility="accumulate",
                                                                               utility_scale="dataset"))
    sim.engine.no_step = np.array([True, False])
    for client in (0, 1):
        sim.view.record_utility(client, 5.0, 0)
    for client, expected in ((0, math.sqrt(40 * (5.0 + 0.0))), (1, math.sqrt(40 * (5.0 + 72.0)))):
        sim._dispatch(client, "eval")
        tid = max(sim.tasks)
        sim.executor.result = lambda _tid: EvalOutcome(LossStats(32.0, 40.0, 72.0), 0.0)
        sim._handle_reply(tid)
        assert sim.view.utility[client] == pytest.approx(expected)


@needs_data("traces/felix_reference_300clients.npz")
def test_zero_step_reference_marks_the_papers_57_clients_at_any_subset():
    from felix_jax.experiment.runner import reference_sizes, reference_zero_step
    from felix_jax.traces import load_reference_clients

    sc = get_preset("cifar10-longhorizon").with_overrides({"reading.small_clients": "zero_step_reference"})
    mask = reference_zero_step(sc, "zero_step_reference")
    paper = load_reference_clients().num_samples
    assert mask.sum() == 57 and (paper[mask] < 32).all() and (paper[~mask] >= 32).all()  # AS-RUN A2: 57 of 300
    # at the 12,000-image subset 168 clients hold under a batch; the 111 of them that held a batch in the paper
    # still take a step, and no marked client holds a full batch here
    scaled = reference_sizes(300, 12_000)
    assert (scaled < 32).sum() == 168 and ((scaled < 32) & ~mask).sum() == 111 and (scaled[mask] < 32).all()
    assert reference_zero_step(sc, "zero_step") is None and reference_zero_step(sc, "one_step") is None


def test_zero_step_reference_needs_the_papers_clients_and_the_epoch_loader():
    sc = get_preset("cifar10-longhorizon")
    for bad in ({"partition": "dirichlet"}, {"local_mode": "steps"}):
        with pytest.raises(OptionError, match="zero_step_reference .*needs partition=reference and local_mode=epochs"):
            sc.with_overrides({"reading.small_clients": "zero_step_reference", **bad})
    with pytest.raises(OptionError, match="small_clients"):
        sc.with_overrides({"reading.small_clients": "zero_steps"})


def _last_k_selector():
    """Deterministic: the k highest eligible ids (so a busy straggler, if eligible, is picked)."""
    from felix_jax.policies.selectors.base import Selector

    return Selector("last-k", lambda: None, lambda state, ctx, k: (np.flatnonzero(ctx.eligible)[::-1][:k], state))


def test_sync_busy_clients_are_picked_and_their_task_queues_behind_the_old_one():
    # four clients of 10, 60, 11, 12 s, always there; sync, K = 2, 3 picks a round, the 3 highest eligible ids.
    # Round 1 at 0: clients 1, 2, 3 (replies 60, 11, 12): aggregation at 12; client 1 is busy until 60.
    # The text: round 2 at 12 picks 0, 2, 3 (1 is busy): 22, 23, 24 -> aggregation at 23; round 3 at 23 picks
    # 0, 2 (3 busy until 24, 1 until 60): 33, 34 -> aggregation at 34.
    # The code (A15): round 2 at 12 picks 1, 2, 3: client 1's task waits for its old one (starts at 60,
    # replies at 120, stale), 2 and 3 reply at 23, 24 -> aggregation at 24; round 3 at 24 picks 1 (queued
    # again: 120 -> 180), 2 (35), 3 (36) -> aggregation at 36.
    tr = trace_of([(0, T)], [(0, T)], [(0, T)], [(0, T)])
    times = {}
    for queues in (False, True):
        sim = make_sim(tr, [10.0, 60.0, 11.0, 12.0], mode="sync", goal=2, overcommit=1.5, max_aggregations=3,
                       aggregator="fedavg", timeout_s=math.inf,
                       reading=Reading(sync_records_stale=False, sync_busy_selectable=queues))
        sim.selector, sim._sel_state = _last_k_selector(), None
        rec = sim.run()
        times[queues] = rec.aggregation_times
        starts = [(t, c) for t, ev, c, kind, *_ in rec.accounting.events if ev == "start"]
        if queues:
            assert rec.accounting.train_picks_busy == 2
            assert starts == [(60.0, 1), (120.0, 1)]  # each queued task starts when the one before it ends
            assert not sim.view.busy.any()  # the server does not mark whom it may pick again
        else:
            assert rec.accounting.train_picks_busy == 0 and starts == []
    assert times[False] == pytest.approx([0.0, 12.0, 23.0, 34.0])
    assert times[True] == pytest.approx([0.0, 12.0, 24.0, 36.0])
    assert Reading.paper_code().sync_busy_selectable and not Reading().sync_busy_selectable


# the quickstart's fleet with an MLP in the default tier, with its own CNN in the slow tier: with
# either model, 4 of the picks find their client busy and are queued
@pytest.mark.parametrize("model", ["mlp", pytest.param("cifar_cnn", marks=pytest.mark.slow)])
def test_a_sync_run_with_queued_tasks_resumes_from_a_snapshot_exactly(tmp_path, model):
    from tests.test_snapshot import assert_same_run, killed_and_resumed

    sc = get_preset("quickstart").with_overrides({"strategy": "oort-oracle", "semantics": "paper_code",
                                                  "availability": "avail50", "max_aggregations": "10",
                                                  "target_accuracy": "none", "model": model})
    reference = build_simulator(sc).run()
    assert reference.accounting.train_picks_busy == 4  # stragglers were picked again and queued
    assert_same_run(reference, killed_and_resumed(sc, tmp_path))
