"""How a run and a comparison are named by default: the reading and any component swapped into the
strategy show in the folder name and the banner, so a run of the authors' code as it ran (``--set
semantics=paper_code``) or of FeLiX with another aggregator (``--set aggregator.name=median``) never
takes the plain run's folder."""

from __future__ import annotations

import re
from pathlib import Path

from .scenario import Scenario

DEFAULT_SEMANTICS = "paper"


def _safe(text: str) -> str:
    """``text`` as one folder-name part (no path separators, colons or spaces)."""
    return re.sub(r"[^\w.=+-]", "_", text).replace("=", "-")


def reading_tag(sc: Scenario) -> str:
    """The reading as a folder-name part: ``""`` for the default (the paper's text, no switch set),
    else ``paper_code``, with each ``reading.KEY=V`` switch after it (``paper+serial_server-true``)."""
    if sc.semantics == DEFAULT_SEMANTICS and not sc.reading:
        return ""
    return "+".join([sc.semantics, *(_safe(f"{k}={v}") for k, v in sorted(sc.reading.items()))])


def reading_label(sc: Scenario) -> str:
    """The reading as the run's banner shows it: ``paper``, ``paper_code``, ``paper_code + reading.KEY=V``."""
    return " + ".join([sc.semantics, *(f"reading.{k}={v}" for k, v in sorted(sc.reading.items()))])


def strategy_label(sc: Scenario) -> str:
    """The strategy as the banner, figure titles and tables name it: ``felix``, or with the components the
    scenario swapped in, ``felix[aggregator=median]`` (:attr:`~.strategies.Strategy.label`)."""
    return sc.resolve_strategy().strategy.label


def recorded_strategy_label(config: dict) -> str:
    """:func:`strategy_label` of a run from its ``config.json`` (its ``strategy.label``; the scenario's
    strategy for a file written before labels were recorded)."""
    strategy = config.get("strategy")
    label = strategy.get("label") if isinstance(strategy, dict) else None
    scenario = config.get("scenario") if isinstance(config.get("scenario"), dict) else {}
    return str(label) if isinstance(label, str) and label else str(scenario.get("strategy", ""))


def strategy_tag(sc: Scenario) -> str:
    """The strategy as a folder-name part: its name, then ``+COMPONENT-NAME`` per component swapped in
    (``felix+aggregator-median``)."""
    st = sc.resolve_strategy().strategy
    return "".join([sc.strategy, *(f"+{_safe(f'{c}={getattr(st, c)}')}" for c in st.swapped)])


def default_run_dir(sc: Scenario) -> Path:
    """``results/<name>-<strategy>-<availability>[-<reading>]-seed<k>``: a trace file by its name, not
    its path; a component swapped into the strategy after its name (``felix+aggregator-median``); the
    reading only where it is not the default."""
    regime = Path(sc.availability).name.replace(":", "_")
    tag = reading_tag(sc)
    return Path("results") / f"{sc.name}-{strategy_tag(sc)}-{regime}-{tag + '-' if tag else ''}seed{sc.seed}"


def swap_labels(base: Scenario, strategies: list[str], reference: str | None = None) -> tuple[list[str], str | None]:
    """A comparison's cell labels with the components its base scenario swaps in (``--set
    aggregator.name=median``) named where they swap one: ``felix`` becomes ``felix@aggregator.name=median``
    (the same cell: its overrides come after the base's), so its row, folder and figure line say what
    ran; a strategy whose own component it is, or a cell that names the component itself, keeps its
    label. ``reference`` is renamed with its strategy."""
    from .cells import parse_cell_strategy
    from .scenario import COMPONENT_FIELDS
    from .strategies import STRATEGIES

    names = {c: getattr(base, c)["name"] for c in COMPONENT_FIELDS if "name" in getattr(base, c)}
    if not names:
        return list(strategies), reference
    out, renamed = [], {}
    for spec in strategies:
        name, extra = parse_cell_strategy(spec)
        st = STRATEGIES.get(name)
        swaps = [f"{c}.name={new}" for c, new in names.items()
                 if st is not None and f"{c}.name" not in extra and c not in extra
                 and getattr(st, c) is not None and getattr(st, c) != new]
        renamed[spec] = spec + (((";" if "@" in spec else "@") + ";".join(swaps)) if swaps else "")
        out.append(renamed[spec])
    return out, renamed.get(reference, reference)


def default_compare_dir(base: Scenario) -> Path:
    """``results/compare-<scenario>[-<reading>]``."""
    tag = reading_tag(base)
    return Path("results") / f"compare-{base.name}{'-' + tag if tag else ''}"
