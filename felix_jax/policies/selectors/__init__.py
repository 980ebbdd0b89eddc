"""Client selectors; a new one is one file plus one line in ``SELECTORS`` (and
``SELECTOR_OPTIONS`` if it has a config).

``*_math`` modules hold the pure, vectorised formulas the selectors use.
"""

from __future__ import annotations

import functools

from ...options import OptionSpec
from ...plugin_calls import check_signature, guarded, is_plugin
from .base import SelectionContext, Selector
from .oort import make_oort_selector
from .oort_math import OORT_VARIANTS, OortConfig
from .random_selector import make_random_selector
from .refl import REFLConfig, make_refl_selector
from .tierselect_eval import TierSelectEvalConfig, make_tierselect_eval

SELECTORS = {
    "random": make_random_selector,
    "oort": make_oort_selector,
    "refl": make_refl_selector,
    "tierselect-eval": make_tierselect_eval,
}

# How each selector is configured from a scenario (``selector.<field>``, ``eval_selector.<field>``).
SELECTOR_OPTIONS: dict[str, OptionSpec] = {
    "random": OptionSpec(None),
    "oort": OptionSpec(OortConfig, OORT_VARIANTS),
    "refl": OptionSpec(REFLConfig),
    "tierselect-eval": OptionSpec(TierSelectEvalConfig),
}


def selector_config(name: str, where: str = "selector", **options):
    """The config instance of selector ``name`` for ``options`` (``None`` if it has none)."""
    if name not in SELECTORS:
        from ...suggest import known_names

        raise KeyError(f"unknown selector {name!r}{known_names(name, SELECTORS, 'selectors')}")
    return SELECTOR_OPTIONS[name].build(where, options)


def make_selector(name: str, config=None, **options) -> Selector:
    """The selector registered as ``name``, from a ready ``config`` or option keywords."""
    if config is None:
        config = selector_config(name, **options)
    elif options:
        raise TypeError("pass either config or options, not both")
    factory = SELECTORS[name]
    if not is_plugin(factory):
        return _checked(factory() if config is None else factory(config))
    # a user's selector: what it raises is reported naming it and the call (plugin_calls.py)
    what = f"selector {name!r} factory {getattr(factory, '__name__', 'make')}()"
    if config is None:
        check_signature(what, factory, (), "make() -> Selector (a selector registered without a config)")
    else:
        check_signature(what, factory, (config,), f"make(config: {type(config).__name__}) -> Selector")
    make = guarded(what, factory)
    selector = make() if config is None else make(config)
    return _checked(selector._replace(init=guarded(f"selector {name!r}.init", selector.init),
                                      select=guarded(f"selector {name!r}.select", selector.select)))


def _checked(selector: Selector) -> Selector:
    """``selector`` whose ``select`` must return a pair (client ids, state): anything else (None, the ids
    alone, a triple) is refused as a PolicyError naming the selector, not an unpacking error deep in the
    server. The ids themselves are checked by the server (``FleetSimulator.select_and_dispatch``)."""
    inner = selector.select

    @functools.wraps(inner)  # the user's own function stays reachable (plugin_calls.defined_at)
    def select(state, ctx, k):
        out = inner(state, ctx, k)
        if not (isinstance(out, tuple) and len(out) == 2):
            from ...fleet.simulator import PolicyError

            shown = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
            raise PolicyError(f"selector {selector.name} returned {shown}: expected a tuple (client ids, state)")
        return out

    return selector._replace(select=select)


__all__ = ["OORT_VARIANTS", "SELECTORS", "SELECTOR_OPTIONS", "SelectionContext", "Selector", "make_oort_selector",
           "make_random_selector", "make_refl_selector", "make_selector", "make_tierselect_eval", "selector_config"]
