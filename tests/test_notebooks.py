"""Every notebook runs top to bottom in a Jupyter kernel (nbclient) on a tiny configuration.

The kernel is this interpreter (a kernel spec written for the test points at ``sys.executable``,
so a user-wide ``python3`` kernel elsewhere cannot stand in; it needs ipykernel), it runs in a
temporary folder, and ``FELIX_JAX_NOTEBOOK_FAST=1`` asks the notebooks to shrink their runs
further. Each notebook has NOTEBOOK_TIMEOUT_S for all its cells.
"""

import json
import sys
import time
from pathlib import Path

import nbclient  # the test extra: nbclient and ipykernel
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "felix-jax-test"
NOTEBOOK_TIMEOUT_S = 240  # per notebook, all cells together (each takes well under a minute on 2 cores)


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A JUPYTER_PATH entry holding a kernel spec that runs this interpreter (and the kernels' XLA cache)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "felix-jax tests", "language": "python"}))
    return root


def test_every_notebook_is_numbered_and_has_the_colab_install_cell():
    assert [p.name[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) >= 5
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert 'if "google.colab" in sys.modules:' in code[0], path.name
        assert "pip install" in code[0], path.name
        imported = {line.split()[1].split(".")[0] for src in code for line in src.splitlines()
                    if line.startswith(("import ", "from "))}
        assert imported <= {"felix_jax", "numpy", "matplotlib", "os", "sys", "pathlib", "dataclasses", "time"}, \
            (path.name, imported)


# the quickstart runs in the default tier; the others (comparisons, throughput, streams: 20-45 s each
# on 2 cores) in the slow tier (-m slow)
@pytest.mark.parametrize("path", [p if p.name.startswith("00_") else pytest.param(p, marks=pytest.mark.slow)
                                  for p in NOTEBOOKS], ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, kernel_dir, tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    monkeypatch.setenv("FELIX_JAX_NOTEBOOK_FAST", "1")
    if path.name == "01_paper_figures.ipynb":
        # a clean machine: no data folder, an empty cache; the only data is what the data cell fetches, here a
        # small archive in the canonical CIFAR-10 layout served from a local file with its own checksum
        from tests.test_data_fetch import cifar_binary_archive

        elsewhere = tmp_path_factory.mktemp("nb-data")
        archive = elsewhere / "cifar-10-binary.tar.gz"
        monkeypatch.setenv("FELIX_JAX_NOTEBOOK_CIFAR10_SHA256", cifar_binary_archive(archive, train_per_batch=240))
        monkeypatch.setenv("FELIX_JAX_NOTEBOOK_CIFAR10", str(archive))
        monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
        monkeypatch.setenv("FELIX_JAX_CACHE", str(elsewhere / "cache"))
    # runs in a notebook compile the same shapes again (a fresh engine each): share them
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(kernel_dir / "xla-cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, resources={"metadata": {"path": str(tmp_path)}})
    deadline = time.monotonic() + NOTEBOOK_TIMEOUT_S
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            # the notebook's budget, spent cell by cell (nbclient's timeout is per cell)
            client.timeout = max(1, int(deadline - time.monotonic()))
            client.execute_cell(cell, index)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # what a notebook writes goes under results/ (beside notebooks/ in a checkout), never beside the notebook
    stray = sorted(p.name for p in tmp_path.iterdir() if p.name != "results")
    assert not stray, f"{path.name} wrote {stray} outside results/"
    if path.name == "01_paper_figures.ipynb":  # a comparison's tables, as felix-jax compare writes them
        out = tmp_path / "results" / "01_paper_figures"
        assert (out / "table.txt").is_file() and (out / "summary_pooled.csv").is_file()
        printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert "n_reached" in printed and "per-seed x ref" in printed  # the pooled table is shown
