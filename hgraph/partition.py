"""Range partitioning: ``tasks`` workers, each holding ``blocks`` VBlocks of contiguous vertex ids.

As in HybridGraph, task ``t`` owns the ids ``[task_bounds[t], task_bounds[t+1])`` and its range
is cut into ``blocks`` VBlocks. Besides the bounds the partition keeps:

* ``dependency[i, j]`` — whether some edge goes from VBlock ``i`` to VBlock ``j`` (the route
  table of block-pull is this matrix restricted to source blocks with a responding vertex);
* ``pair_edges[i, j]`` — how many edges go from VBlock ``i`` to VBlock ``j`` (the EBlock sizes);
* per task, the slice of the out-edge CSR it owns (:meth:`task_slice`), used by push and pull.

Example::

    >>> import hgraph
    >>> from hgraph.partition import Partition
    >>> g = hgraph.Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 0])
    >>> p = Partition(g, tasks=2, blocks=1)
    >>> p.block_bounds
    array([0, 2, 4])
    >>> p.dependency.astype(int).tolist()
    [[1, 1], [1, 1]]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hgraph.common.errors import HGraphError


def even_bounds(n: int, parts: int) -> np.ndarray:
    """``parts + 1`` bounds cutting ``0..n`` into near-equal contiguous ranges."""
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


def block_index(bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of the range of ``bounds`` holding each id. For :func:`even_bounds` the block of
    ``v`` is exactly ``((v + 1) * parts - 1) // n`` (the largest ``i`` with ``i * n // parts <= v``)
    — one multiply-divide instead of a binary search over millions of ids."""
    ids = np.asarray(ids, dtype=np.int64)
    parts = len(bounds) - 1
    n = int(bounds[-1])
    if parts <= 1 or len(ids) == 0:
        return np.zeros(len(ids), np.int64)
    if np.array_equal(bounds, even_bounds(n, parts)) and n * parts < 2**62:
        return ((ids + 1) * parts - 1) // n
    return np.searchsorted(bounds, ids, side="right") - 1


#: The most VBlocks (tasks x blocks) a partition may have: the block matrices
#: (:attr:`Partition.pair_edges`, ``dependency``) are dense, (tasks x blocks)^2 entries of 9 bytes,
#: so 10,000 VBlocks already take 0.9 GB.
MAX_VBLOCKS = 10_000


def fit_to_vertices(n: int, tasks: int, blocks: int) -> tuple[int, int]:
    """``(tasks, blocks)`` with at most one VBlock per vertex: a task or a block beyond the
    ``n`` vertices would own no vertex and only cost memory (the block matrices grow with the
    square of tasks x blocks), and the result is the same for any tasks and blocks. So tasks are
    cut to ``n``, then blocks to ``n // tasks``; more VBlocks than :data:`MAX_VBLOCKS` on a graph
    big enough to fill them is refused with one line."""
    if tasks < 1 or blocks < 1:
        raise HGraphError(f"tasks and blocks must be >= 1, got tasks={tasks} blocks={blocks}")
    tasks = min(tasks, max(n, 1))
    blocks = min(blocks, max(n // tasks, 1))
    if tasks * blocks > MAX_VBLOCKS:
        raise HGraphError(f"tasks x blocks = {tasks:,} x {blocks:,} = {tasks * blocks:,} VBlocks: "
                          f"the engine's block matrices are dense, (tasks x blocks)^2 entries "
                          f"({9 * (tasks * blocks) ** 2 / 2**30:,.1f} GiB); use at most "
                          f"{MAX_VBLOCKS:,} VBlocks")
    return tasks, blocks


@dataclass
class TaskSlice:
    """What one worker holds: its VBlocks and the out-edges of its vertices (local CSR)."""

    task: int
    tasks: int
    n: int
    block_bounds: np.ndarray      # global bounds of this task's blocks (len blocks+1)
    task_bounds: np.ndarray       # global bounds of every task (len tasks+1)
    all_block_bounds: np.ndarray  # global bounds of every block (len tasks*blocks+1)
    out_indptr: np.ndarray        # local CSR (len local_n+1, starting at 0)
    out_indices: np.ndarray       # global destination ids
    out_weights: np.ndarray
    in_degree: np.ndarray         # of the local vertices
    columns: dict = field(default_factory=dict)
    #: a sharded view's edges: the part of the view each came from, and each part's weight
    #: rule (:func:`hgraph.shards.weigh`); None and () for a partitioned graph's slice
    edge_group: np.ndarray | None = None
    weight_rules: tuple = ()

    @property
    def start(self) -> int:
        return int(self.block_bounds[0])

    @property
    def stop(self) -> int:
        return int(self.block_bounds[-1])


class Partition:
    """Bounds of tasks and VBlocks over ``graph`` plus the block dependency matrix.

    ``tasks`` and ``blocks`` are what :func:`fit_to_vertices` makes of the request (at most one
    VBlock per vertex); ``requested`` is the request."""

    def __init__(self, graph, tasks: int = 1, blocks: int = 1):
        n = graph.n
        self.requested = (int(tasks), int(blocks))
        self.tasks, self.blocks = fit_to_vertices(n, int(tasks), int(blocks))
        self.graph = graph
        total = self.tasks * self.blocks
        self.block_bounds = even_bounds(n, total)
        self.task_bounds = self.block_bounds[:: self.blocks].copy()
        src_block = self.block_of(graph.src)
        dst_block = self.block_of(graph.dst)
        self.pair_edges = np.bincount(src_block * total + dst_block,
                                      minlength=total * total).reshape(total, total)
        self.dependency = self.pair_edges > 0

    @property
    def num_blocks(self) -> int:
        return self.tasks * self.blocks

    def block_of(self, ids: np.ndarray) -> np.ndarray:
        """The global VBlock index of each vertex id."""
        return block_index(self.block_bounds, ids)

    def task_of_block(self, block: int) -> int:
        return block // self.blocks

    def task_slice(self, task: int) -> TaskSlice:
        """The data worker ``task`` needs (arrays are slices/copies of the graph's)."""
        g = self.graph
        lo, hi = int(self.task_bounds[task]), int(self.task_bounds[task + 1])
        e0, e1 = int(g.out_indptr[lo]), int(g.out_indptr[hi])
        return TaskSlice(
            task=task, tasks=self.tasks, n=g.n,
            block_bounds=self.block_bounds[task * self.blocks:(task + 1) * self.blocks + 1].copy(),
            task_bounds=self.task_bounds.copy(),
            all_block_bounds=self.block_bounds.copy(),
            out_indptr=(g.out_indptr[lo:hi + 1] - e0),
            out_indices=g.out_indices[e0:e1],
            out_weights=g.out_weights[e0:e1],
            in_degree=g.in_degree[lo:hi],
            columns={name: col[lo:hi] for name, col in g.columns.items()},
        )

    def route_table(self, responding_blocks: np.ndarray) -> np.ndarray:
        """``route[j, t]``: whether destination block ``j`` pulls from task ``t`` — some block of
        ``t`` has a responding vertex and an edge into ``j`` (HybridGraph's route table)."""
        dep = self.dependency & np.asarray(responding_blocks, dtype=bool)[:, None]
        return dep.reshape(self.tasks, self.blocks, -1).any(axis=1).T
