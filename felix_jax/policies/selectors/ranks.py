"""The clients at given ranks among a mask's set rows, without listing the mask (10^7 clients).

A selector that draws ``k`` clients uniformly among the eligible ones draws *ranks* (the draw depends
on the population's size only: ``rng.choice(ids, k)`` is ``ids[rng.choice(len(ids), k)]``) and then
finds the clients at those ranks: from the view's per-block counts of the mask where it keeps them
(``ClientMap.block_counts``), else by a walk over blocks of the mask. Either way only the blocks the
ranks fall in are listed, not all N rows. :func:`ids_at_ranks_of_both` does it for many ranks at once
among the rows two masks share (Oort's sampled exploitation: explored and eligible).
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


def ids_at_ranks_of_both(a: np.ndarray, b: np.ndarray, counts: np.ndarray, block_rows: int,
                         ranks: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(a & b)[ranks]`` when the per-block counts of ``a & b`` are known (as
    :func:`ids_at_ranks_counted`), for many ranks at once (Oort's sampled exploitation draws hundreds):
    the rows of the blocks the ranks fall in are gathered in one pass over those blocks, not listed block
    by block, so the cost is their rows (at most every row of ``a`` and ``b`` once) and no Python loop."""
    ranks = np.asarray(ranks, np.int64)
    if ranks.size == 0:
        return np.zeros(0, np.int64)
    counts = np.asarray(counts, np.int64)
    ends = np.cumsum(counts)
    where = np.searchsorted(ends, ranks, side="right")  # the block of each rank
    hit, k = np.unique(where, return_inverse=True)  # the blocks hit, ascending; each rank's among them
    full = a.size // block_rows  # whole blocks; a last, partial one is padded
    body = hit[hit < full]
    rows = (a[:full * block_rows].reshape(full, block_rows)[body]
            & b[:full * block_rows].reshape(full, block_rows)[body])
    if body.size < hit.size:  # the partial last block (hit is ascending: it comes last)
        last = np.zeros((1, block_rows), bool)
        last[0, :a.size - full * block_rows] = a[full * block_rows:] & b[full * block_rows:]
        rows = np.concatenate([rows, last])
    flat = np.flatnonzero(rows)  # set rows of the blocks hit, block after block
    first = np.cumsum(counts[hit]) - counts[hit]  # where each block's set rows start in flat
    pos = flat[first[k] + ranks - (ends[where] - counts[where])]
    return hit[k] * block_rows + pos % block_rows


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
