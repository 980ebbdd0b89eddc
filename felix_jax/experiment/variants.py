"""Variants of one strategy that ran identically: a swept or ``@`` option that changed nothing.

Two cells of a comparison whose strategy labels share a name and differ only in their options
(``felix@timeout_s=30`` and ``felix@timeout_s=90``, or ``felix`` and ``felix@timeout_s=90``) ran
identically on a regime when, seed by seed, their ``metrics.csv`` and the dispatches of their
``events.csv`` (time, client, kind, model version) are byte for byte the same: the option decided
nothing there (docs/results.md, "Variants that ran identically"). :func:`identical_variant_warnings`
gives one line per such group, naming the option, for ``table.txt`` and the terminal.
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
    """Groups of two or more variants of one strategy that ran identically on a regime, seed by seed
    over the same seeds: ``{"labels", "options", "regimes", "seeds"}`` (a group identical on several
    regimes is one entry). Cells without a readable ``metrics.csv`` are left out."""
    fingerprints: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        fp = run_fingerprint(r["run_dir"]) if r.get("run_dir") else None
        if fp is not None:
            fingerprints.setdefault((r["strategy"], r["availability"]), {})[r["seed"]] = fp
    found: dict[tuple, dict] = {}
    names = list(dict.fromkeys(parse_cell_strategy(st)[0] for st in strategies))
    for rg in regimes:
        for name in names:
            variants = [st for st in strategies if parse_cell_strategy(st)[0] == name and (st, rg) in fingerprints]
            by_run: dict[tuple, list[str]] = {}
            for st in variants:
                by_run.setdefault(tuple(sorted(fingerprints[st, rg].items())), []).append(st)
            for run, labels in by_run.items():
                if len(labels) < 2:
                    continue
                options = _differing_options(labels)
                if not options:
                    continue
                group = found.setdefault((tuple(labels), tuple(s for s, _ in run)),
                                         {"labels": labels, "options": options, "regimes": [],
                                          "seeds": [s for s, _ in run]})
                group["regimes"].append(rg)
    return list(found.values())


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def identical_variant_warnings(rows: list[dict], strategies: list[str], regimes: list[str]) -> list[str]:
    """One ``warning:`` line per group of :func:`identical_variants`, naming the options that changed
    nothing: ``warning: felix@timeout_s=30 and felix@timeout_s=90 ran identically on avail50 (seed 0:
    the same metrics.csv and dispatches): timeout_s changed nothing there; docs/results.md ...``."""
    lines = []
    for g in identical_variants(rows, strategies, regimes):
        seeds = g["seeds"]
        seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {','.join(map(str, seeds))}"
        options = _and(g["options"])
        lines.append(f"warning: {_and(g['labels'])} ran identically on "
                     f"{_and([regime_label(rg) for rg in g['regimes']])} ({seed_text}: the same metrics.csv and "
                     f"dispatches): {options} changed nothing there (docs/results.md, \"Variants that ran "
                     f"identically\")")
    return lines
