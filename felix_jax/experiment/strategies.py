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

A scenario may also swap a strategy's component for another registered one by name
(``aggregator.name=median``, ``selector.name=random``, ``eval_selector.name=...``:
:func:`with_components`): the strategy keeps its mode and knowledge, the swapped
component starts from its own defaults (the strategy's options were the old one's) and
the scenario's options for it are checked against it. The strategy then records what
it replaced (``swapped``) and is named by its :attr:`Strategy.label`,
``felix[aggregator=median]``.

A strategy may also set the fleet's ``interruption``, ``server_optimizer`` and ``prox_mu``
(``fleet_options``): the values a scenario that leaves those fields unset (none) runs with, e.g.
FedProx's partial updates and proximal term, FedAvgM's server momentum.
"""

from __future__ import annotations

import contextlib
import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from ..fleet.knowledge import Knowledge
from ..options import OptionError, to_json
from ..policies import aggregator_config, selector_config

COMPONENTS = ("selector", "eval_selector", "aggregator")  # what NAME.name swaps, in the order labels list them
# scenario fields whose none means "the strategy's own" (Strategy.fleet_options), with the value of a
# strategy that sets none
FLEET_OPTIONS: Mapping[str, Any] = MappingProxyType({"interruption": "resume", "server_optimizer": "sgd",
                                                     "prox_mu": 0.0})


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
    # component -> the strategy's own one that a scenario swapped out (with_components); {}: none swapped
    swapped: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    # the strategy's values of scenario fields a scenario leaves unset (none): FLEET_OPTIONS, e.g. FedProx's
    # {"interruption": "partial", "prox_mu": 0.01} or FedAvgM's {"server_optimizer": "momentum"}
    fleet_options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        unknown = sorted(set(self.fleet_options) - set(FLEET_OPTIONS))
        if unknown:
            raise ValueError(f"strategy {self.name}: fleet_options {unknown} are not among {', '.join(FLEET_OPTIONS)}")

    def fleet_option(self, field: str, scenario_value: Any) -> Any:
        """A fleet setting: the scenario's ``scenario_value`` where it sets one (not None), else this
        strategy's own (``fleet_options``), else the setting's default (:data:`FLEET_OPTIONS`)."""
        if scenario_value is not None:
            return scenario_value
        return self.fleet_options.get(field, FLEET_OPTIONS[field])

    @property
    def label(self) -> str:
        """The name, with the components swapped in where any are: ``felix[aggregator=median]``."""
        if not self.swapped:
            return self.name
        return f"{self.name}[{','.join(f'{c}={getattr(self, c)}' for c in COMPONENTS if c in self.swapped)}]"

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return to_json({**{k: dict(v) if isinstance(v, Mapping) else v for k, v in d.items()}, "label": self.label})


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

    def eval_budget(self, aggregation_goal: int) -> int:
        """Eval tasks the eval selector may send per aggregation round: its config's ``budget(K)`` where it
        has one (TierSelect's ``int(budget_factor * K)``), else TierSelect's default ``int(1.5 * K)`` (an
        eval selector swapped in or registered without a budget); 0 without an eval selector."""
        if self.strategy.eval_selector is None:
            return 0
        budget = getattr(self.eval_selector, "budget", None)
        if callable(budget):
            return budget(aggregation_goal)
        from ..policies.selectors.tierselect_math import eval_budget

        return eval_budget(aggregation_goal)


def component_names(selector: Mapping[str, Any] | None = None, eval_selector: Mapping[str, Any] | None = None,
                    aggregator: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The components a scenario's option sections name (their ``name`` keys): ``{"aggregator": "median"}``."""
    sections = {"selector": selector, "eval_selector": eval_selector, "aggregator": aggregator}
    return {c: options["name"] for c, options in sections.items() if options and "name" in options}


def with_components(st: Strategy, names: Mapping[str, Any]) -> Strategy:
    """``st`` with each component ``names`` names (``{"aggregator": "median"}``) swapped in: that
    component's strategy options dropped (they were the old one's), ``swapped`` recording the one
    replaced. A name equal to the strategy's own swaps nothing; an eval selector named for a strategy
    without one is checked, then unused, as its options are (a comparison's base scenario carries it
    for the rows that have one; a run says so in its warnings). Raises OptionError (one line) for a
    name that is not registered, listing the near ones.
    """
    from ..policies.aggregators import AGGREGATORS
    from ..policies.selectors import SELECTORS
    from ..suggest import known_names

    changes: dict[str, Any] = {}
    swapped = dict(st.swapped)
    for component in COMPONENTS:
        if component not in names:
            continue
        new = names[component]
        kind, registry = (("aggregator", AGGREGATORS) if component == "aggregator" else ("selector", SELECTORS))
        if not isinstance(new, str) or not new:
            raise OptionError(f"{component}.name={new!r}: expected the name of a registered {kind}")
        if new not in registry:
            raise OptionError(f"{component}.name={new!r}: unknown {kind}"
                              f"{known_names(new, sorted(registry), kind + 's')}; a plugin's needs its file: "
                              "--set plugins=FILE.py")
        current = getattr(st, component)
        if current is None or new == current:  # no eval selector to replace: checked, then unused (as its options)
            continue
        changes[component], changes[f"{component}_options"] = new, MappingProxyType({})
        swapped.setdefault(component, current)  # the strategy's own, however often swapped
    if not changes:
        return st
    made = dataclasses.replace(st, **changes)
    what = ", ".join(f"{c} {getattr(made, c)} for {swapped[c]}" for c in COMPONENTS if c in swapped)
    return dataclasses.replace(made, swapped=MappingProxyType(swapped), description=f"{st.description} ({what})")


def resolve_strategy(name: str, selector: Mapping[str, Any] | None = None,
                     eval_selector: Mapping[str, Any] | None = None,
                     aggregator: Mapping[str, Any] | None = None) -> ResolvedStrategy:
    """The strategy's defaults overridden by a scenario's options; a ``name`` among them swaps that
    component (:func:`with_components`) and the options given with it are checked against the new one.

    Raises :class:`~felix_jax.options.OptionError` naming a bad key. Eval-selector
    options of a strategy without an eval selector are checked, then unused (a
    scenario may carry them for the FeLiX rows of a comparison).
    """
    st = with_components(get_strategy(name), component_names(selector, eval_selector, aggregator))
    selector, eval_selector, aggregator = ({k: v for k, v in (options or {}).items() if k != "name"}
                                           for options in (selector, eval_selector, aggregator))
    if eval_selector and st.eval_selector is None:  # a scenario's eval options apply to strategies that have one
        selector_config(DEFAULT_EVAL_SELECTOR, "eval_selector", **eval_selector)  # still caught if misspelt
    with _swapped_named(st):
        sel = selector_config(st.selector, "selector", **{**st.selector_options, **selector})
        ev = (selector_config(st.eval_selector, "eval_selector", **{**st.eval_selector_options, **eval_selector})
              if st.eval_selector else None)
        agg = aggregator_config(st.aggregator, **{**st.aggregator_options, **aggregator})
    return ResolvedStrategy(st, sel, ev, agg)


@contextlib.contextmanager
def _swapped_named(st: Strategy):
    """An option refused for a swapped-in component says which component it was checked against, and how
    to start from that component's defaults (a preset's options were the old one's)."""
    try:
        yield
    except OptionError as e:
        component = str(e).partition(".")[0].partition(":")[0]
        if component not in st.swapped:
            raise
        new = getattr(st, component)
        raise OptionError(f"{e} ({component}.name={new} swapped in {new} for {st.swapped[component]}: its options are "
                          f"checked against {new}; --set {component}={new} starts from {new}'s defaults, dropping "
                          "the options set before)") from None


DEFAULT_EVAL_SELECTOR = "tierselect-eval"
_N, _O, _T = Knowledge.NONE, Knowledge.ORACLE, Knowledge.TIERTRACK
_FEDSCALE_OORT = MappingProxyType({"variant": "fedscale"})
_FEDPROX = MappingProxyType({"interruption": "partial", "prox_mu": 0.01})  # FedProx's clients
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
        # the baselines reviewers ask for: client drift, server momentum and adaptivity, fairness
        Strategy("fedprox", "sync", _N, "random", "fedprox",
                 "FedProx (Li et al., MLSys 2020): FedAvg's sync rounds, clients on F_k + mu/2 ||w - w_t||^2 "
                 "(prox_mu 0.01), a client that leaves sends the steps it finished (interruption=partial), "
                 "n_i-weighted", fleet_options=_FEDPROX),
        Strategy("fedprox-async", "async", _N, "random", "fedbuff",
                 "FedProx (Li et al., MLSys 2020) on FedBuff's fleet: async, random clients, the proximal term "
                 "(prox_mu 0.01) and partial updates, FedBuff's 1/sqrt(1+staleness) weights",
                 fleet_options=_FEDPROX),
        Strategy("fedavgm", "sync", _N, "random", "fedavg",
                 "FedAvgM (Hsu et al., 2019): FedAvg's sync rounds, server momentum v <- beta v + Delta, "
                 "w <- w + eta v (server_momentum 0.9, eta 1)", fleet_options=MappingProxyType(
                     {"server_optimizer": "momentum"})),
        Strategy("fedadagrad", "sync", _N, "random", "fedavg",
                 "FedAdagrad (Reddi et al., ICLR 2021, Alg. 2): FedAvg's sync rounds, server Adagrad "
                 "w <- w + eta m / (sqrt(v) + tau) (eta 0.1, server_tau 1e-3, server_momentum 0.9 as beta_1)",
                 aggregator_options=MappingProxyType({"server_lr": 0.1}),
                 fleet_options=MappingProxyType({"server_optimizer": "adagrad"})),
        Strategy("qfedavg", "sync", _N, "random", "qfedavg",
                 "q-FedAvg (Li et al., ICLR 2020, Alg. 2): sync rounds of random clients, updates weighted by "
                 "L F_k^q / sum h_k toward fair losses (q 1, L = 1/learning_rate)"),
        # FedBuff at each availability knowledge: an aggregation rule compared with FedBuff at equal knowledge
        Strategy("fedbuff-tiertrack", "async", _T, "random", "fedbuff",
                 "FedBuff with TierTrack availability: random clients among those that told the server they are "
                 "available to train"),
        Strategy("fedbuff-oracle", "async", _O, "random", "fedbuff",
                 "FedBuff with oracle availability: random clients among those the trace has available"),
        # Byzantine-robust aggregation (policies/aggregators/byzantine.py): FedBuff's fleet, another rule
        Strategy("krum", "async", _N, "random", "krum",
                 "Krum (Blanchard et al., NeurIPS 2017): async, random clients, the buffered update with the "
                 "least sum of squared distances to its K-f-2 nearest (f=1; needs K >= 2f+3)"),
        Strategy("multi-krum", "async", _N, "random", "multi-krum",
                 "Multi-Krum (Blanchard et al., NeurIPS 2017): async, random clients, the mean of the m = K-f "
                 "buffered updates of least Krum score (f=1; needs K >= 2f+3)"),
        Strategy("bulyan", "async", _N, "random", "bulyan",
                 "Bulyan (El Mhamdi et al., ICML 2018): async, random clients, K-2f updates by iterated Krum, then "
                 "per coordinate the mean of the K-4f values nearest their median (f=1; needs K >= 4f+3)"),
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
