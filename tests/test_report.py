"""``felix-jax report DIR``: one self-contained HTML page of a comparison, written by ``compare`` at
the end; rendered in headless Chromium (a screenshot, every image loaded, the table there)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.compare import cell_overrides
from tests.test_writers import finished_cell

STRATEGIES = ["felix", "fedbuff@timeout_s=30"]
BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "headless_shell", "google-chrome",
            "google-chrome-stable", "chrome")


@pytest.fixture
def comparison(tmp_path):
    """A comparison whose every cell finished earlier (written by hand), then ``felix-jax compare``
    over it: nothing trains, and compare writes its table, figures and report."""
    from felix_jax.cli import main

    out = tmp_path / "cmp"
    base = get_preset("tiny").with_overrides({"max_aggregations": "3", "target_accuracy": "0.3"})
    for label in STRATEGIES:
        for seed in (0, 1):
            sc = base.with_overrides({**cell_overrides(label), "availability": "avail50", "seed": seed})
            finished_cell(out, sc, label, [0.1, 0.2 + 0.1 * seed, 0.3 + 0.05 * seed, 0.35])
    for cell in (out / "runs").iterdir():  # every run reached the target: fedbuff's take 1.5 times felix's hours
        summary = cell / "summary.json"
        data = json.loads(summary.read_text())
        data["time_to_target_s"] = (120.0 if "seed0" in cell.name else 180.0) * (1.5 if "fedbuff" in cell.name else 1)
        data["time_to_target_h"] = data["time_to_target_s"] / 3600
        summary.write_text(json.dumps(data))
    from felix_jax.experiment.compare import write_summary_csv

    rows = [{"strategy": c.name.split("-avail50")[0].replace("+", "@").replace("timeout_s-", "timeout_s="),
             "availability": "avail50", "seed": int(c.name[-1]), "run_dir": str(c)} for c in (out / "runs").iterdir()]
    write_summary_csv(rows, out)
    assert main(["plot", str(out)]) == 0  # each cell's accuracy.png, as a run draws it
    (out / "summary.csv").unlink()
    assert main(["compare", "--scenario", "tiny", "--strategies", ",".join(STRATEGIES), "--availability", "avail50",
                 "--seeds", "0,1", "--set", "max_aggregations=3", "--set", "target_accuracy=0.3",
                 "--out", str(out), "--quiet"]) == 0
    return out


def test_compare_writes_a_self_contained_report(comparison):
    page = (comparison / "report.html").read_text()
    # nothing from elsewhere: no script, no link, every image a data URI
    assert "<script" not in page and "<link" not in page and "http://" not in page and "https://" not in page
    images = re.findall(r'<img src="([^"]{0,40})', page)
    assert len(images) >= 4 + 4 and all(src.startswith("data:image/png;base64,") for src in images)
    for name in ("accuracy.png", "bytes.png", "cdfs.png", "time_to_target.png"):
        assert f'alt="{name}"' in page
    pooled = page[page.index("<table id='pooled'>"): page.index("</table>", page.index("<table id='pooled'>"))]
    assert pooled.count("<tr") == 1 + 2  # the header, a row per strategy
    text = html.unescape(pooled)
    assert "fedbuff@timeout_s=30" in text and "2/2 (n < 3)" in text
    assert "x1.50 [1.50, 1.50] n=2" in text and "1.50, 1.50" in text  # the paired verdict, the per-seed ratios
    assert "n &lt; 3 seeds" in page  # the warning
    assert '"timeout_s": 30' in html.unescape(page)  # the variant's own option, under its strategy
    assert "<pre id='table-txt'>" in page


def test_the_pooled_verdict_and_per_seed_ratios_are_the_tables(comparison):
    """The report shows what table.txt and summary_pooled.csv say (the same pool_cells numbers)."""
    import csv

    with open(comparison / "summary_pooled.csv") as f:
        pooled = {r["strategy"]: r for r in csv.DictReader(f)}
    page = html.unescape((comparison / "report.html").read_text())
    other = pooled["fedbuff@timeout_s=30"]
    assert other["ref_wins"] in page and other["n_reached"] == "2"


def test_report_refuses_a_folder_that_is_not_a_results_folder_in_one_line(tmp_path):
    from felix_jax.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["report", str(tmp_path)])
    assert str(refused.value.code) == (f"felix-jax report: {tmp_path} is not a results folder: a run's holds "
                                       "metrics.csv and config.json, a comparison's summary.csv and runs/")


def test_report_says_a_folder_is_missing(tmp_path, comparison):
    from felix_jax.cli import main

    for argv in ([str(tmp_path / "gone")], [str(comparison), str(tmp_path / "gone")]):
        with pytest.raises(SystemExit) as refused:
            main(["report", *argv])
        assert str(refused.value.code) == f"felix-jax report: {tmp_path / 'gone'}: no such folder"


def test_the_comparison_report_names_the_data_and_reads_bytes_in_fitting_units(comparison):
    page = html.unescape((comparison / "report.html").read_text())
    meta = page[page.index("<p class='meta'>"):]
    assert meta.startswith("<p class='meta'>data digits (mlp), dirichlet alpha ")
    runs = page[page.index("<table id='runs'>"):]
    runs = runs[:runs.index("</table>")]
    assert not re.search(r"0\.0\d* GB", runs)  # no 0.000888 GB
    assert re.search(r"<td>\d[\d.]* (B|kB|MB|GB|TB)</td>", runs)
    assert "white-space: pre-wrap" in page  # table.txt wraps: its footnotes are not clipped at the right
    assert "The split of the data, per cell" in page


def test_bytes_text_by_hand():
    from felix_jax.experiment.units import byte_unit, bytes_text

    assert [bytes_text(n) for n in (0, 999, 888_000, 1_234_567, 2.5e9, 3e12, None)] == \
        ["0 B", "999 B", "888 kB", "1.23 MB", "2.5 GB", "3 TB", "-"]
    assert byte_unit(5e15) == ("TB", 1e12) and bytes_text(5e15) == "5,000 TB"


def test_an_interval_does_not_squash_the_points():
    from felix_jax.experiment.figures.comparison import interval_axis_end

    # points to 0.5 h, an n=2 interval to 2.4 h: the axis ends at 1.6 x 0.5 = 0.8 h (the interval is cut)
    assert interval_axis_end(0.5, [2.4]) == pytest.approx(0.8)
    assert interval_axis_end(0.5, [0.6]) == pytest.approx(0.618)  # a short one fits: its end x 1.03
    assert interval_axis_end(0.5, [0.3]) == pytest.approx(0.54)  # inside the points: the points' room, x 1.08
    assert interval_axis_end(0.0, []) == 1.0


@pytest.fixture
def one_run(tmp_path):
    from felix_jax.cli import main

    out = tmp_path / "run"
    assert main(["run", "--preset", "tiny", "--set", "max_aggregations=2", "--set", "num_train=300",
                 "--set", "alpha=0.05", "--quiet", "--out", str(out)]) == 0
    return out


def test_report_renders_a_single_run(one_run, capsys):
    from felix_jax.cli import main

    assert main(["report", str(one_run)]) == 0
    page = html.unescape((one_run / "report.html").read_text())
    assert "<h1>felix-jax run: fedbuff | avail100 | seed 0</h1>" in page  # strategy, regime and seed
    assert "data digits (mlp), dirichlet alpha 0.05, 12 clients" in page
    for section in ("<h2>Summary</h2>", "<h2>Curves</h2>", "<h2>The split of the data</h2>", "<h2>Settings</h2>"):
        assert section in page
    split = json.loads((one_run / "partition.json").read_text())["summary"]
    assert f"samples per client {split['min']} / {split['median']:g} / {split['max']}" in page
    assert re.search(r"bytes total \(train \+ eval\)</th><td class='l'>[\d.]+ MB", page)
    assert 'alt="partition.png"' in page and 'alt="curves"' in page and 'alt="accuracy.png"' in page
    assert "<script" not in page and "https://" not in page


def test_report_overlays_several_folders(one_run, comparison, tmp_path, capsys):
    from felix_jax.cli import main

    out = tmp_path / "both.html"
    assert main(["report", str(one_run), str(comparison), "--out", str(out)]) == 0
    page = html.unescape(out.read_text())
    n_cells = len(list((comparison / "runs").iterdir()))
    assert f"<h1>felix-jax: {1 + n_cells} runs from 2 folders</h1>" in page
    table = page[page.index("<table id='runs'>"):]
    assert table.count("<tr>") == 1 + n_cells + 1  # the header, then every run
    assert "<td class='l'>run</td><td class='l'>fedbuff | avail100 | seed 0</td>" in table
    assert page.count("<img ") == 1


def _browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = document.images;
  for (var i = 0; i < imgs.length; i++) {
    imgs[i].setAttribute('data-loaded', imgs[i].complete && imgs[i].naturalWidth > 0 ? 'yes' : 'no');
    imgs[i].removeAttribute('src');
  }
  document.body.setAttribute('data-images', String(imgs.length));
});
</script></body>"""


def _headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=120)


def _loaded(browser: str, page: str, folder: Path) -> dict[str, int]:
    """How many of the page's images loaded in the browser (``yes`` / ``no``) and how many there were:
    a copy of the page with a probe that marks each image on load, its DOM dumped."""
    probe = folder / "probe.html"
    probe.write_text(page.replace("</body>", PROBE))
    dom = _headless(browser, folder / "profile", "--dump-dom", probe.as_uri()).stdout
    marks = re.findall(r'data-loaded="(yes|no)"', dom)
    counted = re.search(r'data-images="(\d+)"', dom)
    return {"yes": marks.count("yes"), "no": marks.count("no"), "images": int(counted.group(1)) if counted else -1,
            "pooled": dom.count("id=\"pooled\"")}


def test_the_report_renders_offline_in_headless_chromium_with_every_figure(comparison, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip(f"no headless Chromium on PATH ({', '.join(BROWSERS)}): e.g. apt-get install chromium")
    page = (comparison / "report.html").read_text()
    n_images = page.count("<img ")
    shot = tmp_path / "report.png"
    done = _headless(browser, tmp_path / "profile", "--window-size=1400,3000", f"--screenshot={shot}",
                     (comparison / "report.html").as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as im:
        assert im.size == (1400, 3000)
        colors = im.convert("L").getcolors(maxcolors=1 << 16)
        assert colors is None or len(colors) > 50  # drawn: text, tables and figures, not a blank page
    loaded = _loaded(browser, page, tmp_path)
    assert loaded == {"yes": n_images, "no": 0, "images": n_images, "pooled": 1}, loaded
    # the probe does see a broken image
    broken = page.replace('src="data:image/png;base64,', 'src="data:image/png;base64,AAAA', 1)
    assert _loaded(browser, broken, tmp_path)["no"] == 1


OVERFLOW_PROBE = """<script>
window.addEventListener('load', function () {
  var wide = 0, pres = document.getElementsByTagName('pre');
  for (var i = 0; i < pres.length; i++) { if (pres[i].scrollWidth > pres[i].clientWidth + 1) wide++; }
  document.body.setAttribute('data-clipped', String(wide));
  document.body.setAttribute('data-page-wider', String(document.documentElement.scrollWidth > window.innerWidth));
});
</script></body>"""


def test_a_single_run_and_an_overlay_render_in_headless_chromium(one_run, comparison, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip(f"no headless Chromium on PATH ({', '.join(BROWSERS)}): e.g. apt-get install chromium")
    from felix_jax.experiment.report import write_report

    pages = [write_report(one_run), write_report([one_run, comparison], tmp_path / "overlay.html"),
             comparison / "report.html"]
    for page_path in pages:
        page = page_path.read_text()
        n_images = page.count("<img ")
        shot = tmp_path / f"{page_path.stem}.png"
        done = _headless(browser, tmp_path / "profile", "--window-size=1400,3000", f"--screenshot={shot}",
                         page_path.as_uri())
        assert shot.is_file(), done.stderr[-2000:]
        loaded = _loaded(browser, page, tmp_path)
        assert (loaded["yes"], loaded["no"], loaded["images"]) == (n_images, 0, n_images), (page_path, loaded)
        probe = tmp_path / "overflow.html"
        probe.write_text(page.replace("</body>", OVERFLOW_PROBE))
        dom = _headless(browser, tmp_path / "profile", "--window-size=1400,3000", "--dump-dom", probe.as_uri()).stdout
        assert 'data-clipped="0"' in dom and 'data-page-wider="false"' in dom, page_path  # no text cut off
