"""What a policy author meets first: a strategy name that is a plugin's, a selector that breaks its
contract, told where to look."""

from __future__ import annotations

import textwrap

import pytest

from felix_jax.cli import main

OUT_OF_RANGE = textwrap.dedent('''
    import numpy as np
    from felix_jax import plugins
    from felix_jax.policies import Selector


    @plugins.selector("far-away")
    def make():
        def select(state, ctx, k):
            return np.array([10 ** 6]), state
        return Selector("far-away", lambda: None, select)


    plugins.strategy("far-away-strategy", mode="async", knowledge="tiertrack", selector="far-away",
                     aggregator="fedbuff")
''')


def refused(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return str(stopped.value.code)


def test_an_unknown_strategy_says_a_plugins_needs_its_file(tmp_path):
    line = refused(["run", "--preset", "tiny", "--set", "strategy=my-strategy", "--out", str(tmp_path / "r")])
    assert "unknown strategy 'my-strategy'" in line and "--set plugins=FILE.py" in line
    assert not (tmp_path / "r").exists()


def test_a_selector_returning_ids_out_of_range_is_named_with_its_file_and_line(tmp_path):
    plugin = tmp_path / "far.py"
    plugin.write_text(OUT_OF_RANGE)
    line = refused(["run", "--preset", "tiny", "--quiet", "--set", f"plugins={plugin}", "--set",
                    "strategy=far-away-strategy", "--set", "max_aggregations=2", "--out", str(tmp_path / "r")])
    assert "selector far-away" in line and "returned client ids [1000000] outside [0, 12)" in line
    select_line = OUT_OF_RANGE.splitlines().index("    def select(state, ctx, k):") + 1
    assert f"(defined at {plugin}:{select_line})" in line  # its select(), where the ids come from
