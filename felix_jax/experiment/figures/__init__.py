"""Every figure felix-jax draws, one module per results folder that holds them, all in one look:

- ``style.py``: what every figure shares, defined once: resolution and saving, font sizes, the grid,
  the palette, each strategy's color and line style, the legend under the panels;
- ``run.py``: a run's ``accuracy.png`` and ``participation.png``;
- ``split.py``: a run's ``partition.png`` (samples and label shares per client);
- ``comparison.py``: a comparison's ``accuracy.png``, ``bytes.png``, ``cdfs.png`` and
  ``time_to_target.png`` (``felix-jax compare``, ``felix-jax plot``);
- ``paper.py``: the paper's diagnostic figures from a matrix (``selection.png``, ``eval_tier.png``,
  ``late_weights.png``; ``benchmarks/paper_matrix.py``);
- ``trace.py``: an availability trace's tiers over time (``felix-jax plot-trace``).

Nothing is imported here, so that a run's results folder does not load the comparison's figures.
"""
