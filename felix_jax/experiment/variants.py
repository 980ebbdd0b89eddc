"""Cells of a comparison that ran identically: a swept or ``@`` option, a swapped component, or a
whole strategy or setting that changed nothing.

Two cells of a comparison ran identically when, seed by seed over the same seeds, their
``metrics.csv`` and the dispatches of their ``events.csv`` (time, client, kind, model version) are
byte for byte the same: what sets them apart decided nothing there (docs/results.md, "Variants that
ran identically"). Any two cells count: variants of one strategy (``felix@timeout_s=30`` and
``felix@timeout_s=90``, or ``felix@aggregator.name=trimmed-mean`` and ``felix@aggregator.name=median``,
both the plain mean at K=2), two strategies (``fedbuff`` and ``fedbuff-tiertrack`` where no client
ever leaves), or one strategy at two values of a swept setting. :func:`identical_variant_warnings`
gives one line per such group, naming the option where the cells are variants of one strategy, for
``table.txt`` and the terminal.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

from .cells import parse_cell_strategy, regime_label


def run_fingerprint(run_dir: str | Path) -> str | None:
    """sha256 over a run folder's ``metrics.csv`` and its dispatch rows (``events.csv``: time, client,
    kind, version); None when ``metrics.csv`` cannot be read. A folder without ``events.csv`` is
    fingerprinted by its metrics alone."""
    run_dir = Path(run_dir)
    digest = hashlib.sha256()
    try:
        digest.update((run_dir / "metrics.csv").read_bytes())
    except OSError:
        return None
    try:
        with open(run_dir / "events.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row.get("event") == "dispatch":
                    digest.update(f"{row['time_s']},{row['client']},{row['kind']},{row['version']}\n".encode())
    except (OSError, KeyError, csv.Error):
        pass
    return digest.hexdigest()


def _differing_options(labels: list[str]) -> list[str]:
    """The option keys whose values are not the same in all of ``labels`` (a key one label lacks
    counts: ``felix`` and ``felix@timeout_s=90`` differ in ``timeout_s``)."""
    options = [parse_cell_strategy(label)[1] for label in labels]
    keys = list(dict.fromkeys(k for opts in options for k in opts))
    return [k for k in keys if len({opts.get(k) for opts in options}) > 1]


def identical_variants(rows: list[dict], strategies: list[str], regimes: list[str]) -> list[dict]:
    """Groups of two or more cells of the comparison that ran identically, seed by seed over the same
    seeds: ``{"kind", "labels", "options", "regimes", "seeds", "cells"}``. Kind ``"tie"``: strategies
    that ran identically on one regime, one entry over every regime where they tie so (``regimes``);
    kind ``"across"``: one run on several regimes (one strategy at two values of a swept setting, or
    several), its ``cells`` (strategy, regime) as found. ``options`` are the ``@`` options that differ
    when the labels are variants of one strategy (else empty). Cells without a
    readable ``metrics.csv`` are left out."""
    fingerprints: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        fp = run_fingerprint(r["run_dir"]) if r.get("run_dir") else None
        if fp is not None:
            fingerprints.setdefault((r["strategy"], r["availability"]), {})[r["seed"]] = fp
    by_run: dict[tuple, list[tuple[str, str]]] = {}
    for rg in regimes:
        for st in strategies:
            if (st, rg) in fingerprints:
                by_run.setdefault(tuple(sorted(fingerprints[st, rg].items())), []).append((st, rg))
    found: dict[tuple, dict] = {}
    for run, cells in by_run.items():
        if len(cells) < 2:
            continue
        seeds = [s for s, _ in run]
        labels = list(dict.fromkeys(st for st, _ in cells))
        cell_regimes = list(dict.fromkeys(rg for _, rg in cells))
        one_strategy = len({parse_cell_strategy(st)[0] for st in labels}) == 1
        options = _differing_options(labels) if one_strategy and len(labels) > 1 else []
        if len(cell_regimes) == 1:  # strategies tied on one regime: one entry over the regimes they tie on
            group = found.setdefault(("tie", tuple(labels), tuple(seeds)),
                                     {"kind": "tie", "labels": labels, "options": options, "regimes": [],
                                      "seeds": seeds, "cells": []})
            group["regimes"].append(cell_regimes[0])
            group["cells"] += cells
        else:
            found[("across", tuple(cells), tuple(seeds))] = {
                "kind": "across", "labels": labels, "options": options, "regimes": cell_regimes, "seeds": seeds,
                "cells": cells}
    return list(found.values())


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def identical_variant_warnings(rows: list[dict], strategies: list[str], regimes: list[str]) -> list[str]:
    """One ``warning:`` line per group of :func:`identical_variants`, saying what changed nothing:
    ``warning: felix@timeout_s=30 and felix@timeout_s=90 ran identically on avail50 (seed 0: the same
    metrics.csv and dispatches): timeout_s changed nothing there; docs/results.md ...``; for other
    strategies, what sets them apart; for one strategy on several regimes (or sweep values of the
    setting), what sets those apart."""
    lines = []
    for g in identical_variants(rows, strategies, regimes):
        seeds = g["seeds"]
        seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {','.join(map(str, seeds))}"
        shown = [regime_label(rg) for rg in g["regimes"]]
        if g["kind"] == "tie":
            what = f"{_and(g['labels'])} ran identically on {_and(shown)}"
            why = (f"{_and(g['options'])} changed nothing there" if g["options"] else
                   "what sets these strategies apart decided nothing there")
        elif len(g["labels"]) == 1:  # one strategy, several regimes or values of a swept setting
            what = f"{g['labels'][0]} ran identically on {_and(shown)}"
            why = f"what sets {_and(shown)} apart decided nothing there"
        else:
            what = f"{_and([f'{st} on {regime_label(rg)}' for st, rg in g['cells']])} ran identically"
            why = "what sets these cells apart decided nothing there"
        lines.append(f"warning: {what} ({seed_text}: the same metrics.csv and dispatches): {why} "
                     f"(docs/results.md, \"Variants that ran identically\")")
    return lines
