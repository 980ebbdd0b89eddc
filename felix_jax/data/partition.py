"""Split a data set's training samples over clients (host side, numpy, seeded).

Every function returns a :class:`Partition`: a padded index table plus per-client
counts, the list-free form the cohort engine gathers from on the device (a client
is a row of the table and a count). Randomness comes from
``numpy.random.default_rng(seed)``, so the same arguments give the same partition.

- :func:`dirichlet_partition` - label skew, per-class Dirichlet(alpha) shares
  (the paper's CIFAR-10 setup: 300 clients, alpha = 0.1).
- :func:`iid_partition` - uniform random, sizes differ by at most one.
- :func:`partition_by_key` - natural clients (e.g. one per speaker).
- :func:`partition_from_counts` - given client sizes, random (IID) contents.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

Seed = int | np.random.SeedSequence | None


@dataclasses.dataclass(frozen=True, eq=False)
class Partition:
    """Which training samples each client holds.

    Attributes:
      index_table: int32 ``(num_clients, max_count)``; row ``i`` lists client
        ``i``'s sample indices in ascending order in its first ``counts[i]``
        entries. The rest of the row is padded with **0**, which is also a valid
        sample index: always mask with ``counts`` (``arange(max_count) < counts[i]``).
      counts: int32 ``(num_clients,)``, samples per client.
      num_samples: size of the partitioned data set (indices are < this).
      method: how it was made (for reports), e.g. ``"dirichlet(alpha=0.1)"``.
      repaired: the clients the ``min_samples`` repair gave samples to (ascending; empty when
        none were or the method has no repair).
    """

    index_table: np.ndarray
    counts: np.ndarray
    num_samples: int
    method: str = ""
    repaired: tuple[int, ...] = ()

    def __post_init__(self):
        t, c = self.index_table, self.counts
        if t.ndim != 2 or c.shape != (t.shape[0],):
            raise ValueError(f"index_table {t.shape} and counts {c.shape} do not match")
        if t.dtype != np.int32 or c.dtype != np.int32:
            raise ValueError("index_table and counts must be int32")
        if c.size and (c.min() < 0 or c.max() > t.shape[1]):
            raise ValueError("counts must lie in [0, index_table.shape[1]]")

    @property
    def num_clients(self) -> int:
        return int(self.counts.shape[0])

    @property
    def max_count(self) -> int:
        return int(self.index_table.shape[1])

    def client_indices(self, client: int) -> np.ndarray:
        """Sample indices of one client (a view of its table row, unpadded)."""
        return self.index_table[client, : self.counts[client]]

    def valid_mask(self) -> np.ndarray:
        """bool ``(num_clients, max_count)``: True where the table holds a real index."""
        return np.arange(self.max_count)[None, :] < self.counts[:, None]

    def assignment(self) -> np.ndarray:
        """int32 ``(num_samples,)``: each sample's client, -1 if unassigned."""
        owner = np.full(self.num_samples, -1, np.int32)
        mask = self.valid_mask()
        owner[self.index_table[mask]] = np.nonzero(mask)[0]
        return owner

    def size_stats(self) -> dict[str, float]:
        """Client-size summary: num_clients, total, min, p10, median, mean, p90, max."""
        c = self.counts.astype(np.float64)
        return {
            "num_clients": self.num_clients,
            "total": int(c.sum()),
            "min": int(c.min()),
            "p10": float(np.percentile(c, 10)),
            "median": float(np.median(c)),
            "mean": float(c.mean()),
            "p90": float(np.percentile(c, 90)),
            "max": int(c.max()),
        }

    def label_histogram(self, labels: np.ndarray, num_classes: int | None = None) -> np.ndarray:
        """int64 ``(num_clients, num_classes)``: samples of each class per client."""
        labels = np.asarray(labels).astype(np.int64).ravel()
        if labels.shape[0] != self.num_samples:
            raise ValueError(f"labels has {labels.shape[0]} entries, partition covers {self.num_samples}")
        k = int(labels.max()) + 1 if num_classes is None else int(num_classes)
        mask = self.valid_mask()
        clients = np.nonzero(mask)[0]
        flat = clients * k + labels[self.index_table[mask]]
        return np.bincount(flat, minlength=self.num_clients * k).reshape(self.num_clients, k)


def partition_from_assignment(owner: np.ndarray, num_clients: int, method: str = "") -> Partition:
    """Build a :class:`Partition` from each sample's client id (-1: unassigned)."""
    owner = np.asarray(owner, np.int64)
    if owner.size and owner.max() >= num_clients:
        raise ValueError(f"client id {owner.max()} >= num_clients {num_clients}")
    assigned = np.flatnonzero(owner >= 0)
    who = owner[assigned]
    counts = np.bincount(who, minlength=num_clients)
    order = np.argsort(who, kind="stable")  # by client, indices ascending within
    who_sorted, idx_sorted = who[order], assigned[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(who_sorted)) - starts[who_sorted]
    table = np.zeros((num_clients, max(int(counts.max(initial=0)), 1)), np.int32)
    table[who_sorted, rank] = idx_sorted
    return Partition(table, counts.astype(np.int32), int(owner.shape[0]), method)


def _check_clients(num_clients: int, num_samples: int, min_samples: int = 1) -> None:
    if int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
    if num_clients * min_samples > num_samples:
        raise ValueError(
            f"cannot give {num_clients} clients >= {min_samples} sample(s) each from {num_samples} samples"
        )


def dirichlet_partition(
    labels: np.ndarray, num_clients: int, alpha: float, seed: Seed = 0, min_samples: int = 1
) -> Partition:
    """Label-skewed split: per-class Dirichlet(alpha) shares over clients.

    For each class (in sorted label order) its samples are shuffled, shares
    ``p ~ Dirichlet(alpha * ones(num_clients))`` are drawn, and the shuffled
    samples are cut into consecutive runs of ``round(cumsum(p) * n_class)``.
    Small alpha concentrates each class on few clients (strong skew); large alpha
    approaches IID. Every sample goes to exactly one client.

    Repair (not resampling): afterwards every client with fewer than
    ``min_samples`` samples receives randomly chosen samples moved one at a time
    from the currently largest client (ties: lowest client id), until it has
    ``min_samples``. This changes few samples (a handful at alpha = 0.1 with 300
    clients on CIFAR-10) and keeps the draw's size distribution otherwise intact.

    Args:
      labels: ``(N,)`` integer class labels.
      num_clients: number of clients.
      alpha: Dirichlet concentration, any finite value > 0 (0.1 - 100 typical).
      seed: seed for ``numpy.random.default_rng``.
      min_samples: minimum samples per client (0 disables the repair).

    Raises:
      ValueError: alpha not > 0, num_clients < 1, or
        ``num_clients * min_samples > N``.
    """
    labels = np.asarray(labels).ravel()
    n = labels.shape[0]
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    if min_samples < 0:
        raise ValueError(f"min_samples must be >= 0, got {min_samples}")
    _check_clients(num_clients, n, min_samples)
    rng = np.random.default_rng(seed)
    owner = np.empty(n, np.int64)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        p = rng.dirichlet(np.full(num_clients, float(alpha)))
        if not np.all(np.isfinite(p)) or p.sum() <= 0:  # guard against underflow at tiny alpha
            p = np.zeros(num_clients)
            p[rng.integers(num_clients)] = 1.0
        cuts = np.rint(np.cumsum(p)[:-1] / p.sum() * len(idx)).astype(np.int64)
        sizes = np.diff(np.concatenate([[0], np.clip(cuts, 0, len(idx)), [len(idx)]]))
        owner[idx] = np.repeat(np.arange(num_clients), sizes)
    moved, needy = _repair_min_samples(owner, num_clients, min_samples, rng)
    method = f"dirichlet(alpha={alpha:g}, seed={seed}, min_samples={min_samples}, repaired={moved})"
    return dataclasses.replace(partition_from_assignment(owner, num_clients, method),
                               repaired=tuple(int(c) for c in needy))


def _repair_min_samples(owner: np.ndarray, num_clients: int, min_samples: int, rng) -> tuple[int, np.ndarray]:
    """Move random samples from the largest clients to those under ``min_samples``
    (in place). Returns the number of samples moved and the clients that received them."""
    counts = np.bincount(owner, minlength=num_clients)
    needy = np.flatnonzero(counts < min_samples)
    if min_samples == 0 or needy.size == 0:
        return 0, needy[:0]
    # Each client's samples in random order; donors give from the end of their run.
    order = np.lexsort((rng.random(owner.shape[0]), owner))
    ends = np.cumsum(counts)  # donor d's next sample to give: order[ends[d] - 1 - given[d]]
    given = np.zeros(num_clients, np.int64)
    heap = [(-int(counts[d]), int(d)) for d in np.flatnonzero(counts >= min_samples)]
    heapq.heapify(heap)
    moved = 0
    for r in needy:
        while counts[r] < min_samples:
            neg, d = heapq.heappop(heap)  # largest donor; it always has > min_samples here
            s = order[ends[d] - 1 - given[d]]
            given[d] += 1
            owner[s] = r
            counts[d] -= 1
            counts[r] += 1
            moved += 1
            heapq.heappush(heap, (neg + 1, d))
    return moved, needy


def iid_partition(num_samples: int, num_clients: int, seed: Seed = 0) -> Partition:
    """Uniform random split: a seeded permutation cut into ``num_clients`` runs
    whose sizes differ by at most one."""
    _check_clients(num_clients, num_samples)
    rng = np.random.default_rng(seed)
    owner = np.empty(num_samples, np.int64)
    owner[rng.permutation(num_samples)] = np.arange(num_samples) * num_clients // num_samples
    return partition_from_assignment(owner, num_clients, f"iid(seed={seed})")


def partition_by_key(keys: np.ndarray, num_clients: int | None = None, seed: Seed = 0) -> Partition:
    """Natural clients: all samples sharing a key (e.g. a speaker) stay together.

    With ``num_clients=None`` (or equal to the number of distinct keys) there is
    one client per key, client ``i`` holding the ``i``-th key in sorted order (the
    seed is unused). With fewer clients than keys, the keys are shuffled (seeded)
    and dealt out in contiguous runs, so each client gets ``floor`` or ``ceil`` of
    ``num_keys / num_clients`` whole keys (sizes then vary with the keys' sizes).

    Raises:
      ValueError: ``num_clients`` exceeds the number of distinct keys.
    """
    keys = np.asarray(keys).ravel()
    uniq, inv = np.unique(keys, return_inverse=True)
    k = len(uniq)
    if num_clients is None or num_clients == k:
        return partition_from_assignment(inv, k, "by_key")
    _check_clients(num_clients, keys.shape[0])
    if num_clients > k:
        raise ValueError(f"num_clients {num_clients} > number of distinct keys {k}")
    rng = np.random.default_rng(seed)
    group = np.empty(k, np.int64)
    group[rng.permutation(k)] = np.arange(k) * num_clients // k
    return partition_from_assignment(group[inv], num_clients, f"by_key(grouped, seed={seed})")


def partition_from_counts(num_samples: int, counts: np.ndarray, seed: Seed = 0) -> Partition:
    """Clients of given sizes with random (IID) contents.

    E.g. the paper's own per-client CIFAR-10 sizes (``num_samples`` in the shared
    reference trace file, 49,326 of the 50,000 images). Samples beyond
    ``sum(counts)`` stay unassigned.
    """
    counts = np.asarray(counts, np.int64).ravel()
    if counts.size == 0 or counts.min() < 0:
        raise ValueError("counts must be a non-empty array of non-negative sizes")
    if counts.sum() > num_samples:
        raise ValueError(f"counts sum to {counts.sum()} > num_samples {num_samples}")
    rng = np.random.default_rng(seed)
    owner = np.full(num_samples, -1, np.int64)
    owner[rng.permutation(num_samples)[: counts.sum()]] = np.repeat(np.arange(len(counts)), counts)
    return partition_from_assignment(owner, len(counts), f"from_counts(seed={seed})")


def scale_counts(counts: np.ndarray, total: int) -> np.ndarray:
    """``counts`` scaled in proportion to sum to ``total`` (largest remainder), each >= 1.

    Shrinks the paper's per-client sizes to a data subset while keeping their
    shape (the spread of sizes decides how long clients train).
    """
    counts = np.asarray(counts, np.float64).ravel()
    if counts.size == 0 or counts.min() < 0 or counts.sum() <= 0:
        raise ValueError("counts must be a non-empty array of non-negative sizes with a positive sum")
    if total < counts.size:
        raise ValueError(f"cannot give {counts.size} clients at least one sample each from {total}")
    exact = counts / counts.sum() * (total - counts.size)  # one sample each is set aside first
    out = np.floor(exact).astype(np.int64)
    short = int(total - counts.size - out.sum())
    out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return out + 1


def _sized_args(labels, sizes, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Checked (labels, sizes) of a partition with given client sizes and Dirichlet label mixes."""
    labels = np.asarray(labels).ravel()
    sizes = np.asarray(sizes, np.int64).ravel()
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    if sizes.size == 0 or sizes.min() < 1:
        raise ValueError("sizes must be a non-empty array of sizes >= 1")
    return labels, sizes


def dirichlet_sized_partition(labels: np.ndarray, sizes: np.ndarray, alpha: float, seed: Seed = 0) -> Partition:
    """Clients of the given ``sizes`` whose label mixes are drawn from Dirichlet(alpha).

    For a population whose sizes are known (the paper's per-client CIFAR-10 sizes in
    the shared reference file) but whose exact sample lists are not: client ``i``
    draws a class mix ``q_i ~ Dirichlet(alpha * ones(num_classes))`` and then its
    ``sizes[i]`` samples class by class from what is left, following ``q_i``; a
    class that runs out is replaced by the client's next most likely classes that
    still have samples. Clients are served in a seeded random order so no client
    id is favoured when classes run short. Setup-time host code (one numpy pass per
    client).
    """
    labels, sizes = _sized_args(labels, sizes, alpha)
    if sizes.sum() > labels.size:
        raise ValueError(f"sizes sum to {sizes.sum()} > {labels.size} samples")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    left = np.array([len(p) for p in pools], np.int64)
    owner = np.full(labels.size, -1, np.int64)
    mixes = rng.dirichlet(np.full(classes.size, float(alpha)), size=sizes.size)
    for client in rng.permutation(sizes.size):
        want = rng.multinomial(sizes[client], mixes[client] / mixes[client].sum())
        take = np.minimum(want, left)
        missing = int(sizes[client] - take.sum())
        for c in np.argsort(-mixes[client], kind="stable"):  # refill from the client's likeliest classes
            if missing == 0:
                break
            extra = min(missing, int(left[c] - take[c]))
            take[c] += extra
            missing -= extra
        for c in np.flatnonzero(take):
            idx = pools[c][len(pools[c]) - int(left[c]):][: int(take[c])]
            owner[idx] = client
            left[c] -= take[c]
    return partition_from_assignment(owner, sizes.size, f"dirichlet_sized(alpha={alpha}, seed={seed})")


# Clients per chunk in pool_partition: bounds the (draws, classes) work arrays.
_POOL_CHUNK = 1 << 16


def pool_partition(labels: np.ndarray, sizes: np.ndarray, alpha: float, seed: Seed = 0,
                   max_count: int | None = None) -> Partition:
    """A population that may be larger than the data: every client draws from the whole pool.

    Client ``i`` draws a class mix ``q_i ~ Dirichlet(alpha * ones(num_classes))``
    (as :func:`dirichlet_sized_partition`) and then ``sizes[i]`` samples, each of a
    class drawn from ``q_i`` and uniformly among that class's samples. Draws are
    with replacement: across clients (clients share samples, so any number of
    clients fits any pool) and within a client too (a client holds a sample twice
    only by chance, rarely when its size is small next to the class). ``max_count``
    caps the sizes. Vectorized over chunks of clients; the same arguments give the
    same partition.

    Memory: the index table is int32 ``(num_clients, max(sizes))``, i.e.
    ``4 * num_clients * max(sizes)`` bytes on the host and once more on the device
    (the cohort engine gathers a client's row there): the padded table is O(total
    samples) as long as the largest size stays within a small factor of the
    median, which ``max_count`` guarantees (e.g. 10^6 clients of the paper's sizes
    scaled to the 1,437 digits, median 4 and largest 28: 112 MB).
    """
    labels, sizes = _sized_args(labels, sizes, alpha)
    if labels.size == 0:
        raise ValueError("the pool has no samples")
    if max_count is not None:
        if max_count < 1:
            raise ValueError(f"max_count must be >= 1, got {max_count}")
        sizes = np.minimum(sizes, max_count)
    rng = np.random.default_rng(seed)
    classes, class_count = np.unique(labels, return_counts=True)
    by_class = np.argsort(labels, kind="stable")  # pool indices grouped by class, ascending within one
    class_start = np.concatenate([[0], np.cumsum(class_count)[:-1]])
    n, width = sizes.size, int(sizes.max())
    table = np.zeros((n, width), np.int32)
    for lo in range(0, n, _POOL_CHUNK):
        s = sizes[lo:lo + _POOL_CHUNK]
        m = s.size
        cum = np.cumsum(rng.dirichlet(np.full(classes.size, float(alpha)), size=m), axis=1)
        cum /= cum[:, -1:]
        owner = np.repeat(np.arange(m, dtype=np.int64), s)  # chunk-local client of each draw (ascending)
        u = rng.random(owner.size)
        cls = np.zeros(owner.size, np.int64)
        for j in range(classes.size):  # the class: how many of the client's cumulative shares are <= u
            cls += u >= cum[:, j][owner]
        np.minimum(cls, classes.size - 1, out=cls)
        pick = np.minimum((rng.random(owner.size) * class_count[cls]).astype(np.int64), class_count[cls] - 1)
        idx = by_class[class_start[cls] + pick]
        # each row ascending, as every partition lists them: one sort of (client, index) keys
        key = owner * labels.size + idx
        key.sort()
        first = np.concatenate([[0], np.cumsum(s)[:-1]])
        rank = np.arange(owner.size) - np.repeat(first, s)
        table[lo + owner, rank] = (key - owner * labels.size).astype(np.int32)
    return Partition(table, sizes.astype(np.int32), int(labels.size),
                     f"pool(alpha={alpha}, seed={seed})")
