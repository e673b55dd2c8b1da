"""A graph's front for ``pt.compile``'s measured trials, each candidate priced only when a
trial's choice could be it.

Why: :class:`planner.torch.compiled.CompiledStep` compiles and measures at most
:data:`~planner.torch.compiled.TRIALS` candidates of a graph's front, yet the whole front
(:func:`planner.torch.front.union` of the traced graph's plans and the merged graph's plans and
torch's min-cut partitions) partitions and replays every one of them (48 on
examples/torch/gpt.py). Each plan has lower bounds on its step peak and recomputed FLOPs from
the joint graph (:class:`planner.torch.front._Shortlist`, :mod:`planner.torch.bounds`: no
partition built), and so does each min-cut partition; :meth:`TrialFront.choose` prices in the
order of those bounds and stops where no unpriced candidate can be the choice, and gives the
candidate the whole front would give (the same one, ties to the same one; the test holds it
against the whole front).
"""

from __future__ import annotations

import numpy as np

from planner.torch import front as front_mod

__all__ = ["TrialFront", "choose_on"]


class TrialFront:
    """The candidates of the front of one graph, lazily priced: ``shortlists`` (one
    :class:`front._Shortlist` per graph, their plans in the order :func:`front.front` lists
    them) and ``seeds`` (label -> keep set of min-cut partitions on ``seed_tg``, the merged
    graph, offered as :func:`front.front` offers them: those equal to a plan's kept set left
    out). Candidate ``i`` is the ``i``-th in that order, which is how the whole front breaks
    ties (:func:`front.union`: by step peak, recompute FLOPs, then ``i``)."""

    def __init__(self, shortlists, seeds=None, seed_tg=None):
        """``seed_tg``'s plans are the last shortlist's (a seed equal to one is left out)."""
        from planner.torch.bounds import JointIndex
        from planner.torch.partition import keep_names

        self._price, self.keep, plan = [], [], []
        peaks, flops = [], []
        for s in shortlists:
            for j, p in enumerate(s.plans):
                self._price.append(lambda s=s, j=j: s.price(j))
                self.keep.append(frozenset(keep_names(p.graph, p.schedule)))
            peaks.append(s.peak_lb)
            flops.append(s.flops_lb)
            plan += [True] * len(s.plans)
        taken = set(self.keep[len(self.keep) - len(shortlists[-1].plans):]) if shortlists else set()
        seeds = [(label, frozenset(k)) for label, k in (seeds or {}).items()
                 if frozenset(k) not in taken]
        if seeds:
            index = JointIndex(seed_tg.joint, seed_tg.num_fwd_outputs)
            got = np.array([index.bounds(k) for _, k in seeds], dtype=np.int64).reshape(-1, 2)
            peaks.append(got[:, 0])
            flops.append(got[:, 1])
            for label, k in seeds:
                self._price.append(lambda k=k, label=label: _seeded(seed_tg, k, label))
                self.keep.append(k)
                plan.append(False)
        self.peak_lb = np.concatenate(peaks) if peaks else np.zeros(0, np.int64)
        self.flops_lb = np.concatenate(flops) if flops else np.zeros(0, np.int64)
        self.plan = np.array(plan, dtype=bool)
        self.priced = {}            # candidate index -> Candidate

    def __len__(self) -> int:
        return len(self._price)

    def price(self, i: int):
        """Candidate ``i`` partitioned and replayed (once)."""
        if i not in self.priced:
            self.priced[i] = self._price[i]()
        return self.priced[i]

    def on_front(self, i: int) -> bool:
        """Whether priced candidate ``i`` is on the whole front (:func:`front.union`): a
        min-cut partition always; a plan unless a plan before it (by step peak, FLOPs, index)
        recomputes no more. Every plan whose bounds could make it such is priced first."""
        c = self.price(i)
        if not self.plan[i]:
            return True
        me = (c.step_peak, c.recompute_flops, i)
        for j in np.flatnonzero(self.plan & (self.peak_lb <= c.step_peak)
                                & (self.flops_lb <= c.recompute_flops)):
            d = self.price(int(j))
            if (d.step_peak, d.recompute_flops, int(j)) < me and \
                    d.recompute_flops <= c.recompute_flops:
                return False
        return True

    def lowest(self, left) -> int | None:
        """Of the front's candidates in ``left`` (indices), the one of least (step peak,
        FLOPs, index), or None."""
        best = None
        for i in np.lexsort((np.arange(len(self)), self.peak_lb)):
            if best is not None and self.peak_lb[i] > best[0]:
                break
            i = int(i)
            if i in left and self.on_front(i):
                c = self.priced[i]
                key = (c.step_peak, c.recompute_flops, i)
                best = key if best is None or key < best else best
        return None if best is None else best[2]

    def cheapest(self, left, scale: float, target: float, below_flops=None) -> int | None:
        """Of the front's candidates in ``left`` whose step peak times ``scale`` is within
        ``target`` (and, given ``below_flops``, recomputing fewer FLOPs), the one of least
        (FLOPs, step peak, index), or None: :func:`planner.search.cheapest` on the front."""
        best = None
        for i in np.lexsort((np.arange(len(self)), self.flops_lb)):
            if best is not None and self.flops_lb[i] > best[0]:
                break
            i = int(i)
            if i not in left or scale * self.peak_lb[i] > target or (
                    below_flops is not None and self.flops_lb[i] >= below_flops):
                continue
            c = self.price(i)
            if scale * c.step_peak > target or (below_flops is not None
                                                and c.recompute_flops >= below_flops):
                continue
            if self.on_front(i):
                key = (c.recompute_flops, c.step_peak, i)
                best = key if best is None or key < best else best
        return None if best is None else best[2]


def _seeded(tg, keep, label: str):
    """The min-cut partition ``keep`` priced (:func:`front.seeded_candidate`), a stage of the
    progress as the whole front's pricing of them is."""
    from hgraph.common.progress import current

    with current().stage("step front: min-cut partitions"):
        return front_mod.seeded_candidate(tg, keep, label)


def choose_on(left: list, dflt, scale: float, target: float, m0: float, lowest: bool):
    """The choice :class:`planner.torch.compiled.CompiledStep` makes for a trial, on a whole
    front's candidates ``left`` (front order): the definition :class:`TrialFront` meets
    without pricing them all (the test and ``bench/trial_front_bench.py`` hold the two equal).
    ``"min"`` (``lowest``): the lowest replayed; else the least recompute among those whose
    replayed peak times ``scale`` fits ``target`` (when torch's default step, measured at
    ``m0``, fits, only those recomputing less than ``dflt``), and where none does and torch's
    default does not either, the lowest replayed."""
    from planner import search

    if not left:
        return None
    by_peak = min(left, key=lambda c: (c.step_peak, c.recompute_flops))
    if lowest:
        return by_peak
    fit = search.cheapest(
        [c for c in left if m0 > target or c.recompute_flops < dflt.recompute_flops],
        target, lambda c: (scale * c.step_peak, (c.recompute_flops, c.step_peak)))
    return fit if fit is not None or m0 <= target else by_peak
