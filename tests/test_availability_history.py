"""The server view's availability history: what the server learned of each client's availability.

Kept by ``ClientMap.set_tier`` from the changes of the believed tier only: under TierTrack the view's
refreshes (the notifications), under ``none`` replies and timeouts. Read-only to policies, in every
snapshot, and read by no built-in policy (results do not change).
"""

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from felix_jax import plugins
from felix_jax.experiment import get_preset
from felix_jax.experiment.build import build_simulator
from felix_jax.experiment.runner import run
from felix_jax.fleet import snapshot as snapshot_module
from felix_jax.fleet.clientmap import ONLINE_TAU_S, ClientMap
from felix_jax.fleet.snapshot import SnapshotPolicy
from felix_jax.options import Range
from felix_jax.policies import Selector
from felix_jax.policies.selectors.base import SelectionContext
from felix_jax.traces import Tier

from tests.test_snapshot import Killed, assert_same_run

U, E, T = Tier.UN_AVL, Tier.AVL_EVAL, Tier.AVL_TRAIN
HISTORY = ("tier_since_s", "last_online_s", "departures", "online_weight")


# ------------------------------------------------------------------ a selector that reads it, and one that does not
@dataclasses.dataclass(frozen=True)
class StreakConfig:
    streak_share: float = 1.0  # share of the k picks given to the longest current online spells (the rest: random)
    RANGES = {"streak_share": Range.fraction()}


@plugins.selector("test-longest-streak", config=StreakConfig)
def make_longest_streak(config: StreakConfig) -> Selector:
    def select(state, ctx, k):
        ids = np.flatnonzero(ctx.eligible)  # ascending: a stable sort breaks ties by id
        k = min(int(k), ids.size)
        longest = ids[np.argsort(-ctx.view.current_spell_s(ctx.now, ids), kind="stable")]
        n = round(config.streak_share * k)
        drawn = ctx.rng.choice(longest[n:], k - n, replace=False)
        return np.concatenate([longest[:n], drawn]).astype(np.int64), state
    return Selector("test-longest-streak", lambda: None, select)


@plugins.selector("test-lowest-ids")
def make_lowest_ids() -> Selector:
    """Tier only: the k eligible clients of lowest id."""
    return Selector("test-lowest-ids", lambda: None, lambda state, ctx, k: (np.flatnonzero(ctx.eligible)[:k], state))


for _name, _selector in (("test-streak-tiertrack", "test-longest-streak"), ("test-ids-tiertrack", "test-lowest-ids")):
    plugins.strategy(_name, mode="async", knowledge="tiertrack", selector=_selector, aggregator="fedbuff")


def scenario(strategy: str, **overrides):
    # 20 s slots at 50% availability: several departures a client within the run
    return get_preset("tiny").with_overrides({"availability": "avail50", "slot_s": "20", "max_aggregations": "20",
                                              "target_accuracy": "none", "strategy": strategy, **overrides})


# ------------------------------------------------------------------ the reference: one client's spells, by hand
def reference(observations, now: float, start: float = 0.0) -> dict:
    """The history of one client from what the server saw of it, ``(time, online)`` in time order, from a
    client registered online at ``start``: its spells kept whole, the online fraction by its integral."""
    online, since, last, departures, spells = True, start, math.nan, 0, []
    for t, on in observations:
        if on == online:
            continue
        if online:
            spells.append((since, t))
            if t > start:  # what the server learns at the history's start is its initial state
                departures, last = departures + 1, t - since
        online, since = on, t
    if online:
        spells.append((since, now))
    weighted = sum(math.exp(-(now - b) / ONLINE_TAU_S) - math.exp(-(now - a) / ONLINE_TAU_S) for a, b in spells)
    return {"tier_since_s": since, "last_online_s": last, "departures": departures,
            "online_fraction": weighted / -math.expm1(-(now - start) / ONLINE_TAU_S),
            "current_spell_s": now - since if online else 0.0}


def assert_history(view: ClientMap, refs: list[dict], now: float) -> None:
    np.testing.assert_array_equal(view.tier_since_s, [r["tier_since_s"] for r in refs])
    np.testing.assert_array_equal(view.departures, [r["departures"] for r in refs])
    np.testing.assert_array_equal(view.last_online_s, np.array([r["last_online_s"] for r in refs], np.float32))
    np.testing.assert_array_equal(view.current_spell_s(now), [r["current_spell_s"] for r in refs])
    np.testing.assert_allclose(view.online_fraction(now), [r["online_fraction"] for r in refs], rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ (a) by hand
def test_history_by_hand():
    view = ClientMap.create(np.ones(3, np.int64))  # registered online at t=0
    view.set_tier(1, U, 0.0)  # the first refresh finds client 1 away: its initial state, not a departure
    view.set_tier(0, U, 100.0)
    view.set_tier(2, E, 120.0)  # AVL_TRAIN -> AVL_EVAL: online still, the same spell
    view.set_tier(0, T, 250.0)
    assert view.tier_since_s.tolist() == [250.0, 0.0, 0.0]
    assert view.last_online_s[0] == 100.0 and np.isnan(view.last_online_s[1:]).all()
    assert view.departures.tolist() == [1, 0, 0]
    assert view.current_spell_s(300.0).tolist() == [50.0, 0.0, 300.0]
    assert view.current_spell_s(300.0, np.array([2, 0])).tolist() == [300.0, 50.0]
    # online over [0, 100] and [250, 300], each second weighted exp(-(300 - s) / tau), over the weights of [0, 300]
    tau = 3600.0
    online = tau * (math.exp(-200 / tau) - math.exp(-300 / tau)) + tau * (1 - math.exp(-50 / tau))
    expected = online / (tau * (1 - math.exp(-300 / tau)))
    assert expected == pytest.approx(150 / 300, rel=0.03)  # about the plain share: 150 s of 300
    fraction = view.online_fraction(300.0)
    assert fraction[0] == pytest.approx(expected, rel=1e-6)
    assert fraction[1] == 0.0 and fraction[2] == pytest.approx(1.0)
    assert view.online_fraction(300.0, [0]) == pytest.approx([expected], rel=1e-6)
    fresh = ClientMap.create(np.ones(2, np.int64))
    fresh.set_tier(0, U, 0.0)
    assert fresh.online_fraction(0.0).tolist() == [0.0, 1.0]  # at the history's start: the current state
    # an hour away weighs the past down by e
    later = ClientMap.create(np.ones(1, np.int64))
    later.set_tier(0, U, 3600.0)
    assert later.online_fraction(7200.0)[0] == pytest.approx((1 - math.exp(-1)) * math.exp(-1) / (1 - math.exp(-2)))


def test_every_write_path_keeps_the_same_history():
    """One client at a time (replies, timeouts), a list of ids (a TierTrack refresh), the whole view (a
    full refresh): the same changes give the same history."""
    rng = np.random.default_rng(3)
    n, steps = 40, 30
    tiers = rng.choice([U, E, T], (steps, n)).astype(np.int8)
    one, many, full = (ClientMap.create(np.ones(n, np.int64)) for _ in range(3))
    for k, row in enumerate(tiers):
        t = 7.5 * k
        for c in range(n):
            one.set_tier(c, row[c], t)
        ids = rng.permutation(n)  # in any order, some twice with the same tier
        many.set_tier(np.concatenate([ids, ids[:5]]), np.concatenate([row[ids], row[ids[:5]]]), t)
        full.set_tier(slice(None), row, t)
    refs = [reference([(7.5 * k, tiers[k, c] != U) for k in range(steps)], 250.0) for c in range(n)]
    for view in (one, many, full):
        assert_history(view, refs, 250.0)
        view.check_index(0)
    with pytest.raises(ValueError, match="before the view's latest change"):
        one.set_tier(0, U, 10.0)
    c = int(np.flatnonzero(tiers[-1] != U)[0])
    one.set_tier(c, U)  # no time given: at the latest change's
    assert one.tier_since_s[c] == 7.5 * (steps - 1) and one.departures[c] == refs[c]["departures"] + 1


# ------------------------------------------------------------------ (b) read-only
def test_history_is_read_only_to_policies():
    view = ClientMap.create(np.ones(4, np.int64))
    for name in HISTORY:
        with pytest.raises(ValueError, match="read-only"):
            getattr(view, name)[0] = 1
    view.set_tier(slice(None), np.array([U, T, U, T], np.int8), 5.0)
    assert not any(getattr(view, name).flags.writeable for name in HISTORY)


def test_a_run_without_history_readers_is_unchanged():
    """The history changes no result: a built-in strategy's run equals one with the history's writes
    switched off."""
    sc = scenario("felix", max_aggregations="8")
    with_history = build_simulator(sc).run()
    off = build_simulator(sc)
    off.view.__dict__["_history_many"] = lambda rows, now: None
    off.view.__dict__["_history_one"] = lambda i, was, now: None
    without = off.run()
    assert (off.view.tier_since_s == 0).all()  # switched off indeed
    assert_same_run(with_history, without)


# ------------------------------------------------------------------ (c) in a run: what the server was told
@pytest.mark.parametrize("strategy", ["felix", "test-ids-tiertrack"])  # with and without the eval tier
def test_tiertrack_history_is_what_the_refreshes_told(strategy):
    sim = build_simulator(scenario(strategy))
    refreshed = []
    inner = sim.refresh_view

    def refresh():
        inner()
        refreshed.append(sim.now)

    sim.refresh_view = refresh
    sim.run()
    assert refreshed[0] == 0.0 and len(set(refreshed)) > 10
    trace, fold = sim.trace, not sim.cfg.sees_eval_tier
    seen = np.stack([trace.state_at(t) for t in refreshed])  # the view's tiers at each refresh
    online = (seen == T) | ((seen == E) & ~fold)
    refs = [reference(list(zip(refreshed, online[:, c])), sim.now) for c in range(sim.view.num_clients)]
    assert_history(sim.view, refs, sim.now)
    assert sim.view.departures.sum() >= sim.view.num_clients and sim.view.departures.max() >= 2


def test_a_blind_servers_history_comes_from_replies_and_timeouts():
    sim = build_simulator(scenario("fedbuff", timeout_s="15"))  # a task on a client that left times out
    told = []
    inner = sim.view.set_tier

    def set_tier(clients, tiers, now=None):
        told.append((clients, tiers, now))
        inner(clients, tiers, now)

    sim.view.set_tier = set_tier
    rec = sim.run()
    # one client at a time, at the event's time: a reply (AVL_TRAIN) or a timeout (UN_AVL), never the trace
    rows = rec.accounting.events
    said = {(t, c, {"reply": T, "timeout": U}[e]) for t, e, c, *_ in rows if e in ("reply", "timeout")}
    assert told and all(isinstance(c, (int, np.integer)) and (now, c, tier) in said for c, tier, now in told)
    n = sim.view.num_clients
    refs = [reference([(now, tier != U) for c2, tier, now in told if c2 == c], sim.now) for c in range(n)]
    assert_history(sim.view, refs, sim.now)
    assert sim.view.departures.sum() > 0
    # not the trace's history: its clients changed tier many more times than the server learned of
    true_changes = sim.trace.changes_between(0.0, sim.now)[0]
    assert sim.view.departures.sum() < true_changes.size


# ------------------------------------------------------------------ (d) a selector that reads it
def test_the_streak_selector_picks_the_longest_spells():
    view = ClientMap.create(np.ones(6, np.int64))
    view.set_tier(np.array([1, 3]), np.array([U, U], np.int8), 0.0)
    view.set_tier(np.array([0, 1, 3, 4]), np.array([U, T, T, U], np.int8), 50.0)
    view.set_tier(np.array([0]), np.array([T], np.int8), 80.0)
    # spells at t=100: 0: 20 s, 1: 50 s, 2: 100 s, 3: 50 s, 4: away, 5: 100 s
    eligible = view.trainable(0, False)
    ctx = SelectionContext(view, eligible, 0, 100.0, np.random.default_rng(0))
    sel = make_longest_streak(StreakConfig())
    assert sel.select(None, ctx, 4)[0].tolist() == [2, 5, 1, 3]  # ties by id
    picks, _ = make_longest_streak(StreakConfig(streak_share=0.5)).select(None, ctx, 4)
    assert picks[:2].tolist() == [2, 5] and set(picks[2:]) <= {0, 1, 3}


def test_streak_picks_differ_from_tier_only_picks():
    def training_picks(strategy):
        rec = build_simulator(scenario(strategy)).run()
        return [(t, c) for t, e, c, kind, *_ in rec.accounting.events if e == "dispatch" and kind == "train"]

    streak, ids = training_picks("test-streak-tiertrack"), training_picks("test-ids-tiertrack")
    assert streak[:4] == ids[:4]  # at t=0 every spell is as long: lowest ids first, as the tier-only selector
    assert streak != ids
    sc = scenario("test-streak-tiertrack", **{"selector.streak_share": "0.5"})
    assert sc.resolve_strategy().selector.streak_share == 0.5  # an option like any other


def test_the_docs_streak_plugin_runs_as_written(tmp_path):
    """docs/file-formats.md's worked ``my_streak.py``, as a reader copies it: it picks as the selector
    above does, and runs with its option set."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "file-formats.md").read_text()
    found = re.search(r"```python\n(# my_streak\.py\n.*?)```", text, re.S)
    assert found, "docs/file-formats.md lost its my_streak.py example"
    (tmp_path / "my_streak.py").write_text(found.group(1))
    sc = scenario("streak-tiertrack", plugins=str(tmp_path / "my_streak.py"), max_aggregations="3",
                  **{"selector.streak_share": "0.75"})
    assert run(sc).summary["aggregations"] == 3
    from felix_jax.policies.selectors import SELECTORS

    view = ClientMap.create(np.ones(5, np.int64))
    view.set_tier(np.array([0, 3]), np.array([U, U], np.int8), 10.0)
    view.set_tier(np.array([0]), np.array([T], np.int8), 30.0)
    ctx = SelectionContext(view, view.trainable(0, False), 0, 60.0, np.random.default_rng(0))
    config = sc.resolve_strategy().selector  # streak_share 0.75: 3 of 4 picks by spell, the last one drawn
    # spells at t=60: 1, 2, 4: 60 s; 0: 30 s; 3: away
    assert SELECTORS["longest-streak"](config).select(None, ctx, 4)[0].tolist() == [1, 2, 4, 0]


# ------------------------------------------------------------------ (e) snapshots
def killed(sc, root, at_version: int = 8):
    def on_saved(path):
        if path.name.startswith(f"snap-{at_version:06d}-"):
            raise Killed

    sim = build_simulator(sc)
    sim.snapshot = SnapshotPolicy(root, every_aggregations=4, on_saved=on_saved)
    with pytest.raises(Killed):
        sim.run()
    return sim


def test_history_resumes_exactly(tmp_path):
    sc = scenario("felix")
    whole = build_simulator(sc)
    whole.run()
    cut = killed(sc, tmp_path / "snapshot")
    resumed = build_simulator(sc)
    resumed.restore(tmp_path / "snapshot")
    for name in HISTORY:
        assert getattr(resumed.view, name).tobytes() == getattr(cut.view, name).tobytes(), name
        assert not getattr(resumed.view, name).flags.writeable
    resumed.run()
    for name in HISTORY:
        assert getattr(resumed.view, name).tobytes() == getattr(whole.view, name).tobytes(), name
    assert whole.view.departures.sum() > 0


def test_an_older_snapshot_without_history_restores_with_it_empty(tmp_path):
    sc = scenario("felix")
    root = tmp_path / "snapshot"
    cut = killed(sc, root)
    snap = snapshot_module.snapshot_dir(root)
    head = json.loads((snap / "host.json").read_text())
    fields = head["state"]["view"]["fields"]
    for name in (*HISTORY, "history_start_s"):
        del fields[name]
    head["format"] = 4
    (snap / "host.json").write_text(json.dumps(head))
    (snap / "CHECKSUMS.json").write_text(json.dumps(snapshot_module._checksums(snap)))
    resumed = build_simulator(sc)
    resumed.restore(snap)
    view, now = resumed.view, cut.now
    assert resumed.now == now > 0 and view.history_start_s == now
    assert (view.tier_since_s == now).all() and (view.departures == 0).all() and np.isnan(view.last_online_s).all()
    np.testing.assert_array_equal(view.online_fraction(now), view.tier != U)
    np.testing.assert_array_equal(view.tier, cut.view.tier)
    assert_same_run(build_simulator(sc).run(), resumed.run())  # the history changes no result
    assert view is resumed.view and view.departures.sum() > 0 and view.tier_since_s.min() >= now
