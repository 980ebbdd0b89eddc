"""Your own selectors, aggregators, strategies and models, by name, from your own file.

A plugin is a Python file (or an importable module) that registers policies when
it is imported::

    # my_policies.py
    import dataclasses
    import numpy as np
    from felix_jax import plugins
    from felix_jax.policies import Aggregator, Selector

    @dataclasses.dataclass(frozen=True)
    class GreedyConfig:
        fraction: float = 1.0  # share of k picked (the rest is left idle)

    @plugins.selector("greedy-utility", config=GreedyConfig)
    def make_greedy(config: GreedyConfig) -> Selector:
        def select(state, ctx, k):
            ids = np.flatnonzero(ctx.eligible)
            best = ids[np.argsort(-ctx.view.utility[ids], kind="stable")]
            return best[: int(config.fraction * k)], state
        return Selector("greedy-utility", lambda: None, select)

    plugins.strategy("felix-greedy", mode="async", knowledge="tiertrack", selector="greedy-utility",
                     aggregator="tierfuse", eval_selector="tierselect-eval")

and a scenario names it: ``felix-jax run --set plugins=my_policies.py --set
strategy=felix-greedy --set selector.fraction=0.5`` (``compare`` and scenario files
alike). A policy's options are the fields of its config dataclass, reached and
validated like the built-in ones. The interfaces are :class:`~felix_jax.policies.
Selector` (``init() -> state``, ``select(state, ctx, k) -> (client ids, state)``)
and :class:`~felix_jax.policies.Aggregator` (``weights(BufferInfo) -> (K,)``, plus
how the server step uses them). An aggregator whose rule is not a weighted mean (a
coordinate-wise median, a trimmed mean, Krum) also sets ``combine``: a jittable
``combine(deltas, keep, weights) -> update`` over the whole buffer (``deltas`` a
pytree of (K, ...) leaves, ``keep`` a (K,) bool mask of the rows that count, the
others zeros to ignore, ``weights`` the (K,) float32 weights), returning the
server's update with the leaves' shapes without K; felix-jax jits it, and the server
uses it in place of the weighted mean and applies ``server_lr`` to it. The weights
still count and log the updates (docs/file-formats.md, "Plugins", has a worked
median). A worked model plugin (a flax MLP with dropout and a small CNN,
``@plugins.model``) is ``examples/my_models.py``, explained in docs/file-formats.md, and
``felix-jax run --list --set plugins=FILE`` lists what a plugin registers.

A selector reads the server's view ``ctx.view`` (a read-only :class:`~felix_jax.fleet.clientmap.
ClientMap`): tiers, utilities, durations, and each client's availability history as the server
learned it (``tier_since_s``, ``last_online_s``, ``departures``; ``current_spell_s(ctx.now)`` and
``online_fraction(ctx.now)``); docs/file-formats.md has a worked longest-online-streak selector.

Registries are filled when plugins are imported, once per process; a name may be
registered again only by the same object (a re-import), never to replace a
built-in or another plugin's entry.

What a plugin's code raises when felix-jax calls it reaches its author as one line naming
the plugin, the call and the plugin's own file:line (:mod:`felix_jax.plugin_calls`); a run
it stops mid-way keeps its results and a stop snapshot, and ``--resume`` continues it once
the plugin is fixed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from .options import OptionError, OptionSpec


def _register(kind: str, table: dict, options: dict, name: str, factory: Callable, spec: OptionSpec) -> None:
    current = table.get(name)
    same = lambda f: (getattr(f, "__module__", None), getattr(f, "__qualname__", None))  # noqa: E731
    if current is not None and same(current) != same(factory):
        raise ValueError(f"{kind} {name!r} is already registered")
    table[name] = factory
    options[name] = spec


def selector(name: str, config: type | None = None, variants: Mapping[str, Callable[..., Any]] | None = None):
    """Decorator: registers ``make(config) -> Selector`` (or ``make() -> Selector`` without a config)."""
    from .policies.selectors import SELECTOR_OPTIONS, SELECTORS

    def register(factory: Callable):
        _register("selector", SELECTORS, SELECTOR_OPTIONS, name, factory, OptionSpec(config, dict(variants or {})))
        return factory

    return register


def aggregator(name: str, config: type, variants: Mapping[str, Callable[..., Any]] | None = None):
    """Decorator: registers ``make(config) -> Aggregator``; ``config`` is a frozen dataclass
    (it should have a ``server_lr`` field, the server step's eta). The Aggregator is used as the
    factory returns it, its own ``combine`` rule included (jitted, errors named as the plugin's)."""
    from .policies.aggregators import AGGREGATOR_OPTIONS, AGGREGATORS

    def register(factory: Callable):
        _register("aggregator", AGGREGATORS, AGGREGATOR_OPTIONS, name, factory,
                  OptionSpec(config, dict(variants or {})))
        return factory

    return register


def model(name: str):
    """Decorator: registers ``make(input_shape, num_classes) -> Model`` as ``model=NAME``.

    A flax linen module becomes a model with :func:`felix_jax.models.base.make_model`
    (``train_flag="train"`` for a module with dropout).
    """
    from .experiment.registry import MODELS

    def register(factory: Callable):
        current = MODELS.get(name)
        if current is not None and (current.__module__, current.__qualname__) != (factory.__module__,
                                                                                factory.__qualname__):
            raise ValueError(f"model {name!r} is already registered")
        MODELS[name] = factory
        return factory

    return register


def strategy(name: str, *, mode: str, knowledge: str, selector: str, aggregator: str, description: str = "",
             eval_selector: str | None = None, selector_options: Mapping[str, Any] | None = None,
             eval_selector_options: Mapping[str, Any] | None = None,
             aggregator_options: Mapping[str, Any] | None = None) -> None:
    """Registers a strategy: a named composition, like the paper's Table 1 rows."""
    from types import MappingProxyType

    from .experiment.strategies import STRATEGIES, Strategy
    from .fleet.knowledge import Knowledge

    if mode not in ("sync", "async"):
        raise ValueError(f"strategy {name!r}: mode must be 'sync' or 'async', got {mode!r}")
    st = Strategy(name, mode, Knowledge(knowledge), selector, aggregator, description or f"plugin strategy {name}",
                  eval_selector, MappingProxyType(dict(selector_options or {})),
                  MappingProxyType(dict(eval_selector_options or {})),
                  MappingProxyType(dict(aggregator_options or {})))
    if name in STRATEGIES and STRATEGIES[name] != st:
        raise ValueError(f"strategy {name!r} is already registered")
    STRATEGIES[name] = st


def load_plugins(names: str) -> list[str]:
    """Imports each comma-separated plugin (a ``.py`` file or a module name) once per process.

    Raises :class:`~felix_jax.options.OptionError` naming the plugin when it cannot be imported.
    """
    loaded = []
    for item in (x.strip() for x in names.split(",")):
        if not item:
            continue
        try:
            if item.endswith(".py"):
                path = Path(item).expanduser().resolve()
                if not path.is_file():
                    raise OptionError(f"plugins={item!r}: no such file")
                module = "felix_jax_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
                if module not in sys.modules:
                    spec = importlib.util.spec_from_file_location(module, path)
                    mod = importlib.util.module_from_spec(spec)
                    sys.modules[module] = mod
                    try:
                        spec.loader.exec_module(mod)
                    except BaseException:
                        del sys.modules[module]
                        raise
            else:
                importlib.import_module(item)
        except OptionError:
            raise
        except SystemExit as e:  # sys.exit() in a user's file must not end the run as a success
            raise OptionError(f"plugins={item!r}: importing it called sys.exit({e.code!r}); a plugin only "
                              "registers policies") from None
        except Exception as e:  # a user's file: any error it raises is reported, with its kind
            first = (str(e).strip().splitlines() or [""])[0]
            raise OptionError(f"plugins={item!r}: importing it failed ({type(e).__name__}: {first})") from None
        loaded.append(item)
    return loaded
