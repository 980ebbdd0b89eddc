"""A comparison's view for its tables, figures and report: a sweep over a field of the scenario's world
becomes an axis like the regime, and the reference strategy is chosen once.

``--sweep KEY=v1,v2`` crosses every strategy with each value. Over a strategy's own knob (the fleet and
policy options of :data:`VARIANT_FIELDS`, e.g. ``timeout_s``, ``concurrency``, ``selector.KEY``) each
value makes a variant of each strategy, a strategy of its own in the table (``felix@timeout_s=30``), so
that variants of one strategy can be told apart. Over any other field (the data, the population, the
learner, the stop rule: ``alpha``, ``num_clients``, ``dataset``, ``learning_rate``...) the value is part
of the setting the strategies are compared in: the cells ``fedbuff@alpha=1.0`` become strategy
``fedbuff`` on regime ``avail50 alpha=1.0``, so each value has its own reference cell, its own paired
ratios and its own panel, as an availability regime does. ``comparison.json`` in the comparison's
folder records the axis keys and the reference, so that ``felix-jax report`` and ``felix-jax plot``
redraw the same view.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .cells import parse_cell_strategy
from .stats import default_reference

# the fleet's and the policies' knobs: a sweep over one of these makes variants of each strategy
VARIANT_FIELDS = frozenset({
    "concurrency", "aggregation_goal", "overcommit", "server_optimizer", "timeout_s", "timeout_frees_slot",
    "oracle_departure", "interruption", "utility_from", "semantics", "reading", "selector", "eval_selector",
    "aggregator", "update_guard", "plugins"})
COMPARISON_FILE = "comparison.json"


def axis_keys(sweep_keys: list[str]) -> list[str]:
    """The swept keys that become an axis of the comparison (those not in :data:`VARIANT_FIELDS`;
    ``selector.KEY`` counts as ``selector``)."""
    return [k for k in sweep_keys if k.split(".")[0] not in VARIANT_FIELDS]


def split_label(label: str, keys: list[str]) -> tuple[str, str]:
    """A cell's strategy label without its options of ``keys``, and those options as the regime's
    suffix: ``fedbuff@alpha=1.0;timeout_s=30`` with ``["alpha"]`` gives ``("fedbuff@timeout_s=30",
    "alpha=1.0")``."""
    name, options = parse_cell_strategy(label)
    rest = ";".join(f"{k}={v}" for k, v in options.items() if k not in keys)
    axis = " ".join(f"{k}={options[k]}" for k in keys if k in options)
    return (f"{name}@{rest}" if rest else name), axis


@dataclasses.dataclass
class ComparisonView:
    rows: list[dict]
    strategies: list[str]
    regimes: list[str]
    reference: str
    axis_keys: list[str]


def check_reference(strategies: list[str], keys: list[str], reference: str | None) -> str:
    """The reference among the view's strategies (``strategies``: the cells' labels); a ValueError
    (one line) naming them when ``reference`` is not one."""
    shown = list(dict.fromkeys(split_label(s, keys)[0] for s in strategies))
    if reference is None:
        return default_reference(shown)
    if reference not in shown:
        raise ValueError(f"--reference {reference}: not a strategy of this comparison (its strategies: "
                         f"{', '.join(shown)})")
    return reference


def comparison_view(rows: list[dict], strategies: list[str], regimes: list[str], keys: list[str],
                    reference: str | None = None) -> ComparisonView:
    """``rows`` (a row per run, as :func:`~felix_jax.experiment.matrix.run_matrix` returns them) with the
    options of ``keys`` moved from each strategy label to its regime (``avail50 alpha=0.05``)."""
    reference = check_reference(strategies, keys, reference)
    if not keys:
        return ComparisonView(rows, strategies, regimes, reference, [])
    out, shown, suffixes = [], [], []
    for r in rows:
        label, axis = split_label(r["strategy"], keys)
        out.append({**r, "strategy": label, "availability": f"{r['availability']} {axis}".strip(),
                    "cell_strategy": r["strategy"]})
        shown.append(label)
        suffixes.append(axis)
    order = list(dict.fromkeys(split_label(s, keys)[0] for s in strategies))
    axis_values = list(dict.fromkeys(split_label(s, keys)[1] for s in strategies))
    view_regimes = [f"{rg} {a}".strip() for rg in regimes for a in axis_values]
    seen = {r["availability"] for r in out}
    return ComparisonView(out, order, [rg for rg in view_regimes if rg in seen], reference, list(keys))


def write_comparison_json(out: Path, view: ComparisonView) -> Path:
    path = Path(out) / COMPARISON_FILE
    path.write_text(json.dumps({"reference": view.reference, "axis_keys": view.axis_keys}, indent=2))
    return path


def read_view(folder: Path, rows: list[dict]) -> ComparisonView:
    """The view ``comparison.json`` records for ``rows`` (read from the folder's summary.csv); a folder
    written before the file existed: no axis, the default reference."""
    try:
        rec = json.loads((Path(folder) / COMPARISON_FILE).read_text())
    except (OSError, ValueError):
        rec = {}
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    regimes = list(dict.fromkeys(r["availability"] for r in rows))
    keys = [k for k in rec.get("axis_keys", []) if isinstance(k, str)]
    reference = rec.get("reference")
    try:
        return comparison_view(rows, strategies, regimes, keys, reference)
    except ValueError:  # a recorded reference that is no longer there: the default
        return comparison_view(rows, strategies, regimes, keys, None)
