"""A comparison's cells by name: a strategy spec (``NAME`` or a variant ``NAME@KEY=VALUE;...``), the
scenario overrides it stands for, ``--sweep`` specs crossed into variants, a regime as tables show it
and a cell's results folder (:func:`cell_dir`). Pure string work that imports nothing of the package:
the matrix (matrix.py), the tables, the figures and the variant checks all read cells through it."""

from __future__ import annotations

from pathlib import Path

AXES = {"strategy": "--strategies", "availability": "--availability", "seed": "--seeds"}  # a comparison's own


# the paper's recorded traces by the names the paper gives them (its Figs. 5-10 and Table 3): the one place
# that names them, for every table, figure title, report and log line (:func:`regime_label`)
PAPER_REGIMES = {
    "ref:syn_0": "100%",
    "ref:syn_20": "90%",  # the paper's 90% (the trace's name is historical)
    "ref:syn_50": "50%",
    "ref:mobiperf_2st": "MobiPerf",
    "ref:mobiperf_3st_50": "MobiPerf",  # the paper's MobiPerf runs (``mobiperf`` is this trace too)
    "ref:mobiperf_3st_75": "MobiPerf",
    "mobiperf": "MobiPerf",
}


def paper_regime(regime: str) -> str | None:
    """The paper's name of a regime that is one of its traces (``100%``, ``90%``, ``50%``, ``MobiPerf``),
    else None."""
    return PAPER_REGIMES.get(regime)


def regime_label(regime: str) -> str:
    """A regime as tables, figure titles, the report and log lines show it: one of the paper's traces by
    the paper's name with the trace beside it (``100% (ref:syn_0)``), a trace file by its base name, not
    its path, any other by its name."""
    paper = paper_regime(regime)
    if paper is not None:
        return f"{paper} ({regime})"
    return Path(regime).name if "/" in regime or "\\" in regime else regime


def cell_dir(out: Path, strategy: str, regime: str, seed: int) -> Path:
    """A cell's results folder in a comparison's folder ``out``: ``runs/<strategy>-<regime>-seed<k>``, one
    path component whatever the strategy's options or the regime's file path hold."""
    name = strategy.replace("@", "+").replace("=", "-").replace(";", "+")  # a variant's label too
    name = name.replace("/", "_").replace("\\", "_")  # an option's value that is a path: one folder
    if "/" in regime or "\\" in regime:  # a trace file: its name, not its path, names the folder
        regime = "file_" + Path(regime).name
    return out / "runs" / f"{name}-{regime.replace(':', '_')}-seed{seed}"


def parse_sweep(spec: str) -> tuple[str, list[str]]:
    """``--sweep KEY=v1,v2,...``: the scenario key and its values. A ``ValueError`` (one line) for no
    ``=``, an empty key, an axis the comparison owns (strategy, availability, seed), an empty value
    list or value, a value given twice, or a ``;`` / ``@`` in a value (they separate a cell's options)."""
    key, eq, text = spec.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ValueError(f"--sweep {spec!r}: expected KEY=v1,v2,... (e.g. timeout_s=30,90)")
    if key in AXES:
        raise ValueError(f"--sweep {key}=...: {key} is an axis of the comparison already; give it with {AXES[key]}")
    values = [v.strip() for v in text.split(",")]
    if not any(values):
        raise ValueError(f"--sweep {key}=: no values; give them as {key}=v1,v2,...")
    if "" in values:
        raise ValueError(f"--sweep {spec!r}: an empty value; give them as {key}=v1,v2,...")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"--sweep {key}: lists {', '.join(twice)} more than once")
    bad = [v for v in values if ";" in v or "@" in v]
    if bad:
        raise ValueError(f"--sweep {key}: value {bad[0]!r}: ';' and '@' separate a cell's options")
    return key, values


def sweep_strategies(strategies: list[str], sweeps: list[tuple[str, list[str]]]) -> list[str]:
    """Every strategy (a name or a variant ``NAME@KEY=VALUE``) crossed with each value of each swept
    key, in order: ``felix`` and ``timeout_s=30,90`` give ``felix@timeout_s=30``, ``felix@timeout_s=90``
    (a variant gains ``;timeout_s=30``; two sweeps give every combination). A ``ValueError`` for a key
    swept twice or one a variant already sets."""
    keys = [k for k, _ in sweeps]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"--sweep {twice[0]}: swept twice; give its values in one --sweep {twice[0]}=v1,v2,...")
    labels = list(strategies)
    for key, values in sweeps:
        crossed = []
        for spec in labels:
            if key in parse_cell_strategy(spec)[1]:
                raise ValueError(f"--sweep {key}: strategy {spec!r} sets {key} itself")
            crossed += [f"{spec}{';' if '@' in spec else '@'}{key}={value}" for value in values]
        labels = crossed
    return labels


def cell_overrides(spec: str) -> dict[str, str]:
    """A cell's strategy spec as scenario overrides (its variant's options and ``strategy``); a
    ``ValueError`` for a variant that sets an axis of the comparison (strategy, availability, seed)."""
    name, extra = parse_cell_strategy(spec)
    for key in extra:
        if key in AXES:
            raise ValueError(f"cell strategy {spec!r}: {key} is an axis of the comparison; give it with "
                             f"{AXES[key]}")
    return {**extra, "strategy": name}


def parse_cell_strategy(spec: str) -> tuple[str, dict[str, str]]:
    """A matrix cell's strategy: ``NAME`` or a variant ``NAME@KEY=VALUE;KEY=VALUE`` (scenario
    overrides of that cell only, e.g. ``oort-async-oracle@oracle_departure=free_slot``)."""
    name, _, rest = spec.partition("@")
    overrides = {}
    for item in filter(None, (x.strip() for x in rest.split(";"))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"cell strategy {spec!r}: expected NAME@KEY=VALUE[;KEY=VALUE]")
        overrides[key.strip()] = value.strip()
    return name.strip(), overrides
