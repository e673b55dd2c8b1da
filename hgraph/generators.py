"""Seeded random graphs for tests and benchmarks: uniform and power-law directed graphs.

Both are deterministic for a seed, so a test or a benchmark figure can be rerun exactly.
"""

from __future__ import annotations

import numpy as np

import hgraph


def random_graph(n: int, m: int, seed: int, weighted: bool = True):
    """A seeded random directed graph with ``m`` distinct non-loop edges (weights in [0.5, 2))."""
    rng = np.random.default_rng(seed)
    pairs = set()
    src, dst = [], []
    s = rng.integers(0, n, size=4 * m)
    d = rng.integers(0, n, size=4 * m)
    for a, b in zip(s.tolist(), d.tolist()):
        if a != b and (a, b) not in pairs:
            pairs.add((a, b))
            src.append(a)
            dst.append(b)
            if len(src) == m:
                break
    weights = 0.5 + 1.5 * rng.random(len(src)) if weighted else None
    return hgraph.Graph.from_edges(np.array(src), np.array(dst), weights=weights, n=n)


def powerlaw_graph(n: int, m: int, seed: int = 1, exponent: float = 0.8):
    """A seeded power-law directed graph: ``m`` distinct non-loop edges whose endpoints are drawn
    with probability ~ (rank+1)^-exponent (ranks permuted over the ids so hubs spread over the
    partitions), weights uniform in [1, 2). Vectorized: 2M edges take well under a second."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    perm = rng.permutation(n)
    src = np.empty(0, np.int64)
    dst = np.empty(0, np.int64)
    while len(src) < m:
        k = int((m - len(src)) * 1.1) + 16
        s = np.concatenate([src, perm[np.minimum(np.searchsorted(cdf, rng.random(k)), n - 1)]])
        d = np.concatenate([dst, perm[np.minimum(np.searchsorted(cdf, rng.random(k)), n - 1)]])
        keep = s != d
        s, d = s[keep], d[keep]
        _, first = np.unique(s * n + d, return_index=True)
        first.sort()
        src, dst = s[first], d[first]
    src, dst = src[:m], dst[:m]
    return hgraph.Graph.from_edges(src, dst, weights=1.0 + rng.random(m), n=n)
