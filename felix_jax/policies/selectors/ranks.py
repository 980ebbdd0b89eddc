"""The clients at given ranks among a mask's set rows, without listing the mask (10^7 clients).

A selector that draws ``k`` clients uniformly among the eligible ones draws *ranks* (the draw depends
on the population's size only: ``rng.choice(ids, k)`` is ``ids[rng.choice(len(ids), k)]``) and then
finds the clients at those ranks: from the view's per-block counts of the mask where it keeps them
(``ClientMap.block_counts``), else by a walk over blocks of the mask. Either way only the blocks the
ranks fall in are listed, not all N rows.
"""

from __future__ import annotations

import numpy as np

_BLOCK = 1 << 16  # rows per block of ids_at_ranks' walk


def ids_at_ranks(block, ranks: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)[ranks]`` without building or listing the whole mask: ``block(start,
    stop)`` gives the mask's rows [start, stop); a walk over blocks in rank order counts each block's
    set rows and lists only the blocks the ranks fall in (a few ranks among 10^5..10^6 set rows)."""
    ranks = np.asarray(ranks, np.int64)
    out = np.empty(ranks.size, np.int64)
    start, before = 0, 0  # the block's first row; set rows before it
    rows = block(0, _BLOCK)
    count = int(np.count_nonzero(rows))
    listed = None
    for i in np.argsort(ranks, kind="stable").tolist():
        r = int(ranks[i])
        while before + count <= r:
            before += count
            start += _BLOCK
            rows = block(start, start + _BLOCK)
            count = int(np.count_nonzero(rows))
            listed = None
        if listed is None:
            listed = np.flatnonzero(rows)
        out[i] = start + listed[r - before]
    return out


def ids_at_ranks_counted(block, counts: np.ndarray, block_rows: int, ranks: np.ndarray) -> np.ndarray:
    """``ids_at_ranks`` when the mask's per-block counts are known (``counts[b]``: set rows among
    rows ``[b * block_rows, (b + 1) * block_rows)``): a search over the counts, then the rows of the
    blocks the ranks fall in only."""
    ranks = np.asarray(ranks, np.int64)
    out = np.empty(ranks.size, np.int64)
    ends = np.cumsum(counts)
    where = np.searchsorted(ends, ranks, side="right")
    for b in np.unique(where).tolist():
        sel = where == b
        start = b * block_rows
        listed = np.flatnonzero(block(start, start + block_rows))
        out[sel] = start + listed[ranks[sel] - (ends[b] - counts[b])]
    return out


def mask_ids_at_ranks(view, mask: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)[ranks]`` for a selection context's eligible mask: from the view's block
    counts when ``mask`` is one the view maintains, else by the walk."""
    def rows(a, b):
        return mask[a:b]

    blocks = view.block_counts(mask) if hasattr(view, "block_counts") else None
    if blocks is None:
        return ids_at_ranks(rows, ranks)
    counts, block_rows = blocks
    return ids_at_ranks_counted(rows, counts, block_rows, ranks)
