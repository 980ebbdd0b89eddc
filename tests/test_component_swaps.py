"""A strategy's component swapped by name (``--set aggregator.name=median``, ``selector.name``,
``eval_selector.name``, a bare ``--set aggregator=median``) on the command line, in scenario files and in
``compare`` cells; how the swap is recorded and named; a run's warnings when a robust rule is the plain
mean; a memory budget too large for a machine; and cells of a comparison that ran identically."""

from __future__ import annotations

import json

import pytest

from felix_jax.cli import main
from felix_jax.experiment import Scenario, get_preset
from felix_jax.experiment.naming import default_run_dir, strategy_label, swap_labels
from felix_jax.experiment.results import run_title
from felix_jax.experiment.runner import build_simulator
from felix_jax.options import OptionError

TINY = ["--preset", "tiny", "--quiet", "--set", "max_aggregations=2"]


def tiny(**overrides) -> Scenario:
    return get_preset("tiny").with_overrides(overrides)


# ---------------------------------------------------------------- resolving a swap
def test_aggregator_name_swaps_the_component_and_its_options_are_the_new_ones():
    sc = tiny(strategy="felix", **{"aggregator.name": "trimmed-mean", "aggregator.trim": "0.25"})
    resolved = sc.resolve_strategy()
    st = resolved.strategy
    assert (st.name, st.aggregator, st.selector, st.eval_selector) == ("felix", "trimmed-mean", "oort",
                                                                       "tierselect-eval")
    assert dict(st.swapped) == {"aggregator": "tierfuse"} and st.label == "felix[aggregator=trimmed-mean]"
    assert resolved.aggregator.trim == 0.25 and st.mode == "async"
    # the strategy's own options were the old component's: not carried over
    normalized = tiny(strategy="felix-normalized", **{"aggregator.name": "fedbuff"}).resolve_strategy()
    assert dict(normalized.strategy.aggregator_options) == {} and normalized.aggregator.server_lr == 0.3
    # the strategy's own component by name swaps nothing
    same = tiny(strategy="felix", **{"aggregator.name": "tierfuse"}).resolve_strategy().strategy
    assert same.label == "felix" and dict(same.swapped) == {}


def test_selector_and_eval_selector_swaps_build_and_run():
    sc = tiny(strategy="felix", max_aggregations=2, **{"selector.name": "random", "eval_selector": "random"})
    st = sc.resolve_strategy().strategy
    assert st.label == "felix[selector=random,eval_selector=random]"
    sim = build_simulator(sc)
    assert sim.selector.name == "random" and sim.eval_selector.name == "random"
    assert sim.eval_budget == 3  # TierSelect's default int(1.5 K) for an eval selector without a budget
    record = sim.run()
    assert record.checkpoints[-1].version == 2 and record.accounting.dispatched_eval > 0
    # oort swapped into fedbuff takes the reading's Oort switches as a strategy's own oort does
    oort = tiny(strategy="fedbuff", **{"selector.name": "oort"}).resolve_strategy()
    assert oort.selector == tiny(strategy="oort-async").resolve_strategy().selector


def test_a_bare_component_name_is_the_name_with_that_components_defaults():
    bare = tiny(strategy="felix", aggregator="median")
    assert bare.aggregator == {"name": "median"}
    assert bare.resolve_strategy().strategy.label == "felix[aggregator=median]"
    # the preset's options for the old eval selector are dropped by a bare name, kept (and checked) by a dotted one
    assert tiny(strategy="felix", eval_selector="random").eval_selector == {"name": "random"}
    with pytest.raises(OptionError, match=r"eval_selector\.min_age: this policy has no options \(eval_selector"
                                          r"\.name=random swapped in random for tierselect-eval.*--set "
                                          r"eval_selector=random starts from random's defaults"):
        tiny(strategy="felix", **{"eval_selector.name": "random"})
    # options given with a bare name apply on top of it, in either order
    for order in ({"aggregator.trim": "0.1", "aggregator": "trimmed-mean"},
                  {"aggregator": "trimmed-mean", "aggregator.trim": "0.1"}):
        assert tiny(strategy="felix", **order).aggregator == {"name": "trimmed-mean", "trim": "0.1"}


def test_options_are_checked_against_the_new_component_and_an_unknown_name_lists_the_near_ones():
    with pytest.raises(OptionError) as caught:
        tiny(strategy="felix", **{"aggregator.name": "median", "aggregator.trim": "0.1"})
    assert str(caught.value).startswith("aggregator.trim: unknown option; known: server_lr (aggregator.name=median "
                                        "swapped in median for tierfuse")
    with pytest.raises(OptionError) as caught:
        tiny(strategy="felix", **{"aggregator.name": "mediam"})
    message = str(caught.value)
    assert message.startswith("aggregator.name='mediam': unknown aggregator; did you mean 'median'?"), message
    assert "\n" not in message
    with pytest.raises(OptionError, match=r"selector\.name='orot': unknown selector; did you mean 'oort'\?"):
        tiny(strategy="felix", selector="orot")
    with pytest.raises(OptionError, match=r"aggregator\.name=3: expected the name of a registered aggregator"):
        Scenario(strategy="felix", aggregator={"name": 3})


def test_an_eval_selector_named_for_a_strategy_without_one_is_unused_and_said():
    from felix_jax.experiment.resolution import run_warnings

    sc = tiny(strategy="fedbuff", **{"eval_selector.name": "random"})
    assert sc.resolve_strategy().strategy.label == "fedbuff"
    assert run_warnings(sc) == ["eval_selector.name=random: strategy fedbuff has no eval selector to replace; the "
                                "option is unused"]
    with pytest.raises(OptionError, match="unknown selector"):
        tiny(strategy="fedbuff", **{"eval_selector.name": "nope"})  # still checked


# ---------------------------------------------------------------- recorded and named
def test_the_command_line_swap_runs_is_recorded_named_and_reruns_from_its_config(tmp_path, capsys):
    out = tmp_path / "r"
    # was: TypeError: aggregator_config() got multiple values for argument 'name'
    assert main(["run", *TINY, "--set", "strategy=felix", "--set", "aggregator.name=trimmed-mean",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "strategy felix[aggregator=trimmed-mean] |" in printed.out
    config = json.loads((out / "config.json").read_text())
    assert config["scenario"]["aggregator"] == {"name": "trimmed-mean"}
    assert config["strategy"]["label"] == "felix[aggregator=trimmed-mean]"
    assert config["strategy"]["aggregator"] == "trimmed-mean" and config["strategy"]["swapped"] == {
        "aggregator": "tierfuse"}
    assert config["policies"]["aggregator"] == {"trim": 0.2, "server_lr": 0.3}
    assert run_title(config).startswith("felix[aggregator=trimmed-mean] | avail")
    again = Scenario.from_file(out / "config.json")  # the recorded sections agree with the scenario
    assert strategy_label(again) == "felix[aggregator=trimmed-mean]"
    assert default_run_dir(again).name.startswith("tiny-felix+aggregator-trimmed-mean-")
    assert default_run_dir(tiny(strategy="felix")).name.startswith("tiny-felix-")  # the plain run's folder differs


def test_the_progress_bar_names_the_swap():
    from felix_jax.experiment.progress import RunProgress

    assert RunProgress(tiny(strategy="felix", aggregator="median"), enabled=False).label == \
        "felix[aggregator=median]/avail100"
    assert RunProgress(tiny(strategy="felix"), enabled=False).label == "felix/avail100"


def test_a_robust_rule_that_is_the_plain_mean_says_so_once(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--set", "strategy=felix", "--set", "aggregator=median", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: aggregator median is the plain mean of the updates at aggregation_goal=2") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["warnings"]) == 1 and "the median of 2 values is their mean" in summary["warnings"][0]
    from felix_jax.experiment.resolution import run_warnings

    assert run_warnings(tiny(strategy="felix", aggregation_goal=3, aggregator="median")) == []
    (trimmed,) = run_warnings(tiny(strategy="felix", aggregator="trimmed-mean"))  # trim 0.2 at K = 2
    assert "trim=0.2 drops floor(0.2 x 2) = 0 values at each end" in trimmed
    assert run_warnings(tiny(strategy="felix", aggregation_goal=5, aggregator="trimmed-mean")) == []


# ---------------------------------------------------------------- compare
def test_compare_runs_a_swap_in_a_cell_and_names_both_rows(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compare", "--scenario", "tiny", "--strategies", "felix,felix@aggregator.name=median",
                 "--availability", "avail100", "--set", "max_aggregations=2", "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    table = (out / "table.txt").read_text()
    rows = [line.split() for line in table.splitlines() if line.startswith("avail100 ")]
    assert [r[1] for r in rows] == ["felix", "felix@aggregator.name=median"]
    cell = out / "runs" / "felix+aggregator.name-median-avail100-seed0"
    assert json.loads((cell / "config.json").read_text())["strategy"]["label"] == "felix[aggregator=median]"


def test_a_compare_wide_swap_is_named_in_the_cells_it_changes():
    base = tiny(aggregator="median")
    labels, reference = swap_labels(base, ["felix", "fedbuff@timeout_s=30", "felix@aggregator.name=tierfuse"],
                                    "felix")
    assert labels == ["felix@aggregator.name=median", "fedbuff@timeout_s=30;aggregator.name=median",
                      "felix@aggregator.name=tierfuse"]
    assert reference == "felix@aggregator.name=median"
    assert swap_labels(tiny(), ["felix"], None) == (["felix"], None)
    # a strategy whose own component it is keeps its label; one without an eval selector too
    assert swap_labels(tiny(**{"eval_selector.name": "random"}), ["felix", "fedbuff"], None)[0] == [
        "felix@eval_selector.name=random", "fedbuff"]


def test_two_rules_that_are_both_the_mean_at_k_2_are_said_to_have_run_identically(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compare", "--scenario", "tiny", "--strategies", "felix",
                 "--sweep", "aggregator.name=trimmed-mean,median", "--availability", "avail100",
                 "--set", "max_aggregations=2", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for text in (printed, (out / "table.txt").read_text()):
        assert ("warning: felix@aggregator.name=trimmed-mean and felix@aggregator.name=median ran identically on "
                "avail100 (seed 0: the same metrics.csv and dispatches): aggregator.name changed nothing there") in text


# ---------------------------------------------------------------- the memory budget, and no empty folder
def test_a_budget_beyond_any_machine_is_unbounded_not_a_traceback(tmp_path):
    from felix_jax.cohort.budget import UNBOUNDED_BYTES, resolve_budget

    assert resolve_budget(1e300) == (UNBOUNDED_BYTES, "memory_budget_gb=1e+300")  # was OverflowError
    assert resolve_budget(float("inf"))[0] == UNBOUNDED_BYTES and resolve_budget(2.0)[0] == 2 * 1024 ** 3
    out = tmp_path / "r"
    assert main(["run", *TINY, "--set", "memory_budget_gb=1e300", "--out", str(out)]) == 0
    memory = json.loads((out / "summary.json").read_text())["memory"]
    assert memory["bounded"] is False and memory["memory_budget_source"] == "memory_budget_gb=1e+300"


def test_a_run_that_fails_unexpectedly_leaves_no_empty_folder(tmp_path, monkeypatch):
    import felix_jax.experiment.runner as runner

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(runner, "build_simulator", broken)
    out = tmp_path / "r"
    with pytest.raises(RuntimeError, match="a bug"):
        main(["run", *TINY, "--out", str(out)])
    assert not out.exists()
