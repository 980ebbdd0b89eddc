"""The worked model plugin runs from the docs as written: docs/file-formats.md holds
examples/my_models.py verbatim, its commands run (the runs cut to two aggregations), and
``run --list --set plugins=FILE`` names what a plugin registers."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from felix_jax.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_models.py"
DOC = ROOT / "docs" / "file-formats.md"


def doc_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_docs_hold_the_example_verbatim():
    assert EXAMPLE.read_text() in doc_blocks("python")


def doc_commands() -> list[list[str]]:
    block = next(b for b in doc_blocks("bash") if "examples/my_models.py" in b)
    return [shlex.split(line.split("  #")[0])[1:] for line in block.splitlines() if line.startswith("felix-jax ")]


def test_the_docs_commands_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the paths as the docs write them, from the checkout
    commands = doc_commands()
    assert [c[0] for c in commands] == ["run", "run", "run"] and "--list" in commands[0]
    assert main(commands[0]) == 0
    listing = capsys.readouterr().out
    assert "from plugins (examples/my_models.py" in listing
    # what plugins registered (in a fresh `felix-jax` process: this file's alone)
    assert re.search(r"^  models: +(.*, )?my-mlp, my-cnn(, .*)?$", listing, flags=re.M)
    assert re.search(r"^models: .*\bmy-mlp, my-cnn$", listing, flags=re.M)  # beside the built-in ones
    for i, cmd in enumerate(commands[1:]):
        out = tmp_path / f"run{i}"
        assert main(cmd + ["--set", "max_aggregations=2", "--set", "target_accuracy=none", "--quiet",
                           "--out", str(out)]) == 0
        config = json.loads((out / "config.json").read_text())
        name = cmd[cmd.index("--set", cmd.index("--set") + 1) + 1].split("=")[1]
        assert config["scenario"]["model"] == name and config["model"]["num_params"] > 0
        assert json.loads((out / "summary.json").read_text())["aggregations"] == 2


def test_the_cnn_refuses_flat_inputs_in_one_line(tmp_path, capsys):
    from felix_jax.experiment.registry import make_model
    from felix_jax.plugins import load_plugins

    load_plugins(str(EXAMPLE))
    assert make_model("my-mlp", (64,), 10).num_params > 0
    with pytest.raises(Exception, match=r"my-cnn needs images \(H, W, C\), got inputs of shape \(64,\)"):
        make_model("my-cnn", (64,), 10)


def test_list_names_a_plugins_strategies_selectors_and_aggregators(tmp_path, capsys):
    plugin = tmp_path / "policies.py"
    plugin.write_text(
        "import dataclasses\nimport numpy as np\nfrom felix_jax import plugins\n"
        "from felix_jax.policies import Aggregator, Selector\n"
        "@plugins.selector('listed-first')\n"
        "def make():\n"
        "    return Selector('listed-first', lambda: None, lambda s, ctx, k: (np.flatnonzero(ctx.eligible)[:k], s))\n"
        "@dataclasses.dataclass(frozen=True)\nclass C:\n    server_lr: float = 1.0\n"
        "@plugins.aggregator('listed-mean', config=C)\n"
        "def make_agg(c):\n"
        "    return Aggregator('listed-mean', lambda info: np.ones(len(info.staleness)), server_lr=c.server_lr)\n"
        "plugins.strategy('listed-strategy', mode='async', knowledge='none', selector='listed-first',\n"
        "                 aggregator='listed-mean')\n")
    assert main(["run", "--list", "--set", f"plugins={plugin}"]) == 0
    listing = capsys.readouterr().out
    tail = listing[listing.index("from plugins ("):]
    # a strategy with its mode and availability knowledge, as the built-in ones are listed
    assert re.search(r"^  strategies: +(.*, )?listed-strategy \(async, none\)(, .*)?$", tail, flags=re.M)
    assert re.search(r"^  selectors: +(.*, )?listed-first(, .*)?$", tail, flags=re.M)
    assert re.search(r"^  aggregators: +(.*, )?listed-mean(, .*)?$", tail, flags=re.M)
    assert "  selector listed-first: no options" in listing  # its options, beside the built-in ones'


def test_list_in_a_fresh_process_names_the_files_entries_alone():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "felix_jax.cli", "run", "--list", "--set",
                           f"plugins={EXAMPLE}"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tail = done.stdout[done.stdout.index("from plugins ("):].splitlines()
    assert tail[1:] == ["  models:       my-mlp, my-cnn", "  strategies:   none", "  selectors:    none",
                        "  aggregators:  none"]


def test_list_with_a_missing_plugin_says_so_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--list", "--set", "plugins=no_such_plugin.py"])
    assert str(e.value) == "felix-jax run: plugins='no_such_plugin.py': no such file"
