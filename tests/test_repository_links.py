"""The README's Colab badges and the notebooks' REPO_URL follow pyproject.toml's Repository."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("set_repository", ROOT / "notebooks" / "set_repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_agrees_with_pyproject():
    assert _load().main(["--check"]) == 0


def test_setting_the_repository_rewrites_badges_and_install_cells(tmp_path, monkeypatch):
    mod = _load()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    text = (ROOT / "pyproject.toml").read_text().replace(mod.PLACEHOLDER, "https://github.com/someone/felix-jax")
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    url = mod.repository_url(tmp_path / "pyproject.toml")
    assert url == "https://github.com/someone/felix-jax"
    assert sorted(mod.rewrite(url, check=True))  # the placeholder tree disagrees
    assert mod.rewrite(url, check=False)
    assert mod.rewrite(url, check=True) == []
    readme = (tmp_path / "README.md").read_text()
    assert "OWNER/REPO" not in readme
    assert readme.count("colab.research.google.com/github/someone/felix-jax/blob/main/notebooks/") == 6
    for path in (tmp_path / "notebooks").glob("*.ipynb"):
        src = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        assert 'REPO_URL = "https://github.com/someone/felix-jax.git"' in src, path.name


def test_a_malformed_repository_is_refused(tmp_path):
    mod = _load()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[project.urls]\nRepository = "git@github.com:a/b"\n')
    with pytest.raises(SystemExit, match="OWNER/NAME"):
        mod.repository_url(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(SystemExit, match="no Repository"):
        mod.repository_url(tmp_path / "pyproject.toml")
