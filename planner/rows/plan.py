"""Row plans: which ops run band by band, the rows of every band, halo overhead and extra FLOPs.

:func:`plan` reads the layer table (:mod:`planner.rows.layers`), finds the row regions and the
rows each band computes with the engine programs of :mod:`planner.rows.row_program`, and builds
the step list of the row-centric training step (:mod:`planner.rows.walk`), whose live bytes give
the predicted peak. Two policies for the rows shared by neighbouring bands (LR-CNN):

* ``overlap`` (OverL) -- every band computes its whole range; the halo rows are recomputed;
* ``share`` (2PS) -- bands run top to bottom and each keeps the rows of every layer the next band
  needs (a *tail*); the next band computes only the rows past them. No forward row is computed
  twice per sweep, at the price of the tails held between bands.

Both sweep the regions twice: once in the forward (only the region outputs are stored, whole) and
once in the backward, where each band recomputes its maps and back-propagates the gradient of
the rows it owns. The backward is linear in the incoming gradient, so the bands' contributions
(weight gradients, the region inputs' gradients) add up to the plain step's.

A region holding batch norms (ResNet-50's bottleneck blocks) stays exact: its forward runs
layer by layer on whole maps (freed after their last forward use; the per-channel statistics are
kept), and its backward runs in *phases* (:func:`_phases`), one more per batch norm on the
longest path through it: a phase sums a batch norm's output gradient, whole, and its two
per-channel sums band by band; the next starts from it band by band. Each phase recomputes the
rows it needs, so a block of three chained batch norms recomputes its prefix up to four times.
Regions end at every residual add too (its output is the block's checkpoint), which keeps the
phases to one block's.

``auto`` (:func:`choose`) tries ``R`` in 2, 4, 8, 16, 32 with both policies and keeps the least
extra FLOPs whose predicted peak fits the budget (the smallest peak when none fits).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import breadth_first_order, connected_components

from hgraph.common.errors import HGraphError
from planner import search
from planner.analyses.engine import EngineOptions
from planner.ops import BACKWARD_FLOPS_FACTOR
from planner.rows import layers as layers_mod
from planner.rows import row_program, walk

POLICIES = ("overlap", "share")
AUTO_BANDS = (2, 4, 8, 16, 32)


@dataclasses.dataclass
class RowPlan:
    """A row-centric plan for one graph.

    ``region``: int64 [n] region id per op (-1: runs on whole tensors); ``outputs``: bool [n],
    region ops whose value leaves the region (stored whole); ``ranges``: int64 [n, R, 2] rows
    ``[lo, hi)`` of each op's output computed in each band; ``own``: rows each region output owns;
    ``fresh``: int64 [n, R] first row a band computes itself (``share``: the rows before come from
    the previous band's tail; ``overlap``: ``lo``).
    """

    graph: object
    layers: object
    bands: int
    policy: str
    region: np.ndarray
    outputs: np.ndarray
    ranges: np.ndarray
    own: np.ndarray
    fresh: np.ndarray
    supersteps: int
    phase_ranges: np.ndarray = None   # int64 [P, n, R, 2]: rows of each backward phase ([0] = ranges)
    phase_fresh: np.ndarray = None    # int64 [P, n, R]: first row computed ([0] = fresh; else lo)
    phase_own: np.ndarray = None      # int64 [P, n, R, 2]: rows each phase's seeds own
    seeds: np.ndarray = None          # bool [P, n]: where each phase's backward starts
    carriers: np.ndarray = None       # bool [P, n]: ops back-propagated in each phase
    whole_forward: np.ndarray = None  # bool [regions]: regions with batch norm (forward whole)
    walk: object = None               # planner.rows.walk.Walk: the steps and their buffers
    predicted_peak_bytes: int = 0
    param_grad_bytes: int = 0
    recompute: tuple = ()             # whole ops dropped after the forward, recomputed in the backward
    resweep: tuple = ()               # regions whose outputs are dropped too, swept again in the backward
    open_stages: tuple = ()           # downsampling ops that do not end a region (plan's open_stages)
    prune: bool = True                # plan's prune
    dp: dict | None = None            # how the recomputation DP chose them (planner.rows.with_dp)

    @property
    def num_regions(self) -> int:
        return int(self.region.max()) + 1 if self.region.size else 0

    @property
    def phases(self) -> int:
        return int(self.phase_ranges.shape[0])

    def computed_rows(self, fresh_only: bool, phase: int = 0) -> np.ndarray:
        """int64 [n]: rows of each op's output computed in one sweep of ``phase`` over all bands."""
        rng = self.phase_ranges[phase]
        lo = self.phase_fresh[phase] if fresh_only else rng[..., 0]
        return np.maximum(rng[..., 1] - lo, 0).sum(axis=1)

    def flops(self) -> dict:
        """Forward/backward FLOPs of a plain step and of this plan's step.

        Forward: region ops of a band sweep at the rows they compute, regions with batch norm
        once on whole maps; backward: every phase's band recomputation (a phase's seeds are not
        recomputed) and its VJPs at the rows of that phase."""
        ly, inside = self.layers, self.region >= 0
        h = np.maximum(ly.h_out, 1)
        f = ly.flops.astype(np.float64)
        whole = inside & self.whole_forward[np.maximum(self.region, 0)]
        share = self.policy == "share"
        forward = np.where(inside & ~whole, self.computed_rows(share) / h, 1.0)
        again = sum(self.computed_rows(share and q == 0, q) * ~self.seeds[q] for q in range(self.phases))
        back = sum(self.computed_rows(False, q) * (self.carriers[q] | self.seeds[q] & (q > 0))
                   for q in range(self.phases))
        plain = float(f.sum()) * (1 + BACKWARD_FLOPS_FACTOR)
        rows = float((f * forward).sum() + (f * np.where(inside, again / h, 0.0)).sum()
                     + (BACKWARD_FLOPS_FACTOR * f * np.where(inside, back / h, 1.0)).sum()
                     + f[list(self.recompute)].sum()
                     + (f * forward * np.isin(self.region, self.resweep)).sum())
        return {"plain_flops": int(plain), "row_flops": int(rows), "extra_flops": int(rows - plain)}

    def halo(self) -> list:
        """Per region op: rows of its map, rows computed per sweep, overhead of the halo."""
        ly, out = self.layers, []
        over, fresh = self.computed_rows(False), self.computed_rows(True)
        for i in np.flatnonzero(self.region >= 0).tolist():
            h = int(ly.h_out[i])
            out.append({"op": i, "type": ly.ops[i], "region": int(self.region[i]), "rows": h,
                        "computed_rows": int(over[i]), "fresh_rows": int(fresh[i]),
                        "halo_overhead": round(over[i] / h - 1.0, 6),
                        "kept_whole": bool(self.outputs[i])})
        return out

    def report(self) -> dict:
        ly = self.layers
        kept = sorted({int(v) for v in ly.out_var[self.outputs]})
        entering = (self.region[ly.dst] >= 0) & (self.region[ly.src] != self.region[ly.dst])
        inputs = sorted({int(v) for v in ly.out_var[ly.src[entering]]})
        fl = self.flops()
        return {"rows": self.bands, "row_policy": self.policy, "regions": self.num_regions,
                "row_ops": int((self.region >= 0).sum()), "whole_ops": int((self.region < 0).sum()),
                "predicted_peak_bytes": int(self.predicted_peak_bytes),
                "param_grad_bytes": int(self.param_grad_bytes),
                "predicted_activation_peak_bytes": int(self.predicted_peak_bytes - self.param_grad_bytes),
                **fl, "extra_flops_ratio": round(fl["extra_flops"] / max(fl["plain_flops"], 1), 6),
                "kept_between_passes": {"region_outputs": kept, "region_inputs": inputs,
                                        "whole_ops": "values their VJPs read, as in a plain step"},
                "recomputed": "every region op, band by band, in the backward",
                "backward_phases": self.phases,
                "batch_norms_in_regions": int((ly.norm & (self.region >= 0)).sum()),
                "regions_forward_whole": int(self.whole_forward.sum()),
                "combined_with_dp": bool(self.recompute or self.resweep),
                "dp_recomputed_ops": [int(i) for i in self.recompute],
                "dp_reswept_regions": [int(r) for r in self.resweep],
                "open_stages": [int(i) for i in self.open_stages],
                "dp_reswept_vars": [int(v) for v in ly.out_var[self.outputs & np.isin(self.region, self.resweep)]],
                "dp_recomputed_vars": [int(ly.out_var[i]) for i in self.recompute],
                **({"dp": self.dp} if self.dp else {}), "engine_supersteps": int(self.supersteps),
                "bands": [{"band": j, "rows": {int(i): self.ranges[i, j].tolist()
                                                for i in np.flatnonzero(self.outputs).tolist()}}
                          for j in range(self.bands)],
                "halo": self.halo()}


def plan(g, bands: int, policy: str = "overlap", opts: EngineOptions | None = None,
         stages: bool = True, prune: bool = True, open_stages=()) -> RowPlan:
    """The row plan of zoo graph ``g`` with ``bands`` row bands under ``policy``.

    ``stages``: a region also ends at every downsampling op (pooling, strided convolution), whose
    output is then stored whole as a checkpoint. Without it one band of a deep stack reads
    nearly the whole image (VGG-16's conv5_3 sees 212 of 224 rows), so every band recomputes
    almost everything and holds almost whole maps; with it the halo stays within one resolution.
    ``prune``: regions that would not lower the memory (:func:`_profitable`) run on whole tensors.
    ``open_stages``: downsampling ops that do not end a region even so (the search of
    :func:`planner.rows.with_dp.walk_search` opens the one whose map the peak holds).
    """
    if policy not in POLICIES:
        raise HGraphError(f"unknown row policy {policy!r}; choose from {', '.join(POLICIES)} or auto")
    ly = layers_mod.read(g)
    if np.any(ly.src >= ly.dst):
        raise HGraphError("row plans need the forward functions in topological order (a zoo export)")
    convs = np.asarray([op == "conv2d" for op in ly.ops], dtype=bool)
    if not convs.any():
        raise HGraphError("--rows: the model has no convolution stack (no conv2d on image maps)")
    image = int(ly.h_in[convs].max())
    if bands < 1:
        raise HGraphError(f"--rows must be >= 1, got {bands}")
    if bands > image:
        raise HGraphError(f"--rows {bands} is larger than the image height {image}")
    opts = opts or EngineOptions()
    rowwise = (ly.kind != layers_mod.BARRIER) & (ly.h_out >= bands)
    residual = np.asarray([op == "add" for op in ly.ops], dtype=bool)
    down = stages & rowwise & (ly.h_out < ly.h_in)
    down[list(open_stages)] = False
    ends = ~rowwise | down | residual
    depth = row_program.barrier_depth(ly, ends, opts)
    region = _regions(ly, rowwise, depth)
    if prune:
        region = _profitable(ly, region)
    if not (convs & (region >= 0)).any():
        raise HGraphError(f"--rows {bands}: no convolution stack where row bands save memory (maps of "
                          f"at least {bands} rows between downsampling ops)")
    outputs = _region_outputs(ly, region)
    own = np.zeros((ly.n, bands, 2), dtype=np.int64)
    h = ly.h_out[:, None]
    j = np.arange(bands + 1)[None, :]
    cuts = j * h // bands
    own[..., 0], own[..., 1] = cuts[:, :-1], cuts[:, 1:]
    own[~outputs] = (1, 0)
    ranges, supersteps = row_program.row_ranges(ly, region, own, opts)
    fresh = ranges[..., 0].copy()
    if policy == "share":
        prev_hi = np.concatenate([np.zeros((ly.n, 1), np.int64), ranges[:, :-1, 1]], axis=1)
        fresh = np.clip(np.maximum(fresh, prev_hi), None, ranges[..., 1])
    p = RowPlan(g, ly, bands, policy, region, outputs, ranges, own, fresh, int(supersteps),
                open_stages=tuple(sorted(int(i) for i in open_stages)), prune=prune)
    _phases(p, cuts, opts)
    return with_recompute(p, ())


def _phases(p: RowPlan, cuts: np.ndarray, opts) -> None:
    """The backward phases of ``p`` (fills ``phase_*``, ``seeds``, ``carriers``, ``whole_forward``).

    A batch norm's input gradient needs two sums over its whole map of its output gradient, so
    it cannot go on band by band until every band has delivered that gradient. A batch norm
    ``b`` at *level* ``L`` (the most batch norms after it on a path to a region output) has all
    of its output gradient after phase ``L``: phases ``0 .. L`` accumulate it, whole, with the
    two sums (its parameter gradients, band by band); phase ``L + 1`` starts from it (``b`` is a
    *seed*, owning rows as a region output does) and carries its input gradient on, band by
    band, down to the next batch norms or the region inputs. Each phase recomputes, band by
    band, the rows its VJPs read (the engine's row ranges from its seeds' rows).
    """
    ly, region, n = p.layers, p.region, p.layers.n
    inner = (region[ly.src] >= 0) & (region[ly.src] == region[ly.dst])
    src, dst = ly.src[inner], ly.dst[inner]
    norm = ly.norm & (region >= 0)
    level = row_program.longest_path(dst, src, norm[dst], n, opts)      # reversed edges
    count = int(level[norm].max(initial=-1)) + 2
    seeds = np.zeros((count, n), dtype=bool)
    seeds[0] = p.outputs
    seeds[1:] = norm[None, :] & (level[None, :] == np.arange(count - 1)[:, None])
    own = np.repeat(p.own[None], count, axis=0)
    own[1:, :, :, 0], own[1:, :, :, 1] = cuts[:, :-1], cuts[:, 1:]
    own[1:][~seeds[1:]] = (1, 0)
    ranges = np.repeat(p.ranges[None], count, axis=0)
    fresh = np.repeat(p.fresh[None], count, axis=0)
    carriers = np.zeros((count, n), dtype=bool)
    for q in range(count):            # one engine run per phase: a handful per plan
        if q:
            ranges[q] = row_program.row_ranges(ly, region, own[q], opts)[0]
            fresh[q] = ranges[q, ..., 0]
        carriers[q] = _carried(n, src, dst, norm, seeds[q], q > 0)
    p.phase_ranges, p.phase_fresh, p.phase_own, p.seeds, p.carriers = ranges, fresh, own, seeds, carriers
    p.whole_forward = np.bincount(region[norm], minlength=p.num_regions) > 0


def _carried(n: int, src, dst, norm, seeds, seeds_pass: bool) -> np.ndarray:
    """bool [n]: ops a gradient reaches from ``seeds`` against the edges ``src -> dst`` without
    passing a batch norm (one it reaches accumulates and stops; a seed passes it on when
    ``seeds_pass``). The seeds are carriers unless ``seeds_pass`` (then they only start it)."""
    through = ~norm[dst] | (seeds[dst] & seeds_pass)
    start = np.flatnonzero(seeds)
    rows = np.concatenate([dst[through], np.full(start.size, n)])
    cols = np.concatenate([src[through], start])
    adj = coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n + 1, n + 1)).tocsr()
    reached = np.zeros(n + 1, dtype=bool)
    reached[breadth_first_order(adj, n, directed=True, return_predecessors=False)] = True
    reached = reached[:n]
    return reached & ~seeds if seeds_pass else reached


def with_recompute(p: RowPlan, ops, dp: dict | None = None, resweep=()) -> RowPlan:
    """Plan ``p`` with whole ops ``ops`` recomputed in the backward, and the outputs of regions
    ``resweep`` dropped after the forward and made again by one more forward band sweep of their
    region where the backward first reads them (and its new walk and peak).

    Only ops outside the row regions qualify for ``ops`` (a region's ops are recomputed band by
    band anyway); the loss is never recomputed."""
    ops = tuple(sorted(int(i) for i in ops))
    resweep = tuple(sorted(int(r) for r in resweep))
    if any(p.region[i] >= 0 or p.layers.ops[i] == "softmax_cross_entropy" for i in ops):
        raise HGraphError("only whole ops other than the loss can be recomputed whole")
    if any(not 0 <= r < p.num_regions for r in resweep):
        raise HGraphError(f"no such row region among {resweep}")
    q = dataclasses.replace(p, recompute=ops, resweep=resweep, dp=dp)
    w = walk.build(q)
    q.walk, q.predicted_peak_bytes, q.param_grad_bytes = w, w.peak_bytes, w.param_grad_bytes
    return q


def _regions(ly, rowwise: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """int64 [n]: connected components of row-wise ops over edges of equal barrier depth."""
    keep = rowwise[ly.src] & rowwise[ly.dst] & (depth[ly.src] == depth[ly.dst])
    adj = coo_matrix((np.ones(int(keep.sum())), (ly.src[keep], ly.dst[keep])), shape=(ly.n, ly.n))
    _, comp = connected_components(adj, directed=False)
    ids = np.where(rowwise, comp, -1)
    used = np.unique(ids[ids >= 0])
    renum = np.full(ly.n + 1, -1, dtype=np.int64)
    renum[used] = np.arange(used.size)          # regions numbered in order of their first op
    return renum[ids]


def _profitable(ly, region: np.ndarray) -> np.ndarray:
    """``region`` with the regions that save no memory dissolved (-1), the rest renumbered.

    A region saves the whole maps a plain step keeps of its inner ops (values a VJP reads) and
    costs the maps of its inputs that a plain step would not keep (it recomputes from them):
    ResNet-50's stem convolution alone between the image and its stride would keep the same map
    whole as a plain step -- no gain, so it runs whole.
    """
    n_reg = int(region.max()) + 1 if region.size else 0
    if n_reg == 0:
        return region
    needed = ly.saves_output.copy()
    needed[ly.src[ly.edge_saved]] = True
    leaving = (region[ly.src] >= 0) & (region[ly.dst] != region[ly.src])
    inner = (region >= 0).copy()
    inner[ly.src[leaving]] = False                     # region outputs are kept whole anyway
    gain = np.bincount(region[inner], weights=(ly.out_bytes * needed)[inner], minlength=n_reg)
    entering = (region[ly.dst] >= 0) & (region[ly.src] != region[ly.dst])
    pairs = np.unique(np.stack([ly.src[entering], region[ly.dst[entering]]]), axis=1)
    cost = np.bincount(pairs[1], weights=(ly.out_bytes * ~needed)[pairs[0]], minlength=n_reg)
    keep = gain > cost
    renum = np.full(n_reg + 1, -1, dtype=np.int64)
    renum[np.flatnonzero(keep)] = np.arange(int(keep.sum()))
    return renum[region]


def _region_outputs(ly, region: np.ndarray) -> np.ndarray:
    """bool [n]: region ops with a consumer outside their region."""
    leaves = (region[ly.src] >= 0) & (region[ly.dst] != region[ly.src])
    out = np.zeros(ly.n, dtype=bool)
    out[ly.src[leaves]] = True
    return out


def choose(g, budget_bytes: int, opts: EngineOptions | None = None, stages: bool = True,
           prune: bool = True, peak=None) -> RowPlan:
    """``auto``: the fitting plan with the least extra FLOPs (ties: fewer bands, overlap first).
    ``peak``: a plan's peak as the budget counts it (default its activations,
    ``predicted_peak_bytes``; the whole step: ``planner.rows.step.predict_rows``)."""
    peak = peak or (lambda q: int(q.predicted_peak_bytes))
    ly = layers_mod.read(g)
    image = int(ly.h_in[np.asarray([op == "conv2d" for op in ly.ops], dtype=bool)].max(initial=0))
    found = []
    for bands in [b for b in AUTO_BANDS if b <= image] or [1]:
        for policy in POLICIES:
            try:
                found.append(plan(g, bands, policy, opts, stages, prune))
            except HGraphError as err:
                if "no convolution stack where" in str(err) and found:
                    break
                raise
    return search.pick(
        found, budget_bytes,
        lambda p: (peak(p), (p.flops()["extra_flops"], p.bands, POLICIES.index(p.policy))),
        lambda low, best: (f"no row plan fits {budget_bytes:,} B; the smallest predicted peak "
                           f"is {low:,} B (--rows {best.bands} --row-policy {best.policy})"))
