"""Every numeric option of every built-in policy (and of the update guard, stream and reading) declares
its range, and a value outside it is refused before the run in one line naming option, range and value."""

from __future__ import annotations

import dataclasses
import math
import textwrap
import typing

import pytest

from felix_jax.data.streams import StreamConfig
from felix_jax.experiment.scenario import Scenario
from felix_jax.fleet.reading import READING_VARIANTS, Reading
from felix_jax.fleet.update_guard import UpdateGuardConfig
from felix_jax.options import OptionError, OptionSpec, Range, ranges_of
from felix_jax.policies import AGGREGATOR_OPTIONS, SELECTOR_OPTIONS


def _built_in(spec: OptionSpec) -> bool:
    return spec.config is None or spec.config.__module__.startswith("felix_jax.")


def _specs() -> list[tuple[str, OptionSpec]]:
    """(where, spec) for every built-in option group, walked from the registries."""
    out = [(f"selector[{n}]", s) for n, s in SELECTOR_OPTIONS.items() if _built_in(s)]
    out += [(f"aggregator[{n}]", s) for n, s in AGGREGATOR_OPTIONS.items() if _built_in(s)]
    out += [("update_guard", OptionSpec(UpdateGuardConfig)), ("stream", OptionSpec(StreamConfig)),
            ("reading", OptionSpec(Reading, READING_VARIANTS))]
    return out


def _numeric(hint) -> type | None:
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    base = args[0] if len(args) == 1 else None
    return base if base in (int, float) else None


def _numeric_options() -> list[tuple[str, OptionSpec, str, type]]:
    return [(where, spec, name, _numeric(hint)) for where, spec in _specs()
            for name, hint in spec.fields().items() if _numeric(hint) is not None]


def _outside(rule: Range, kind: type) -> list:
    """Values outside ``rule``: below / at an open low end, above / at an open high end, NaN, infinities;
    for an int option, past int64 too (the type its values meet mid-run)."""
    step = 1 if kind is int else 0.5
    bad = []
    if rule.low > -math.inf:
        bad.append(rule.low if rule.low_open else rule.low - step)
    if rule.high < math.inf:
        bad.append(rule.high if rule.high_open else rule.high + step)
    if kind is int:
        bad += [2 ** 63] + ([-2 ** 63 - 1] if rule.low == -math.inf else [])
    if kind is float:
        bad += [math.nan, -math.inf] + ([] if rule.inf_ok else [math.inf])
    return [int(v) if kind is int else float(v) for v in bad]


def test_the_walk_covers_every_registry():
    names = {where for where, _ in _specs()}
    assert {"selector[oort]", "selector[refl]", "selector[tierselect-eval]", "aggregator[fedavg]",
            "aggregator[fedbuff]", "aggregator[fedasync]", "aggregator[refl_saa]", "aggregator[tierfuse]",
            "update_guard", "stream", "reading"} <= names
    assert len(_numeric_options()) >= 50  # Oort alone has 13 numeric options


@pytest.mark.parametrize("where,spec,name,kind", _numeric_options(),
                         ids=[f"{w}.{n}" for w, _, n, _ in _numeric_options()])
def test_every_numeric_option_declares_a_range_and_refuses_values_outside_it(where, spec, name, kind):
    rule = ranges_of(spec.config).get(name)
    assert rule is not None, f"{where}.{name} declares no range in {spec.config.__name__}.RANGES"
    key = where.split("[")[0]
    bad = _outside(rule, kind)
    assert bad, f"{where}.{name}: the range {rule} excludes nothing"
    for value in bad:
        with pytest.raises(OptionError) as caught:
            spec.build(key, {name: value})
        message = str(caught.value)
        assert "\n" not in message and message.startswith(f"{key}.{name}="), message
        if not math.isnan(value):  # NaN is refused by the parser already, naming the option
            assert message == f"{key}.{name}={value!r}: must be {rule.of(kind)}"
        if value == math.inf and rule.high == math.inf:  # inf is > any low end: the message says finite
            assert message.endswith(f": must be a finite number {'>' if rule.low_open else '>='} {rule.low:g}"), \
                message
        if kind is int:  # an int option's range ends within int64 (or the int32 it is stored in), as it runs
            assert message.endswith(f", {int(min(rule.high, 2 ** 63 - 1))}]"), message
    # the default (and every variant's value) lies inside the range
    for variant in [None, *spec.variants]:
        made = spec.build(key, {} if variant is None else {"variant": variant})
        value = getattr(made, name)
        assert value is None or rule.contains(value), (variant, value)


def test_ranges_name_only_real_fields():
    for where, spec in _specs():
        unknown = set(ranges_of(spec.config)) - set(spec.fields())
        assert not unknown, f"{where}: RANGES names {unknown}, not fields"


def test_range_by_hand():
    assert [Range.fraction().contains(v) for v in (-0.0, 0.0, 0.5, 1.0, 1.0001, math.nan, math.inf)] == \
        [True, True, True, True, False, False, False]
    assert [Range.above(0).contains(v) for v in (0, 1e-12, 7, math.inf)] == [False, True, True, False]
    assert Range.above(0, inf_ok=True).contains(math.inf) and not Range.above(0, inf_ok=True).contains(-math.inf)
    assert not Range.at_least(1).contains(True)  # a bool is not a count
    assert str(Range(0.0, 100.0)) == "in [0, 100]"
    assert str(Range(0.0, 1.0, low_open=True)) == "in (0, 1]"
    assert str(Range.above(0, inf_ok=True)) == "> 0 (inf: no limit)"
    assert str(Range.above(0)) == "a finite number > 0" and str(Range.at_least(1)) == "a finite number >= 1"
    assert str(Range(high=3.0, high_open=True)) == "a finite number < 3"
    # an int option: its values meet numpy int64 arrays, so its range ends there
    assert str(Range.at_least(0).of(int)) == str(Range.at_least(0).of(int | None)) == "in [0, 9223372036854775807]"
    assert Range.at_least(0).of(int).contains(2 ** 63 - 1) and not Range.at_least(0).of(int).contains(2 ** 63)
    assert not Range.at_least(0).of(int).contains(10 ** 400)  # larger than any float: refused, not an OverflowError
    assert Range.above(0).of(float) == Range.above(0) and str(Range.fraction().of(float)) == "in [0, 1]"


@pytest.mark.parametrize("key,value,expected", [
    ("selector.exploration_factor", "-1", "selector.exploration_factor=-1.0: must be in [0, 1]"),
    ("selector.exploration_factor", "5", "selector.exploration_factor=5.0: must be in [0, 1]"),
    ("selector.exploration_decay", "-0.5", "selector.exploration_decay=-0.5: must be in [0, 1]"),
    ("selector.pacer_step", "-3", "selector.pacer_step=-3: must be in [1, 9223372036854775807]"),
    ("selector.round_penalty", "-2", "selector.round_penalty=-2.0: must be a finite number >= 0"),
    ("selector.round_penalty", "inf", "selector.round_penalty=inf: must be a finite number >= 0"),
    ("selector.clip_bound", "-1", "selector.clip_bound=-1.0: must be in [0, 1]"),
    ("aggregator.sigma", "-1", "aggregator.sigma=-1.0: must be in [0, 1]"),
    ("aggregator.a", "-3", "aggregator.a=-3.0: must be a finite number >= 0"),
    ("aggregator.server_lr", "inf", "aggregator.server_lr=inf: must be a finite number > 0"),
    # past int64: refused here, not by an OverflowError mid-run (tierselect_math compares it with int64 rounds)
    ("eval_selector.min_age", "9223372036854775808",
     "eval_selector.min_age=9223372036854775808: must be in [0, 9223372036854775807]"),
    ("aggregator.max_staleness", "9223372036854775808",
     "aggregator.max_staleness=9223372036854775808: must be in [0, 9223372036854775807]"),
    # an int32 on the device (streams_to_device)
    ("stream.window_samples", "2147483648", "stream.window_samples=2147483648: must be in [1, 2147483647]"),
])
def test_the_reported_values_stop_when_the_scenario_is_built(key, value, expected):
    with pytest.raises(OptionError) as caught:
        Scenario(strategy="felix").with_overrides({key: value})
    assert str(caught.value) == expected


def test_the_cli_refuses_a_bad_value_in_one_line_before_any_folder(tmp_path):
    from felix_jax.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as caught:
        main(["run", "--preset", "tiny", "--set", "strategy=felix", "--set", "selector.exploration_factor=5",
              "--out", str(out)])
    assert str(caught.value) == "felix-jax run: selector.exploration_factor=5.0: must be in [0, 1]"
    assert not out.exists()


def test_an_int_option_past_int64_is_refused_before_any_folder(tmp_path):
    """The reported case: min_age=2^63 passed its range check, then an OverflowError mid-run left a
    half-written results folder."""
    from felix_jax.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as caught:
        main(["run", "--preset", "tiny", "--quiet", "--set", "strategy=felix",
              "--set", "eval_selector.min_age=9223372036854775808", "--out", str(out)])
    assert str(caught.value) == ("felix-jax run: eval_selector.min_age=9223372036854775808: "
                                 "must be in [0, 9223372036854775807]")
    assert not out.exists()


def test_eval_selection_at_the_top_of_int64_does_not_wrap_around():
    """min_age = 2^63 - 1 is allowed: the staleness threshold (round - min_age + 1) * N is computed without
    int64 wrap-around, so nobody is old enough and no overflow warning is raised."""
    import warnings

    import numpy as np

    from felix_jax.policies.selectors.tierselect_math import select_for_eval_in_order
    from felix_jax.traces.availability import Tier

    n = 30  # every client trained in round 0 (staleness keys round * N + id), available and idle
    keys, tier, busy = np.arange(n, dtype=np.int64), np.full(n, int(Tier.AVL_TRAIN)), np.zeros(n, bool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for min_age in (2 ** 62, 2 ** 63 - 1):
            assert select_for_eval_in_order(keys, tier, busy, 10, 5, min_age).tolist() == []
        assert select_for_eval_in_order(keys, tier, busy, 10, 5, 0).tolist() == [0, 1, 2, 3, 4]


def test_a_plugin_policy_declares_ranges_the_same_way(tmp_path):
    (tmp_path / "ranged.py").write_text(textwrap.dedent('''
        import dataclasses
        from typing import ClassVar, Mapping
        import numpy as np
        from felix_jax import plugins
        from felix_jax.options import Range
        from felix_jax.policies import Selector

        @dataclasses.dataclass(frozen=True)
        class HalfConfig:
            fraction: float = 0.5
            RANGES: ClassVar[Mapping[str, Range]] = {"fraction": Range(0.0, 1.0, low_open=True)}

        @plugins.selector("test-ranged-half", config=HalfConfig)
        def make(config):
            return Selector("test-ranged-half", lambda: None,
                            lambda state, ctx, k: (np.flatnonzero(ctx.eligible)[: int(config.fraction * k)], state))

        plugins.strategy("test-ranged", mode="async", knowledge="none", selector="test-ranged-half",
                         aggregator="fedbuff")
    '''))
    base = Scenario().with_overrides({"plugins": str(tmp_path / "ranged.py"), "strategy": "test-ranged"})
    assert base.with_overrides({"selector.fraction": "1"}).resolve_strategy().selector.fraction == 1.0
    with pytest.raises(OptionError, match=r"^selector\.fraction=0\.0: must be in \(0, 1\]$"):
        base.with_overrides({"selector.fraction": "0"})
    assert [f.name for f in dataclasses.fields(SELECTOR_OPTIONS["test-ranged-half"].config)] == ["fraction"]


# ------------------------------------------------------------------ the stop rule's window (stop_window)
def test_the_stop_rule_by_hand_with_fewer_accuracies_than_its_window():
    from felix_jax.fleet.config import StopRule

    partial = StopRule(target_accuracy=0.5, window=3)
    full = StopRule(target_accuracy=0.5, window=3, full_window=True)
    # the initial model's 0.1, then 0.9: mean (0.1 + 0.9) / 2 = 0.5 >= 0.5 and the last 0.9 >= 0.5
    assert partial.reached([0.1, 0.9]) and not full.reached([0.1, 0.9])
    # three: (0.1 + 0.9 + 0.4) / 3 = 0.467 < 0.5; the last 0.4 < 0.5 besides
    assert not partial.reached([0.1, 0.9, 0.4]) and not full.reached([0.1, 0.9, 0.4])
    # the window slides: (0.9 + 0.4 + 0.6) / 3 = 0.633, last 0.6
    assert partial.reached([0.1, 0.9, 0.4, 0.6]) and full.reached([0.1, 0.9, 0.4, 0.6])
    assert not StopRule(target_accuracy=0.5, window=1).reached([0.9, 0.4])  # the last alone
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        StopRule(window=0)


def test_stop_window_reaches_the_stop_rule_and_the_as_run_reading_fills_it():
    from felix_jax.experiment.resolution import stop_rule

    sc = Scenario()
    assert (stop_rule(sc).window, stop_rule(sc).full_window) == (20, False)
    assert stop_rule(sc.with_overrides({"stop_window": "5"})).window == 5
    assert stop_rule(sc.with_overrides({"semantics": "paper_code"})).full_window
    assert not stop_rule(sc.with_overrides({"semantics": "paper_code", "reading.stop_window_fill": "partial"})) \
        .full_window
    with pytest.raises(OptionError, match=r"^stop_window=0: must be >= 1$"):
        sc.with_overrides({"stop_window": "0"})
    with pytest.raises(OptionError, match="stop_window_fill"):
        sc.with_overrides({"reading.stop_window_fill": "half"})
