"""Strategies: named compositions of mode, availability knowledge, selector(s) and
aggregator (docs/architecture.md). The paper's Table 1 rows are entries here.

A strategy is only named defaults: its policies' options (``selector_options``,
``eval_selector_options``, ``aggregator_options``) are fields of the policies'
frozen configs, and a scenario may override any of them
(:func:`resolve_strategy`). Which Oort each row runs: every row uses
``OortConfig()`` (FeLiX's train selector as the paper describes it, the one the paper's
baselines ran in its code base) unless its options name another variant; the
``*-fedscale`` ablations run FedScale's Oort (``OortConfig.fedscale()``: Oort's
normaliser puts utilities on the scale of its staleness bonus, exploration by a
prior-ranked window, ...; see :class:`~felix_jax.policies.selectors.oort_math.OortConfig`);
the async one ``OortConfig.fedscale_async()``, whose per-client exploration draw lets a
one-client refill explore. ``felix-oracle`` is FeLiX with oracle availability instead
of TierTrack (the paper's Fig. 12); what its oracle does when a client leaves mid-task
is the scenario's ``oracle_departure``.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from ..fleet.knowledge import Knowledge
from ..options import to_json
from ..policies import aggregator_config, selector_config


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    mode: str  # "sync" | "async"
    knowledge: Knowledge
    selector: str  # registry name in felix_jax.policies.selectors
    aggregator: str  # registry name in felix_jax.policies.aggregators
    description: str = ""
    eval_selector: str | None = None
    selector_options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    eval_selector_options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    aggregator_options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return to_json({k: dict(v) if isinstance(v, Mapping) else v for k, v in d.items()})


@dataclasses.dataclass(frozen=True)
class ResolvedStrategy:
    """A strategy with its policies' configs resolved for one scenario."""

    strategy: Strategy
    selector: Any  # the selector's config (None for random)
    eval_selector: Any  # the eval selector's config, or None
    aggregator: Any  # the aggregator's config

    def to_json(self) -> dict:
        return {"selector": to_json(self.selector), "eval_selector": to_json(self.eval_selector),
                "aggregator": to_json(self.aggregator)}


def resolve_strategy(name: str, selector: Mapping[str, Any] | None = None,
                     eval_selector: Mapping[str, Any] | None = None,
                     aggregator: Mapping[str, Any] | None = None) -> ResolvedStrategy:
    """The strategy's defaults overridden by a scenario's options.

    Raises :class:`~felix_jax.options.OptionError` naming a bad key. Eval-selector
    options of a strategy without an eval selector are checked, then unused (a
    scenario may carry them for the FeLiX rows of a comparison).
    """
    st = get_strategy(name)
    if eval_selector and st.eval_selector is None:  # a scenario's eval options apply to strategies that have one
        selector_config(DEFAULT_EVAL_SELECTOR, "eval_selector", **eval_selector)  # still caught if misspelt
    sel = selector_config(st.selector, "selector", **{**st.selector_options, **(selector or {})})
    ev = (selector_config(st.eval_selector, "eval_selector", **{**st.eval_selector_options, **(eval_selector or {})})
          if st.eval_selector else None)
    agg = aggregator_config(st.aggregator, **{**st.aggregator_options, **(aggregator or {})})
    return ResolvedStrategy(st, sel, ev, agg)


DEFAULT_EVAL_SELECTOR = "tierselect-eval"
_N, _O, _T = Knowledge.NONE, Knowledge.ORACLE, Knowledge.TIERTRACK
_FEDSCALE_OORT = MappingProxyType({"variant": "fedscale"})
_FEDSCALE_OORT_ASYNC = MappingProxyType({"variant": "fedscale_async"})  # explores at one-client refills

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        # the paper's Table 1 rows
        Strategy("oort", "sync", _N, "oort", "fedavg",
                 "OORT: sync rounds, Oort selection, FedAvg of the first K fresh updates, no availability knowledge"),
        Strategy("oort-oracle", "sync", _O, "oort", "fedavg", "OORT*: OORT with oracle availability"),
        Strategy("oort-async", "async", _N, "oort", "fedbuff",
                 "OORT+Async: async, Oort selection, FedBuff weights, no availability knowledge"),
        Strategy("oort-async-oracle", "async", _O, "oort", "fedbuff", "OORT+Async*: with oracle availability"),
        Strategy("refl", "sync", _O, "refl", "refl_saa",
                 "REFL*: sync, IPS selection on an oracle predictor, staleness-aware aggregation of late updates"),
        Strategy("felix", "async", _T, "oort", "tierfuse",
                 "FeLiX: async, TierTrack tiers, TierSelect (fresh-utility train + eval selector), TierFuse",
                 eval_selector="tierselect-eval"),
        # baselines
        Strategy("fedavg", "sync", _N, "random", "fedavg",
                 "FedAvg: sync rounds of random clients, n_i-weighted average, late updates dropped"),
        Strategy("fedbuff", "async", _N, "random", "fedbuff",
                 "FedBuff: async, random clients, buffer K updates weighted 1/sqrt(1+staleness)"),
        # FedBuff at each availability knowledge: an aggregation rule compared with FedBuff at equal knowledge
        Strategy("fedbuff-tiertrack", "async", _T, "random", "fedbuff",
                 "FedBuff with TierTrack availability: random clients among those that told the server they are "
                 "available to train"),
        Strategy("fedbuff-oracle", "async", _O, "random", "fedbuff",
                 "FedBuff with oracle availability: random clients among those the trace has available"),
        # ablations: what FeLiX's gain is made of
        Strategy("felix-no-eval", "async", _T, "oort", "tierfuse", "FeLiX without the eval selector"),
        Strategy("felix-no-tierfuse", "async", _T, "oort", "fedbuff", "FeLiX with FedBuff weights instead of TierFuse",
                 eval_selector="tierselect-eval"),
        Strategy("felix-normalized", "async", _T, "oort", "tierfuse",
                 "FeLiX with TierFuse normalised by the sum of weights (the paper's formula) instead of / K",
                 eval_selector="tierselect-eval", aggregator_options=MappingProxyType({"normalize": True})),
        Strategy("oort-async-tiertrack", "async", _T, "oort", "fedbuff", "OORT+Async with TierTrack availability"),
        Strategy("felix-oracle", "async", _O, "oort", "tierfuse",
                 "FeLiX's selectors and TierFuse on oracle availability instead of TierTrack (the paper's Fig. 12)",
                 eval_selector="tierselect-eval"),
        Strategy("oort-async-step-matched", "async", _N, "oort", "fedbuff",
                 "OORT+Async with FedBuff's relative weights rescaled to TierFuse's total (FeLiX's step size)",
                 aggregator_options=MappingProxyType({"match_step": "tierfuse"})),
        Strategy("oort-async-oracle-step-matched", "async", _O, "oort", "fedbuff",
                 "OORT+Async* with FeLiX's step size (FedBuff weights rescaled to TierFuse's total)",
                 aggregator_options=MappingProxyType({"match_step": "tierfuse"})),
        Strategy("oort-oracle-fedscale", "sync", _O, "oort", "fedavg", "OORT* running FedScale's Oort (normalised U)",
                 selector_options=_FEDSCALE_OORT),
        Strategy("oort-async-oracle-fedscale", "async", _O, "oort", "fedbuff",
                 "OORT+Async* running FedScale's Oort (normalised U; each refilled client explores with "
                 "probability epsilon)", selector_options=_FEDSCALE_OORT_ASYNC),
    ]
}
BUILT_IN_STRATEGIES = frozenset(STRATEGIES)  # the names above; plugins.strategy adds others


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        from ..suggest import known_names

        # a plugin's strategy is known once its file is loaded: the likeliest miss after a typo
        raise KeyError(f"unknown strategy {name!r}{known_names(name, STRATEGIES, 'strategies')}; a plugin's "
                       "strategy needs its file: --set plugins=FILE.py") from None
