"""What a scenario's plugins register, for ``felix-jax run --list --set plugins=FILE``: the models,
strategies, selectors and aggregators that come from plugins rather than from felix-jax (in a
``felix-jax`` process, the named plugins' alone; in a Python session, every plugin loaded so far)."""

from __future__ import annotations

from ..plugin_calls import is_plugin
from ..plugins import load_plugins

KINDS = ("models", "strategies", "selectors", "aggregators")


def plugin_entries(plugins: str) -> dict[str, list[str]]:
    """Imports ``plugins`` (comma-separated files or modules; an OptionError names one that fails) and
    returns every registered name, by kind, that did not come with felix-jax."""
    from ..policies.aggregators import AGGREGATORS
    from ..policies.selectors import SELECTORS
    from .registry import MODELS
    from .strategies import BUILT_IN_STRATEGIES, STRATEGIES

    load_plugins(plugins)
    return {
        "models": [n for n, f in MODELS.items() if is_plugin(f)],
        "strategies": [n for n in STRATEGIES if n not in BUILT_IN_STRATEGIES],
        "selectors": [n for n, f in SELECTORS.items() if is_plugin(f)],
        "aggregators": [n for n, f in AGGREGATORS.items() if is_plugin(f)],
    }


def describe_plugin_entries(plugins: str, entries: dict[str, list[str]]) -> list[str]:
    """The listing's lines for ``entries`` (from :func:`plugin_entries`)."""
    from .strategies import STRATEGIES

    lines = [f"from plugins ({plugins}; use them like the built-in ones, e.g. --set model=NAME):"]
    for kind in KINDS:
        names = entries[kind]
        if kind == "strategies":  # its mode and availability knowledge, as the built-in ones are listed
            names = [f"{n} ({STRATEGIES[n].mode}, {STRATEGIES[n].knowledge.value})" if n in STRATEGIES else n
                     for n in names]
        lines.append(f"  {kind + ':':<13} {', '.join(names) or 'none'}")
    return lines
