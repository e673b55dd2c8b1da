"""Replay a schedule with the reference's accounting (FORMAT.md §3) and check that it is valid.

The replay is independent of how the schedule was made: it only needs the graph and the ops.

Accounting (``mode="reference"``, a 64-bit copy of DP.cpp ``eval()``):

* the state is two sets, F (live forward values) and G (live gradients);
* ``compute f`` (forward) adds f's output to F; ``compute f j...`` (backward) adds output ``j`` of
  block f to G for each j -- gradients of parameters and model inputs included, which are never
  forgotten and accumulate;
* ``forget`` removes the var from the matching set;
* after every compute, ``peak = max(peak, bytes(F) + bytes(G))``; parameters and inputs are never
  in F (free); the loss gradient (ones) is not counted.

``mode="exact"`` applies the same rules and additionally counts the loss gradient (the ``ones``
tensor created with the loss, freed by ``forget loss backward``), which the reference leaves out.
Parameters, model inputs and workspace are still not counted (they do not depend on the schedule;
``param_bytes`` reports the first two).

Recomputation cost: ``sum_f t(f) * (#compute lines of forward f - 1)`` with the reference's cost
model (Conv = 10, else 1).

Validity (each problem is one line in ``violations``):

* a compute reads only live values: activation inputs of a forward function in F; a backward
  block's ``input``/``output`` activations in F and its ``gradient`` var in G (the loss's gradient
  is available once the loss has been computed);
* the gradient it reads is complete: every consumer's backward block has already produced it;
* no gradient (block, index) is produced twice (it would be accumulated twice);
* every forward function runs; every backward output is produced; indices are in range.

Example::

    >>> import planner
    >>> from planner import simulate, synth
    >>> g = synth.build(layers=2, heads=2)
    >>> p = planner.plan(g, budget="60%")
    >>> r = simulate.replay(g, p.schedule)           # e.g. of Schedule.read("s.txt")
    >>> r.peak_bytes == p.peak_bytes, r.recompute_cost, r.violations
    (True, 25, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.cg import GRADIENT

__all__ = ["SimResult", "replay"]

MAX_VIOLATIONS = 100


@dataclass
class SimResult:
    """What a replay measured.

    ``peak_bytes`` (max live bytes after a compute), ``peak_step`` (op index of the first peak),
    ``peak_act_only_bytes`` (same without parameter/input gradients), ``recompute_cost``,
    ``forward_cost`` (T(V)), ``computes`` (int64 [M/2]: compute lines per forward function),
    ``timeline`` (int64 [len(ops)]: live bytes after each op), ``violations`` (list of strings,
    empty for a valid schedule), ``param_bytes`` (bytes of parameters and inputs, not counted).
    """

    peak_bytes: int = 0
    peak_step: int = -1
    peak_act_only_bytes: int = 0
    recompute_cost: int = 0
    forward_cost: int = 0
    computes: np.ndarray = None
    timeline: np.ndarray = None
    violations: list = field(default_factory=list)
    param_bytes: int = 0
    impossible: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations and not self.impossible

    @property
    def recomputed(self) -> int:
        """Number of forward functions computed more than once."""
        return int(np.count_nonzero(self.computes > 1)) if self.computes is not None else 0


def replay(g, schedule, mode: str = "reference", check: bool = True) -> SimResult:
    """Replay ``schedule`` (a :class:`planner.schedule.Schedule` or list of ops) on graph ``g``."""
    if mode not in ("reference", "exact"):
        raise ValueError(f"mode must be 'reference' or 'exact', got {mode!r}")
    ops = schedule.ops if hasattr(schedule, "ops") else list(schedule)
    nf = g.num_forward
    n = g.num_vars
    vbytes = g.var_bytes.tolist()
    is_act = g.is_activation.tolist()
    t = g.forward_costs
    res = SimResult(forward_cost=int(t.sum()), param_bytes=int(g.var_bytes[~g.is_activation].sum()))
    if getattr(schedule, "impossible", False):
        res.impossible = True
        res.computes = np.zeros(nf, dtype=np.int64)
        res.timeline = np.zeros(0, dtype=np.int64)
        return res

    # the blocks as flat lists: block b's inputs are in_var[ip[b]:ip[b + 1]] (tags in_tag),
    # its outputs out_var[op_[b]:op_[b + 1]]; a backward output is produced once: produced[k]
    cols = g.columns
    in_var, in_tag = cols.in_var.tolist(), cols.in_tag.tolist()
    ip, op_ = cols.in_ptr.tolist(), cols.out_ptr.tolist()
    out_var = cols.out_var.tolist()
    fwd_out = g.forward_output.tolist()
    # parts of each var's gradient: how many backward outputs produce it, how many have so far
    bw_out = cols.out_var[cols.out_ptr[nf]:]
    parts = np.bincount(bw_out, minlength=n).tolist()
    done_parts = [0] * n
    sinks = set(np.flatnonzero(g.loss_mask).tolist())
    exact = mode == "exact"
    GRAD = GRADIENT

    F = bytearray(n)                     # live forward values
    G = bytearray(n)                     # live gradients
    produced = bytearray(len(out_var))
    computes = [0] * nf
    timeline = np.zeros(len(ops), dtype=np.int64)
    live = live_act = 0                  # bytes(F)+bytes(G), and the same without param gradients
    peak = peak_act = 0
    peak_step = -1
    loss_grad_live = bytearray(n)        # exact mode: the ones tensor of each computed sink
    violations = res.violations

    def bad(step, msg):
        if len(violations) < MAX_VIOLATIONS:
            violations.append(f"op {step + 1}: {msg}")

    def first_missing(a):
        """(block, index) of the first backward output of var ``a`` not produced yet."""
        for k in np.flatnonzero(bw_out == a).tolist():
            k += op_[nf]
            if not produced[k]:
                blk = int(np.searchsorted(cols.out_ptr, k, side="right")) - 1
                return blk, k - op_[blk]
        return None

    for step, op in enumerate(ops):
        if op.kind == "compute":
            f = op.index
            if 0 <= f < nf:
                if op.grads:
                    bad(step, f"forward compute {f} lists gradient indices")
                if check:
                    for a in in_var[ip[f]:ip[f + 1]]:
                        if is_act[a] and not F[a]:
                            bad(step, f"compute {f} reads var {a} (forward), which is not live")
                computes[f] += 1
                y = fwd_out[f]
                if not F[y]:
                    F[y] = 1
                    live += vbytes[y]
                    live_act += vbytes[y]
                if exact and y in sinks and not loss_grad_live[y]:
                    loss_grad_live[y] = 1
                    live += vbytes[y]
                    live_act += vbytes[y]
            elif nf <= f < 2 * nf:
                if check:
                    for a, tag in zip(in_var[ip[f]:ip[f + 1]], in_tag[ip[f]:ip[f + 1]]):
                        if tag == GRAD:
                            if a in sinks:
                                if not F[a] and not loss_grad_live[a] and computes[f - nf] == 0:
                                    bad(step, f"compute {f} reads the loss gradient of var {a} "
                                              f"before the loss is computed")
                            elif not G[a]:
                                bad(step, f"compute {f} reads var {a} (gradient), which is not live")
                            elif done_parts[a] < parts[a]:
                                missing = first_missing(a)
                                bad(step, f"compute {f} reads the gradient of var {a} before "
                                          f"block {missing[0]} added its part")
                        elif is_act[a] and not F[a]:
                            bad(step, f"compute {f} reads var {a} (forward), which is not live")
                if not op.grads:
                    bad(step, f"backward compute {f} lists no gradient indices")
                base, count = op_[f], op_[f + 1] - op_[f]
                for j in op.grads:
                    if j >= count:
                        bad(step, f"compute {f}: gradient index {j} out of range "
                                  f"({count} outputs)")
                        continue
                    v = out_var[base + j]
                    if produced[base + j]:
                        bad(step, f"compute {f}: gradient index {j} produced twice")
                    else:
                        produced[base + j] = 1
                        done_parts[v] += 1
                    if not G[v]:
                        G[v] = 1
                        live += vbytes[v]
                        if is_act[v]:
                            live_act += vbytes[v]
            else:
                bad(step, f"compute {f}: no such function (M={2 * nf})")
            if live > peak or peak_step < 0:
                peak, peak_step = live, step
            peak_act = max(peak_act, live_act)
        else:
            v = op.index
            if not 0 <= v < n:
                bad(step, f"forget {v}: no such variable (N={n})")
            elif op.which == "forward":
                if F[v]:
                    F[v] = 0
                    live -= vbytes[v]
                    live_act -= vbytes[v]
            else:
                if G[v]:
                    G[v] = 0
                    live -= vbytes[v]
                    if is_act[v]:
                        live_act -= vbytes[v]
                if loss_grad_live[v]:
                    loss_grad_live[v] = 0
                    live -= vbytes[v]
                    live_act -= vbytes[v]
        timeline[step] = live

    comp = np.asarray(computes, dtype=np.int64)
    never = np.flatnonzero(comp == 0)
    if never.size:
        bad(len(ops) - 1, f"{never.size} forward function(s) never run, first {int(never[0])}")
    missing = np.flatnonzero(np.frombuffer(bytes(produced), np.uint8)[op_[nf]:] == 0) + op_[nf]
    if missing.size:
        blk = int(np.searchsorted(cols.out_ptr, missing[0], side="right")) - 1
        bad(len(ops) - 1, f"{missing.size} backward output(s) never produced, first block "
                          f"{blk} index {int(missing[0]) - op_[blk]}")
    res.peak_bytes = int(peak)
    res.peak_step = int(peak_step)
    res.peak_act_only_bytes = int(peak_act)
    res.computes = comp
    res.recompute_cost = int((t * np.maximum(comp - 1, 0)).sum())
    res.timeline = timeline
    return res

