"""The server's view as policies get it (``ctx.view``, :class:`~felix_jax.fleet.clientmap.ReadOnlyView`):
a plugin selector that assigns an attribute, calls one of the map's writes, flips an array's writeable
flag or writes a column changes nothing of the server's state and stops with one line naming its own
file:line; reads stay zero-copy and current with the server's writes."""

from __future__ import annotations

import numpy as np
import pytest

from felix_jax import plugins
from felix_jax.cli import main
from felix_jax.fleet.clientmap import ClientMap, ReadOnlyView
from felix_jax.plugin_calls import PluginError
from felix_jax.policies import SelectionContext, make_selector
from felix_jax.traces import Tier

# each selector does one write the server's view must refuse, on the line marked with its name
PLUGIN = """
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector


def _make(name, write):
    def select(state, ctx, k):
        ids = np.flatnonzero(ctx.eligible)[:k]
        write(ctx, ids)
        return ids, state
    plugins.selector(name)(lambda: Selector(name, lambda: None, select))


def assign_history(ctx, ids):
    ctx.view.tier_since_s = np.full(ctx.view.num_clients, -7.0)  # ASSIGN-HISTORY


def assign_busy(ctx, ids):
    ctx.view.busy = np.ones(ctx.view.num_clients, bool)  # ASSIGN-BUSY


def delete_tier(ctx, ids):
    del ctx.view.tier  # DELETE-TIER


def restart_history(ctx, ids):
    ctx.view.start_history(0.0)  # START-HISTORY


def set_busy(ctx, ids):
    ctx.view.set_busy(int(ids[0]), True)  # SET-BUSY


def flip_busy(ctx, ids):
    arr = ctx.view.busy
    arr.flags.writeable = True  # FLIP-BUSY
    arr[ids] = True


def flip_eligible(ctx, ids):
    ctx.eligible.flags.writeable = True  # FLIP-ELIGIBLE
    ctx.eligible[ids] = False


def write_utility(ctx, ids):
    ctx.view.utility[ids] = 5.0  # WRITE-UTILITY


def write_history(ctx, ids):
    np.copyto(ctx.view.online_weight, 1.0)  # WRITE-WEIGHT


for _write in (assign_history, assign_busy, delete_tier, restart_history, set_busy, flip_busy, flip_eligible,
               write_utility, write_history):
    _make("ro-" + _write.__name__.replace("_", "-"), _write)
"""

CASES = {  # selector -> (the marked line, what the one line says)
    "ro-assign-history": ("ASSIGN-HISTORY", "AttributeError: ctx.view.tier_since_s cannot be set: the server's view "
                                            "is read-only to policies"),
    "ro-assign-busy": ("ASSIGN-BUSY", "AttributeError: ctx.view.busy cannot be set"),
    "ro-delete-tier": ("DELETE-TIER", "AttributeError: ctx.view.tier cannot be deleted"),
    "ro-restart-history": ("START-HISTORY", "AttributeError: ctx.view.start_history: it changes the server's view"),
    "ro-set-busy": ("SET-BUSY", "AttributeError: ctx.view.set_busy: it changes the server's view"),
    "ro-flip-busy": ("FLIP-BUSY", "it tried to make writeable ctx.view.busy, which is read-only to policies"),
    "ro-flip-eligible": ("FLIP-ELIGIBLE", "it tried to make writeable ctx.eligible, which is read-only to policies"),
    "ro-write-utility": ("WRITE-UTILITY", "it wrote to ctx.view.utility, which is read-only to policies"),
    "ro-write-history": ("WRITE-WEIGHT", "it wrote to ctx.view.online_weight, which is read-only to policies"),
}


@pytest.fixture
def plugin_file(tmp_path):
    """The plugin file, loaded; the registries as they were before the test afterwards."""
    from felix_jax.experiment.strategies import STRATEGIES
    from felix_jax.policies.selectors import SELECTOR_OPTIONS, SELECTORS

    tables = (STRATEGIES, SELECTORS, SELECTOR_OPTIONS)
    saved = [dict(t) for t in tables]
    path = tmp_path / "read_only_plugin.py"
    path.write_text(PLUGIN)
    plugins.load_plugins(str(path))
    yield path
    for table, before in zip(tables, saved):
        table.clear()
        table.update(before)


def _line(path, mark: str) -> str:
    lines = path.read_text().splitlines()
    return f"{path}:{next(i for i, text in enumerate(lines, start=1) if f'# {mark}' in text)}"


def _state(view: ClientMap) -> dict:
    return {name: np.array(getattr(view, name)) for name in ReadOnlyView.COLUMNS} | {
        "history_start_s": view.history_start_s}


def _view() -> ClientMap:
    view = ClientMap.create(np.arange(1, 9, dtype=np.int64))
    view.set_tier(slice(None), np.array([Tier.AVL_TRAIN] * 6 + [Tier.UN_AVL] * 2, np.int8), 30.0)
    view.record_utility(1, 0.5, 0)
    return view


@pytest.mark.parametrize("name", list(CASES))
def test_a_plugin_selector_changes_nothing_of_the_server_view_and_is_named_at_its_line(plugin_file, name):
    mark, text = CASES[name]
    view = _view()
    before = _state(view)
    eligible = view.trainable(0, False)
    ctx = SelectionContext(view, eligible, 0, 60.0, np.random.default_rng(0))
    selector = make_selector(name)
    with pytest.raises(PluginError) as caught:
        selector.select(selector.init(), ctx, 2)
    message = str(caught.value)
    assert message.startswith(f"selector {name!r}.select failed at {_line(plugin_file, mark)}: "), message
    assert text in message and "\n" not in message
    after = _state(view)
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert view.trainable(0, False).tolist() == eligible.tolist() == [True] * 6 + [False] * 2
    view.check_index(0)  # the maintained sets still agree with the arrays


def test_a_run_whose_selector_assigns_the_view_stops_in_one_line_and_leaves_no_folder(plugin_file, tmp_path):
    plugins.strategy("ro-assign-strategy", mode="async", knowledge="tiertrack", selector="ro-assign-history",
                     aggregator="fedbuff")
    out = tmp_path / "r"
    with pytest.raises(SystemExit) as caught:
        main(["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", f"plugins={plugin_file}",
              "--set", "strategy=ro-assign-strategy", "--out", str(out)])
    message = caught.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert f"failed at {_line(plugin_file, 'ASSIGN-HISTORY')}: AttributeError: ctx.view.tier_since_s" in message
    assert not out.exists()  # failed at the first selection, before the run's first event


def test_the_view_reads_zero_copy_and_current_and_its_arrays_cannot_be_made_writeable():
    view = _view()
    ctx = SelectionContext(view, view.trainable(0, False), 0, 60.0, np.random.default_rng(0))
    ro = ctx.view
    assert isinstance(ro, ReadOnlyView) and ro is view.read_only()  # one per map
    for name in ReadOnlyView.COLUMNS:
        column = getattr(ro, name)
        assert np.shares_memory(column, getattr(view, name)), name  # zero-copy
        assert column is getattr(ro, name)  # the same alias each read
        with pytest.raises(ValueError, match="WRITEABLE"):
            column.flags.writeable = True
        with pytest.raises(ValueError, match="read-only"):
            column[0] = column[0]
    for mask in (ctx.eligible, ro.evaluable(), ro.explored_mask(), ro.trainable(0, True)):
        with pytest.raises(ValueError, match="WRITEABLE"):
            mask.flags.writeable = True
    view.set_busy(3, True)  # the server's writes show through
    view.record_utility(4, 2.5, 1)
    assert ro.busy[3] and not ctx.eligible[3] and ro.utility[4] == 2.5 and ro.utility_round[4] == 1
    np.testing.assert_array_equal(ro.current_spell_s(90.0), view.current_spell_s(90.0))
    assert ro.num_clients == 8 and ro.history_start_s == view.history_start_s
    assert ro.block_counts(ctx.eligible) is not None  # still recognised as a maintained mask: no pass over N
    assert ro.num_trainable(0, False) == view.num_trainable(0, False) == 5
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        ro.nonsense


def test_a_once_per_round_mask_of_another_round_leaves_the_servers_mask_alone():
    view = _view()
    view.mark_selected(2, 5)
    current = view.trainable(5, True)  # the server's mask for round 5, handed to the selector
    ro = view.read_only()
    other = ro.trainable(6, True)  # a policy asks about round 6: computed afresh
    assert other[2] and not current[2] and ro.num_trainable(6, True) == 6
    assert not view.trainable(5, True)[2] and view.num_trainable(5, True) == 5
    view.check_index(5)
