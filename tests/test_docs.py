"""The user-facing documentation in docs/ stays true to the code.

- every key of a run's ``summary.json`` is documented in ``docs/results.md``;
- every module path ``docs/architecture.md`` names (in backticks) exists;
- every script in ``benchmarks/`` has a row in README's benchmarks table;
- no tracked text file sends a reader to ``../shared`` (internal notes users never see),
  except lines about where the offline data lives.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _summary_keys(summary: dict) -> set[str]:
    """Top-level keys, and the keys of nested objects (``cohort.train.calls`` -> ``calls``)."""
    keys = set()
    stack = [summary]
    while stack:
        obj = stack.pop()
        for key, value in obj.items():
            keys.add(key)
            if isinstance(value, dict):
                stack.append(value)
    return keys


def test_every_summary_key_is_documented(tmp_path):
    from felix_jax.experiment.presets import get_preset
    from felix_jax.experiment.runner import run

    sc = get_preset("tiny").with_overrides({"max_aggregations": "3", "target_accuracy": "none"})
    run(sc, tmp_path / "r", plot=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    documented = set(_backticked((DOCS / "results.md").read_text()))
    missing = sorted(_summary_keys(summary) - documented)
    assert not missing, f"summary.json keys not documented (in backticks) in docs/results.md: {missing}"


def test_results_doc_lists_metric_columns():
    from felix_jax.experiment.compare import SUMMARY_COLUMNS
    from felix_jax.experiment.results import METRIC_COLUMNS

    documented = set(_backticked((DOCS / "results.md").read_text()))
    missing = sorted(set(METRIC_COLUMNS + SUMMARY_COLUMNS) - documented)
    assert not missing, f"metrics.csv / summary.csv columns not documented in docs/results.md: {missing}"


def test_architecture_paths_exist():
    text = (DOCS / "architecture.md").read_text()
    paths = sorted({p for p in _backticked(text) if "/" in p and p.endswith(".py")})
    assert paths, "docs/architecture.md names no module paths"
    missing = [p for p in paths if not (ROOT / p).is_file()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_docs_are_linked_from_readme():
    readme = (ROOT / "README.md").read_text()
    for name in ("architecture.md", "file-formats.md", "results.md", "readings.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"
        assert f"(docs/{name})" in readme, f"README.md does not link docs/{name}"


def test_every_benchmark_script_is_in_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    named = {name for row in table.splitlines() if row.startswith("| `") for name in _backticked(row.split("|")[1])}
    scripts = {p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh")}
    missing = sorted(scripts - named)
    assert not missing, f"README.md's benchmarks table lacks {missing}"
    assert not named - scripts, f"README.md's benchmarks table names scripts that do not exist: {sorted(named - scripts)}"


def _tracked_files() -> list[Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    names = {n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n}
    names |= {p.relative_to(ROOT).as_posix() for p in DOCS.glob("**/*") if p.is_file()}  # docs, tracked or not yet
    return [ROOT / n for n in sorted(names) if (ROOT / n).is_file()]


def _text_lines(path: Path) -> list[str] | None:
    """The file's lines (a notebook: its cells' sources only, no outputs); None for a binary file."""
    raw = path.read_bytes()
    if b"\0" in raw[:8192]:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
        except (ValueError, AttributeError):
            return text.splitlines()
        lines = []
        for cell in cells:
            source = cell.get("source", "")
            lines.extend("".join(source).splitlines() if isinstance(source, list) else str(source).splitlines())
        return lines
    return text.splitlines()


def test_no_pointers_to_internal_shared_notes():
    offenders = []
    for path in _tracked_files():
        if path.resolve() == Path(__file__).resolve():  # this test names what it looks for
            continue
        lines = _text_lines(path)
        if lines is None:
            continue
        for number, line in enumerate(lines, 1):
            if "../shared" in line and "data" not in line:
                offenders.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()[:120]}")
    assert not offenders, ("files point readers to ../shared (internal; users never see it): link docs/ "
                           "instead:\n" + "\n".join(offenders))
