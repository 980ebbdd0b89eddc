"""``felix-jax report RUN_DIR``: one run as a self-contained HTML page (``RUN_DIR/report.html``):
the summary (time to target, accuracy, bytes in the unit that fits, staleness, host time), its curves
(accuracy, bytes moved, staleness: drawn for the page), the split of the data (partition.json and
partition.png), the run's own figures and its settings (config.json). Helpers shared with the
comparison's page come from report_html.py."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .cells import regime_label
from .report_html import STYLE, _e, _img, _json_pre, _num, _read_json
from .results import read_metrics_csv, run_title
from .split import read_split, split_text
from .units import bytes_text


def run_label(config: dict) -> str:
    """``strategy | regime | seed N`` (a trace file by its name)."""
    return run_title(config)


def data_text(scenario: dict) -> str:
    """The data set, its model and how it is split: ``digits (mlp), dirichlet alpha 0.05, 12 clients``."""
    part = scenario.get("partition", "")
    alpha = f" alpha {scenario['alpha']:g}" if part in ("dirichlet", "reference", "pool") and \
        isinstance(scenario.get("alpha"), (int, float)) else ""
    return (f"{scenario.get('dataset', '?')} ({scenario.get('model', '?')}), {part}{alpha}, "
            f"{scenario.get('num_clients', '?')} clients")


def _summary_rows(summary: dict) -> list[tuple[str, str]]:
    def both(a, b, unit=""):
        return f"{_num(summary.get(a))}{unit} / {_num(summary.get(b))}{unit}"

    return [
        ("stop reason", str(summary.get("stop_reason", "-"))),
        ("time to target", f"{_num(summary.get('time_to_target_h'))} h"),
        ("final / best accuracy", both("final_accuracy", "best_accuracy")),
        ("aggregations", _num(summary.get("aggregations"))),
        ("virtual time", f"{_num((summary.get('end_time_s') or 0) / 3600)} h"),
        ("bytes total (train + eval)", f"{bytes_text(summary.get('bytes_total'))} ({bytes_text(summary.get('bytes_train'))}"
                                       f" + {bytes_text(summary.get('bytes_eval'))})"),
        ("staleness P50 / P90", both("staleness_p50", "staleness_p90")),
        ("aggregation interval P50 / P95", both("agg_interval_p50_s", "agg_interval_p95_s", " s")),
        ("clients trained", _num(summary.get("clients_trained"))),
        ("host time", f"{_num(summary.get('host_seconds'))} s"),
    ]


def _curves(folder: Path, config: dict, label: str) -> str:
    from .figures.run import run_curves_figure

    checkpoints = read_metrics_csv(folder / "metrics.csv")  # a DataFileError naming the file and line
    staleness = _read_json(folder / "distributions.json").get("staleness") or []
    with tempfile.TemporaryDirectory() as tmp:
        path = run_curves_figure(checkpoints, staleness, Path(tmp) / "curves.png", title=label,
                                 target=config.get("scenario", {}).get("target_accuracy"))
        return (f"<figure>{_img(path, 'curves')}<figcaption><b>curves</b>: test accuracy and bytes moved against "
                "virtual hours (metrics.csv), staleness of every aggregated update (distributions.json)."
                "</figcaption></figure>")


def _split(folder: Path) -> str:
    rec = read_split(folder)
    if rec is None:
        return "<p>No partition.json (a run written before the split was recorded).</p>"
    repaired = rec.get("repaired_clients") or []
    out = [f"<p id='split'>{_e(split_text(rec['summary']))}; drawn as {_e(rec.get('method', ''))} over "
           f"{_e(rec.get('num_samples'))} training samples of {_e(rec.get('num_classes'))} classes"
           + (f"; repaired clients: {_e(', '.join(map(str, repaired[:50])))}{' ...' if len(repaired) > 50 else ''}"
              if repaired else "") + ". Every client's counts: partition.csv.</p>"]
    if (folder / "partition.png").is_file():
        out.append(f"<figure>{_img(folder / 'partition.png', 'partition.png')}<figcaption><b>partition.png</b>: "
                   "samples per client, largest first, and each client's label shares in that order."
                   "</figcaption></figure>")
    return "\n".join(out)


def render_run_report(folder: str | Path) -> str:
    """The HTML page of one run folder (metrics.csv and config.json; the rest where present)."""
    folder = Path(folder)
    config = _read_json(folder / "config.json")
    summary = _read_json(folder / "summary.json")
    scenario = config.get("scenario", {})
    label = run_label(config)
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             f"<title>felix-jax run: {_e(folder.resolve().name)}</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>felix-jax run: {_e(label)}</h1>",
             f"<p class='meta'>data {_e(data_text(scenario))}; scenario {_e(scenario.get('name', ''))}; regime "
             f"{_e(regime_label(str(scenario.get('availability', ''))))}; target accuracy "
             f"{_e(scenario.get('target_accuracy', 'none'))}; written {_e(time.strftime('%Y-%m-%d %H:%M'))} from "
             f"{_e(folder.resolve())}</p>", "<h2>Summary</h2>"]
    if summary:
        parts.append("<table id='summary'><tbody>" + "".join(
            f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in _summary_rows(summary))
            + "</tbody></table>")
    else:
        parts.append("<p class='warnings'>No summary.json: the run has not finished (or was killed); the curves "
                     "are its checkpoints so far.</p>")
    parts += ["<h2>Curves</h2>", _curves(folder, config, label), "<h2>The split of the data</h2>", _split(folder),
              "<h2>The run's figures</h2>"]
    images = [n for n in ("accuracy.png", "participation.png") if (folder / n).is_file()]
    parts += [f"<figure>{_img(folder / n, n)}<figcaption><b>{_e(n)}</b></figcaption></figure>" for n in images] or \
        ["<p>None (the run was written without plots).</p>"]
    parts += ["<h2>Settings</h2>", "<p>scenario</p>", _json_pre(scenario), "<p>strategy</p>",
              _json_pre(config.get("strategy", {})), "<p>policies (as resolved)</p>", _json_pre(config.get("policies", {})),
              "<p>model</p>", _json_pre(config.get("model", {}))]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
