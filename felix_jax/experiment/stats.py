"""A comparison's statistics over seeds: the 95% Student t interval on the log scale
(:func:`log_interval`), the hours to the target over the seeds that reached it (:func:`hours_stats`),
a strategy seed by seed against the reference (:func:`versus_reference`) and the paired verdict over
those per-seed ratios (:func:`paired_ratio`), and every (strategy, regime) pooled over its seeds
(:func:`pool_cells`), which the tables, ``summary_pooled.csv``, the figures and ``felix-jax report``
all read. Numbers only: nothing here writes or draws."""

from __future__ import annotations

import math

import numpy as np


def t_quantile_975(df: int) -> float:
    """Student t's 0.975 quantile with ``df`` degrees of freedom (scipy, a dependency of JAX):
    the half-width factor of a two-sided 95% interval (12.706 for df 1, 4.303 for df 2)."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def log_interval(values: list[float]) -> tuple[float | None, float | None]:
    """The 95% Student t interval computed on the logs of positive ``values`` and mapped back:
    exp(mean(log x) -+ t(0.975, n-1) * std(log x, ddof=1) / sqrt(n)); (None, None) for n < 2. An
    interval for the geometric mean that is never below zero (hours, ratios)."""
    n = len(values)
    if n < 2:
        return None, None
    logs = np.log(np.asarray(values, np.float64))
    half = t_quantile_975(n - 1) * float(np.std(logs, ddof=1)) / math.sqrt(n)
    centre = float(np.mean(logs))
    return math.exp(centre - half), math.exp(centre + half)


def hours_stats(hours: list[float]) -> dict:
    """Over the hours of the seeds that reached the target: ``n``, ``mean``, ``std`` (the sample
    std, ddof=1; None for n < 2) and the 95% interval ``ci95_low`` / ``ci95_high`` computed on the
    log scale (:func:`log_interval`: never below zero hours; None for n < 2), whose centre is the
    geometric mean ``geomean``."""
    n = len(hours)
    mean = float(np.mean(hours)) if n else None
    std = float(np.std(hours, ddof=1)) if n >= 2 else None
    positive = n and min(hours) > 0
    low, high = log_interval(hours) if n >= 2 and positive else (None, None)
    geomean = math.exp(float(np.mean(np.log(hours)))) if positive else None
    return {"n": n, "mean": mean, "std": std, "ci95_low": low, "ci95_high": high, "geomean": geomean}


def paired_ratio(ratios: list[float]) -> dict | None:
    """A verdict over seeds from per-seed ratios (a strategy's hours / the reference's, seeds where both
    reached the target): ``n``, ``geomean`` (exp of the mean log ratio) and its 95% t interval on the
    log ratios, ``ci95_low`` / ``ci95_high`` (None for n < 2). None: no ratio."""
    vals = [float(r) for r in ratios if r is not None]
    if not vals:
        return None
    if min(vals) <= 0:
        raise ValueError(f"paired_ratio: ratios must be positive, got {min(vals)}")
    low, high = log_interval(vals)
    return {"n": len(vals), "geomean": math.exp(float(np.mean(np.log(vals)))), "ci95_low": low, "ci95_high": high}


def versus_reference(rows: list[dict], strategy: str, regime: str, reference: str) -> dict | None:
    """Seed by seed against ``reference`` on ``regime``, over the seeds both ran: ``ratios``, a list
    of (seed, hours / reference's hours), the ratio None where not both reached the target;
    ``ref_wins``, the seeds where the reference reached it first, or alone; ``paired``, the seeds
    both ran (a seed neither reached is no one's win). None: the reference itself, or no seed in
    common."""
    if strategy == reference:
        return None

    def hours_by_seed(st):
        return {r["seed"]: r["time_to_target_h"] for r in rows if r["strategy"] == st and r["availability"] == regime}
    mine, ref = hours_by_seed(strategy), hours_by_seed(reference)
    seeds = sorted(set(mine) & set(ref))
    if not seeds:
        return None
    ratios, wins = [], 0
    for sd in seeds:
        h, h_ref = mine[sd], ref[sd]
        both = h is not None and h_ref is not None
        ratios.append((sd, h / h_ref if both and h_ref > 0 else None))
        wins += int((h_ref is not None and h is None) or (both and h_ref < h))
    return {"ratios": ratios, "ref_wins": wins, "paired": len(seeds)}


def default_reference(strategies: list[str]) -> str | None:
    """The strategy a comparison measures the others against: ``felix`` where it ran, else the first."""
    return "felix" if "felix" in strategies else (strategies[0] if strategies else None)


def _ratio_text(x: float) -> str:
    return f"{x:.6g}"


def pool_cells(rows: list[dict], strategies: list[str], regimes: list[str],
               reference: str | None = None) -> list[dict]:
    """One row per (strategy, regime) over its seeds: how many reached the target (``reached`` =
    ``n_reached``, of ``seeds`` = ``n_seeds``), hours to it over those that did (:func:`hours_stats`:
    mean, sample std, 95% t interval), seed by seed against ``reference`` (default ``felix``, else
    the first strategy; :func:`versus_reference`: ``per_seed_ratio`` as ``SEED:RATIO;...`` over the
    seeds both reached, ``ref_wins`` as ``WINS/PAIRED``), the paired verdict over those per-seed
    ratios (:func:`paired_ratio`: ``ratio_n``, ``ratio_geomean``, ``ratio_ci95_low`` / ``_high``), GB
    train / eval / total and aggregations (means)."""
    reference = default_reference(strategies) if reference is None else reference
    pooled = []
    for rg in regimes:
        for st in strategies:
            sel = [r for r in rows if r["strategy"] == st and r["availability"] == rg]
            if not sel:
                continue
            hours = [r["time_to_target_h"] for r in sel if r["time_to_target_h"] is not None]
            stats = hours_stats(hours)
            vs = versus_reference(rows, st, rg, reference) if reference is not None else None
            pr = None if vs is None else paired_ratio([x for _, x in vs["ratios"]])
            pooled.append({
                "strategy": st, "availability": rg, "seeds": len(sel), "reached": len(hours),
                "n_reached": len(hours), "n_seeds": len(sel),
                "hours_mean": stats["mean"], "hours_std": stats["std"],
                "hours_ci95_low": stats["ci95_low"], "hours_ci95_high": stats["ci95_high"],
                "per_seed_ratio": None if vs is None else
                ";".join(f"{sd}:{_ratio_text(x)}" for sd, x in vs["ratios"] if x is not None),
                "ref_wins": None if vs is None else f"{vs['ref_wins']}/{vs['paired']}",
                "versus_reference": vs,
                "ratio_n": None if pr is None else pr["n"],
                "ratio_geomean": None if pr is None else pr["geomean"],
                "ratio_ci95_low": None if pr is None else pr["ci95_low"],
                "ratio_ci95_high": None if pr is None else pr["ci95_high"],
                "gb_train": float(np.mean([r["bytes_train"] or 0 for r in sel])) / 1e9,
                "gb_eval": float(np.mean([r["bytes_eval"] or 0 for r in sel])) / 1e9,
                "gb_total": float(np.mean([r["bytes_total"] or 0 for r in sel])) / 1e9,
                "aggregations": float(np.mean([r["aggregations"] or 0 for r in sel])),
                "final_accuracy": float(np.mean([r["final_accuracy"] or 0 for r in sel]))})
    return pooled

