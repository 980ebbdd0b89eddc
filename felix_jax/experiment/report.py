"""``felix-jax report DIR``: a comparison as one self-contained HTML page (``DIR/report.html``).

The page needs nothing but itself (no script, no style sheet, no font or image from elsewhere:
every figure is embedded as a PNG data URI), so it opens offline, attaches to a mail and can be
checked in. It holds, from the comparison's files (``summary.csv``, ``table.txt``, the figures and
each cell's ``config.json`` / ``summary.json``):

* the warnings: a cell of fewer than 3 seeds (:func:`~.tables.few_seeds_warning`), the table's
  own warning lines, cells that stopped other than at a cap or the target (stalled, diverged,
  interrupted, out of wall budget), strategies no seed of which reached the target on a regime,
  cells folders or figures that are missing;
* the pooled table (``summary_pooled.csv``'s statistics: hours to target over the seeds that reached
  it with the sample std and the 95% t interval, the paired verdict against the reference with its
  interval, the reference's wins and each seed's ratio), then every run's row;
* every comparison figure, and each cell's own figures (folded);
* the scenario the cells share, the axes, and each strategy's resolved options (its config.json's
  ``strategy`` and ``policies`` sections, and the scenario keys its cells set otherwise);
* ``table.txt`` as written, with its footnotes on how each number is computed.

* each cell's split of the data (its ``partition.json``: samples per client, top-class share,
  repaired clients);

``felix-jax compare`` writes it at the end; ``felix-jax report DIR`` writes it again. A run folder
gets its own page (report_run.py), several folders one overlaid page (report_overlay.py): see
:func:`write_report`. Bytes read in the unit that fits them (units.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .cells import regime_label
from .figures.comparison import FIGURES
from .stats import pool_cells
from .split import split_rows
from .tables import FEW_SEEDS, few_seeds_warning, paired_text, per_seed_text, rows_from_summary_csv, sig
from .units import bytes_text
from .report_html import (STYLE, ReportError, _e, _img, _json_pre, _num, _read_json, is_compare_folder,  # noqa: F401
                          is_run_folder)

REPORT_FILE = "report.html"
AXES = ("strategy", "availability", "seed")
CAP_STOPS = ("target", "max_aggregations", "max_virtual_s")
FIGURE_CAPTIONS = {
    "accuracy.png": "Test accuracy against virtual hours per regime: the mean over seeds, the band from the lowest "
                    "to the highest seed, the target dashed.",
    "bytes.png": "Bytes moved per strategy (mean over seeds), training and eval stacked.",
    "cdfs.png": "Staleness at aggregation, utility age at a train pick, and aggregation weight relative to the "
                "strategy's mean weight: CDFs per regime.",
    "time_to_target.png": "Virtual hours to the target seed by seed (filled: reached; open: the run's end), the "
                          "geometric mean with its 95% t interval, and below each strategy's paired verdict against "
                          "the reference.",
    "speedup_vs_target.png": "Each baseline's hours over the reference's, paired by seed, at every target accuracy "
                             "from the first level above the untrained model's to the highest the reference "
                             "reached (the paper's rule on each run's curve): geometric mean, 95% t band, hollow "
                             "where not every seed of both reached the level; speedup_vs_target.csv has the numbers.",
}


def _warnings(folder: Path, rows: list[dict], pooled: list[dict], strategies, regimes, figures) -> list[str]:
    found = []
    few = few_seeds_warning(pooled)
    if few:
        found.append(few.removeprefix("warning: "))
    table = folder / "table.txt"
    if table.is_file():
        for line in table.read_text().splitlines():
            text = line.strip()
            if text.lower().startswith("warning") and text.removeprefix("warning: ") not in found:
                found.append(text.removeprefix("warning: "))
    stopped = [r for r in rows if r.get("stop_reason") not in CAP_STOPS]
    for r in stopped:
        found.append(f"{r['strategy']} on {regime_label(r['availability'])}, seed {r['seed']}: stopped "
                     f"{r.get('stop_reason') or '(no stop reason)'}, not at the target or a cap")
    for p in pooled:
        if p["n_reached"] == 0:
            found.append(f"{p['strategy']} on {regime_label(p['availability'])}: no seed reached the target "
                         f"(of {p['n_seeds']} run)")
    missing = [r for r in rows if not Path(r["run_dir"]).is_dir()]
    if missing:
        found.append(f"{len(missing)} cell folder{'s are' if len(missing) > 1 else ' is'} missing under "
                     f"{folder / 'runs'} (e.g. {Path(missing[0]['run_dir']).name}): their figures and settings "
                     "are left out")
    absent = [name for name in FIGURES if name not in figures and name != "time_to_target.png"]
    if absent:
        found.append(f"figure{'s' if len(absent) > 1 else ''} {', '.join(absent)} not found (felix-jax plot "
                     f"{folder} draws them)")
    return found


def _pooled_table(pooled: list[dict], reference: str) -> str:
    head = ("regime", "strategy", "n reached / seeds", "mean h", "std h", "95% CI h (log scale)",
            f"paired x {reference} [95% CI]", f"{reference} wins", f"per-seed x {reference}", "bytes (train + eval)",
            "final accuracy (mean)", "aggregations (mean)")
    out = ["<table id='pooled'><thead><tr>" + "".join(
        f"<th class='l'>{_e(h)}</th>" if i < 2 else f"<th>{_e(h)}</th>" for i, h in enumerate(head))
        + "</tr></thead><tbody>"]
    for p in pooled:
        ci = ("-" if p["hours_ci95_low"] is None else
              f"[{sig(p['hours_ci95_low'])}, {sig(p['hours_ci95_high'])}]")
        few = " (n &lt; 3)" if p["n_seeds"] < FEW_SEEDS else ""
        cls = " class='ref'" if p["strategy"] == reference else ""
        cells = [f"<td class='l'>{_e(regime_label(p['availability']))}</td>", f"<td class='l'>{_e(p['strategy'])}</td>",
                 f"<td>{p['n_reached']}/{p['n_seeds']}{few}</td>", f"<td>{_num(p['hours_mean'])}</td>",
                 f"<td>{_num(p['hours_std'])}</td>", f"<td>{_e(ci)}</td>",
                 f"<td>{_e(paired_text(p) if p['strategy'] != reference else 'reference')}</td>",
                 f"<td>{_e(p['ref_wins'] or '-')}</td>", f"<td>{_e(per_seed_text(p['versus_reference']))}</td>",
                 f"<td>{_e(_gb_text(p['gb_total']))} ({_e(_gb_text(p['gb_train']))} + "
                 f"{_e(_gb_text(p['gb_eval']))})</td>",
                 f"<td>{_num(p['final_accuracy'])}</td>", f"<td>{_num(p['aggregations'])}</td>"]
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _gb_text(gb: float | None) -> str:
    return bytes_text(None if gb is None else gb * 1e9)


def _runs_table(rows: list[dict]) -> str:
    head = ("strategy", "regime", "seed", "hours to target", "final accuracy", "best accuracy", "aggregations",
            "bytes total", "staleness P50", "stop reason", "host s")
    out = ["<table id='runs'><thead><tr>" + "".join(
        f"<th class='l'>{_e(h)}</th>" if i < 2 or h == "stop reason" else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)) + "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join((
            f"<td class='l'>{_e(r['strategy'])}</td>", f"<td class='l'>{_e(regime_label(r['availability']))}</td>",
            f"<td>{_e(r['seed'])}</td>", f"<td>{_num(r.get('time_to_target_h'))}</td>",
            f"<td>{_num(r.get('final_accuracy'))}</td>", f"<td>{_num(r.get('best_accuracy'))}</td>",
            f"<td>{_num(r.get('aggregations'))}</td>", f"<td>{_e(bytes_text(r.get('bytes_total')))}</td>", f"<td>{_num(r.get('staleness_p50'))}</td>",
            f"<td class='l'>{_e(r.get('stop_reason'))}</td>", f"<td>{_num(r.get('host_seconds'))}</td>")) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _settings(rows: list[dict], strategies: list[str]) -> str:
    configs = {}
    for r in rows:
        config = _read_json(Path(r["run_dir"]) / "config.json")
        if config:
            configs.setdefault(r["strategy"], []).append(config)
    if not configs:
        return "<p>No cell's config.json could be read.</p>"
    scenarios = [c.get("scenario", {}) for cs in configs.values() for c in cs]
    keys = list(dict.fromkeys(k for sc in scenarios for k in sc))
    shared = {k: scenarios[0].get(k) for k in keys if k not in AXES
              and all(json.dumps(sc.get(k), sort_keys=True, default=str)
                      == json.dumps(scenarios[0].get(k), sort_keys=True, default=str) for sc in scenarios)}
    axes = {k: list(dict.fromkeys(json.dumps(sc.get(k), default=str) for sc in scenarios)) for k in AXES}
    out = ["<h3>The scenario every cell shares</h3>", "<table id='scenario'><tbody>"]
    for k, v in shared.items():
        shown = v if isinstance(v, str) else json.dumps(v, default=str)
        out.append(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(shown)}</td></tr>")
    out.append("</tbody></table>")
    out.append("<p>Axes of the comparison: " + "; ".join(
        f"<b>{_e(k)}</b> " + ", ".join(_e(json.loads(v)) for v in vals) for k, vals in axes.items()) + "</p>")
    out.append("<h3>Each strategy's resolved options</h3>")
    for st in strategies:
        if st not in configs:
            continue
        config = configs[st][0]
        own = {k: v for k, v in config.get("scenario", {}).items() if k not in AXES and k not in shared}
        out.append(f"<details open><summary><b>{_e(st)}</b></summary>")
        if own:
            out.append("<p>Scenario keys its cells set otherwise:</p>" + _json_pre(own))
        out.append("<p>strategy</p>" + _json_pre(config.get("strategy", {})))
        out.append("<p>policies (selector, eval selector, aggregator options as resolved)</p>"
                   + _json_pre(config.get("policies", {})))
        out.append("</details>")
    return "\n".join(out)


def _split_table(rows: list[dict]) -> str:
    cells = split_rows(rows)
    if not cells:
        return "<p>No cell has a partition.json (cells written before the split was recorded).</p>"
    head = ("strategy", "regime", "seed", "clients", "samples min / median / max", "mean top-class share",
            "with one sample", "repaired", "drawn as")
    out = ["<table id='split'><thead><tr>" + "".join(
        f"<th class='l'>{_e(h)}</th>" if i < 2 or i == len(head) - 1 else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)) + "</tr></thead><tbody>"]
    for c in cells:
        out.append("<tr>" + "".join((
            f"<td class='l'>{_e(c['strategy'])}</td>", f"<td class='l'>{_e(regime_label(c['availability']))}</td>",
            f"<td>{_e(c['seed'])}</td>", f"<td>{_num(c['num_clients'])}</td>",
            f"<td>{_num(c['min'])} / {_num(c['median'])} / {_num(c['max'])}</td>",
            f"<td>{_num(c['mean_top_class_share'])}</td>", f"<td>{_num(c['clients_with_one_sample'])}</td>",
            f"<td>{_num(c['repaired_clients'])}</td>", f"<td class='l'>{_e(c['method'])}</td>")) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _cell_figures(rows: list[dict]) -> str:
    out = []
    for r in rows:
        run_dir = Path(r["run_dir"])
        images = [n for n in ("accuracy.png", "participation.png", "partition.png") if (run_dir / n).is_file()]
        if not images:
            continue
        label = f"{r['strategy']} | {regime_label(r['availability'])} | seed {r['seed']}"
        out.append(f"<details><summary>{_e(label)}</summary><div class='cells'>"
                   + "".join(_img(run_dir / n, f"{label}: {n}") for n in images) + "</div></details>")
    return "\n".join(out) if out else "<p>No cell figures (the cells ran without plots).</p>"


def render_report(folder: str | Path) -> str:
    """The report's HTML for a comparison folder (see the module docstring), or a run folder's page
    (report_run.py); a ReportError (one line) for a folder that is neither or does not exist."""
    folder = Path(folder)
    from .report_html import is_run_folder, not_a_results_folder
    from .report_run import render_run_report

    if not is_compare_folder(folder):
        if is_run_folder(folder):
            return render_run_report(folder)
        raise ReportError(not_a_results_folder(folder))
    rows = rows_from_summary_csv(folder)
    if not rows:
        raise ReportError(f"{folder}/summary.csv holds no runs")
    from .sweep_axes import read_view

    view = read_view(folder, rows)  # a swept field of the scenario's world as an axis, the reference compare used
    rows, strategies, regimes, reference = view.rows, view.strategies, view.regimes, view.reference
    pooled = pool_cells(rows, strategies, regimes, reference)
    figures = [n for n in FIGURES if (folder / n).is_file()]
    figures += sorted(p.name for p in folder.glob("*.png") if p.name not in figures)
    warnings = _warnings(folder, rows, pooled, strategies, regimes, figures)
    seeds = sorted({r["seed"] for r in rows})
    target = next((c.get("scenario", {}).get("target_accuracy") for c in
                   (_read_json(Path(r["run_dir"]) / "config.json") for r in rows) if c), None)
    scenario = rows[0].get("scenario") or ""
    from .report_run import data_text

    datas = list(dict.fromkeys(data_text(c.get("scenario", {})) for c in
                               (_read_json(Path(r["run_dir"]) / "config.json") for r in rows) if c))
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             f"<title>felix-jax comparison: {_e(folder.resolve().name)}</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>felix-jax comparison: {_e(folder.resolve().name)}</h1>",
             f"<p class='meta'>data {_e('; '.join(datas) or '(no cell config.json)')}; "
             f"scenario {_e(scenario)}; {len(strategies)} strateg{'ies' if len(strategies) > 1 else 'y'}"
             f" x {len(regimes)} regime{'s' if len(regimes) > 1 else ''} x seeds {_e(', '.join(map(str, seeds)))} "
             f"({len(rows)} runs); target accuracy {_e(target if target is not None else 'none')}; reference "
             f"{_e(reference)}; written {_e(time.strftime('%Y-%m-%d %H:%M'))} from {_e(folder.resolve())}</p>"]
    parts.append("<h2>Warnings</h2>")
    if warnings:
        parts.append("<ul class='warnings' id='warnings'>" + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")
    else:
        parts.append("<p class='ok' id='warnings'>None: every cell ran 3 seeds or more and stopped at the target or "
                     "a cap.</p>")
    parts += ["<h2>Time to target, pooled over seeds</h2>",
              "<p>Hours are virtual, over the seeds that reached the target (n); the interval is the 95% Student t "
              "interval on the log scale; the paired verdict is the geometric mean of the per-seed ratios to the "
              f"reference ({_e(reference)}) with the t interval of their logs (&gt; 1: the reference is faster). "
              "Statistics as in docs/results.md, \"Statistics over seeds\".</p>",
              _pooled_table(pooled, reference), "<h2>Every run</h2>", _runs_table(rows), "<h2>Figures</h2>"]
    for name in figures:
        parts.append(f"<figure>{_img(folder / name, name)}<figcaption><b>{_e(name)}</b>: "
                     f"{_e(FIGURE_CAPTIONS.get(name, ''))}</figcaption></figure>")
    parts += ["<h2>The split of the data, per cell</h2>", _split_table(rows), "<h2>Each run's figures</h2>",
              _cell_figures(rows), "<h2>Settings</h2>", _settings(rows, strategies)]
    table = folder / "table.txt"
    if table.is_file():
        parts += ["<h2>table.txt</h2>", f"<pre id='table-txt'>{_e(table.read_text())}</pre>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(folder: str | Path | list, out: str | Path | None = None) -> Path:
    """Writes :func:`render_report` to ``out`` (default ``folder/report.html``, replaced atomically).
    ``folder`` a list of several folders (runs or comparisons): their overlay (report_overlay.py), by
    default ``overlay-report.html`` in the current folder."""
    if isinstance(folder, (list, tuple)):
        from .report_overlay import OVERLAY_FILE, render_overlay_report

        if len(folder) == 1:
            folder = folder[0]
        else:
            missing = [Path(f) for f in folder if not Path(f).is_dir()]
            if missing:
                from .report_html import not_a_results_folder

                raise ReportError(not_a_results_folder(missing[0]))
            path = Path(out) if out is not None else Path(OVERLAY_FILE)
            text = render_overlay_report(list(folder))
            return _replace(path, text)
    folder = Path(folder)
    path = Path(out) if out is not None else folder / REPORT_FILE
    return _replace(path, render_report(folder))


def is_report_file(path: Path) -> bool:
    """Whether ``path`` holds a page felix-jax wrote (a comparison's, a run's or an overlay: each opens
    with the same doctype and a ``felix-jax`` title)."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"<!DOCTYPE html>") and b"<title>felix-jax" in head


def check_report_path(path: Path) -> None:
    """A ReportError (one line) unless ``path`` may take a report: never a folder, never an existing file
    that is not a report felix-jax wrote, and inside a results folder (a run's or a comparison's) only an
    ``.html`` name, so that no result file (metrics.csv, summary.csv, a figure) is ever replaced by a page."""
    if path.is_dir():
        raise ReportError(f"--out {path}: is a folder; name the page's file (e.g. {path / REPORT_FILE})")
    if path.exists() and not is_report_file(path):
        raise ReportError(f"--out {path}: the file exists and is not a report felix-jax wrote; report replaces only "
                          "its own pages: give --out another file name")
    folder = path.parent
    if path.suffix.lower() not in (".html", ".htm") and (is_run_folder(folder) or is_compare_folder(folder)):
        raise ReportError(f"--out {path}: inside the results folder {folder}, a report's name must end in .html "
                          f"(e.g. {folder / REPORT_FILE}): the folder's own files are never replaced")


def _replace(path: Path, text: str) -> Path:
    check_report_path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
