"""Strategies: named compositions of mode, availability knowledge, selector(s) and
aggregator (DESIGN.md layer 5). The paper's Table 1 rows are entries here.
"""

from __future__ import annotations

import dataclasses

from ..fleet.knowledge import Knowledge


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    mode: str  # "sync" | "async"
    knowledge: Knowledge
    selector: str  # registry name in felix_jax.policies.selectors
    aggregator: str  # registry name in felix_jax.policies.aggregators
    description: str = ""
    eval_selector: str | None = None


_N, _O, _T = Knowledge.NONE, Knowledge.ORACLE, Knowledge.TIERTRACK

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
        # the paper's ablations
        Strategy("felix-no-eval", "async", _T, "oort", "tierfuse", "FeLiX without the eval selector"),
        Strategy("felix-no-tierfuse", "async", _T, "oort", "fedbuff", "FeLiX with FedBuff weights instead of TierFuse",
                 eval_selector="tierselect-eval"),
        Strategy("oort-async-tiertrack", "async", _T, "oort", "fedbuff", "OORT+Async with TierTrack availability"),
    ]
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}") from None
