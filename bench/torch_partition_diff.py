"""What torch's min-cut saves and recomputes against hgraph's plans, under real torch.compile.

A diagnostic for the points where hgraph's front does not dominate torch's (bench/NOTES_torch.md).
For one model (``examples/torch/NAME.py:model``) and one ``activation_memory_budget`` B:

1. ``torch.compile`` with torch's min-cut at B (``bench/torch_bench.py`` ``_recording_min_cut``,
   ``compiled_step``): allocator peak (``planner.torch.measure.allocator_peak``), fx-replay peak
   (``predict_step_peak``), the saved forward values (the backward module's non-tangent
   inputs: the forward's outputs after the user outputs) and the forward ops the backward
   recomputes with their FLOPs (``measure.recompute_flops``'s rule).
2. hgraph's front for the same step (``HGraphPartitioner``: one compile plans it), each plan's
   replayed peak and recompute FLOPs; the plans near torch's point (``--plans near``: the
   cheapest plan recomputing no more than torch and the one below it in peak; ``all``; or
   indices) compiled and measured like torch's, with the same listings and the set difference
   against torch's.
3. torch's saved set on hgraph's imported graph (``model_graph.from_joint`` of torch's own
   CSE'd joint graph): which saved values are planner vars, which were folded
   (``fold_unread``), which are backward-tagged ops the min-cut moved into the forward; the
   planner model's peak of keeping exactly the representable ones
   (``fixed_schedules.checkpoint_schedule`` + ``simulate.replay``), what ``planner.plan``
   returns at that peak (approx and exact), and torch's saved set split by hgraph's own
   partition function (fx replay, and compiled: allocator peak).

    python3 bench/torch_partition_diff.py gpt 1.0
    python3 bench/torch_partition_diff.py resnet 1.0 --plans all

About 6-10 Inductor compiles (10-30 s each on 2 CPU cores). If a killed compile left a
zero-byte ``*.so`` under ``/tmp/torchinductor_root`` ("file too short"), delete it.
"""

from __future__ import annotations

import argparse
import copy
import operator
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import torch_bench as tb  # noqa: E402  (bench/torch_bench.py)
from planner.torch.seeds import base_of, representable  # noqa: E402


def _wrap(inner):
    """``inner`` (a partitioner) that also records ``num_fwd_outputs`` per call."""
    import torch._inductor.custom_graph_pass as cgp

    class Recorded(cgp.CustomPartitionerFn):
        def __init__(self):
            self.inner, self.n_out = inner, []

        def __call__(self, gm, joint_inputs, **kwargs):
            self.n_out.append(kwargs["num_fwd_outputs"])
            return self.inner(gm, joint_inputs, **kwargs)

        def uuid(self):
            return None

        @property
        def parts(self):
            return self.inner.parts

    return Recorded()


class KeepPartitioner:
    """hgraph's partition function (:func:`planner.torch.partition.partition`) with a fixed set
    of fx node names to keep, on the CSE'd joint (names as torch's min-cut sees them)."""

    def __init__(self, keep):
        import torch._inductor.custom_graph_pass as cgp

        outer = self

        class P(cgp.CustomPartitionerFn):
            def __call__(self, gm, joint_inputs, **kwargs):
                from planner.torch.capture import cse
                from planner.torch.partition import partition

                joint = cse(gm)
                names = {n.name for n in joint.graph.nodes}
                outer.missing = sorted(set(outer.keep) - names)
                fw, bw = partition(joint, kwargs["num_fwd_outputs"], set(outer.keep) & names)
                outer.parts.append((joint, fw, bw))
                return fw, bw

            def uuid(self):
                return None

        self.keep, self.parts, self.missing, self.fn = set(keep), [], [], P()


def run_compiled(spec, part, budget=None) -> int:
    """Compile and run the step once, then its allocator peak (bytes) on a second run."""
    from planner.torch import measure as meter
    from planner.torch.capture import default_loss

    m = copy.deepcopy(spec.model)
    step = tb.compiled_step(m, spec.loss or default_loss, part, budget=budget)
    step(*spec.inputs)
    for p in m.parameters():
        p.grad = None
    return meter.allocator_peak(step, spec.inputs)[0]


def _tag(n):
    return n.meta.get("partitioner_tag", "")


def _nbytes(val) -> int:
    import torch

    return int(val.numel()) * int(val.element_size()) if isinstance(val, torch.Tensor) else 0


def _desc(n) -> str:
    val = n.meta.get("val")
    shape = "x".join(map(str, getattr(val, "shape", ()))) or "scalar"
    dtype = str(getattr(val, "dtype", "")).replace("torch.", "")
    return f"{shape} {dtype}"


def _op(n) -> str:
    t = getattr(n, "target", None)
    return getattr(t, "__name__", str(t)).replace(".default", "")


def saved_values(bw) -> dict:
    """name -> (description, bytes) of the backward's saved inputs (every placeholder but the
    tangents), in storage terms: parameters / inputs (and views of them) 0 B, a view of a
    storage already listed 0 B (so the bytes add up to ``predict_saved_bytes``)."""
    from planner.torch.measure import _storages

    out, seen = {}, set()
    free = {k for n in bw.graph.nodes if n.op == "placeholder" and n.name.startswith("primals_")
            for k, _ in _storages(n.meta.get("val"))}
    for n in bw.graph.nodes:
        if n.op == "placeholder" and not n.name.startswith("tangents"):
            st = _storages(n.meta.get("val"))
            b = sum(nb for k, nb in st if k not in free and k not in seen)
            seen.update(k for k, _ in st)
            out[n.name] = (_desc(n), b if not n.name.startswith("primals_") else 0)
    return out


def backward_flops(bw) -> int:
    """FLOPs of every non-view op the backward module runs (its own and recomputed ones): the
    work that ``recompute FLOPs`` alone miscounts where CSE renames a backward op as a
    forward one."""
    from planner.torch.costs import node_flops
    from planner.torch.model_graph import is_view

    return sum(node_flops(n) for n in bw.graph.nodes if n.op == "call_function"
               and n.target is not operator.getitem and not is_view(n))


def recomputed_ops(joint, bw) -> dict:
    """name -> (op, description, FLOPs) of the forward ops the backward runs again
    (``measure.recompute_flops``'s rule: a backward node whose name or ``recompute_of`` names
    a forward node; views and getitems are free). Repeated episodes add up."""
    from planner.torch.costs import node_flops
    from planner.torch.model_graph import is_view

    fwd = {n.name: n for n in joint.graph.nodes
           if n.op == "call_function" and _tag(n) == "is_forward"}
    out = {}
    for n in bw.graph.nodes:
        j = fwd.get(n.meta.get("recompute_of", n.name)) if n.op == "call_function" else None
        if j is not None and j.target is not operator.getitem and not is_view(j):
            op, d, f = out.get(j.name, (_op(j), _desc(j), 0))
            out[j.name] = (op, d, f + node_flops(j))
    return out


def show_side(title, peak, joint, fw, bw, status=None):
    from planner.torch import measure as meter

    sv, rc = saved_values(bw), recomputed_ops(joint, bw)
    by_name = {n.name: n for n in joint.graph.nodes}
    print(f"\n== {title}")
    print(f"allocator peak {peak:,} B | fx-replay peak {meter.predict_step_peak(fw, bw):,} B | "
          f"saved {meter.predict_saved_bytes(fw, bw):,} B | recompute "
          f"{sum(f for *_, f in rc.values()):,} FLOPs | all backward ops {backward_flops(bw):,} "
          f"FLOPs")
    print(f"saved ({len(sv)}; parameters / inputs and further views of a listed storage at "
          f"0 B, not shown):")
    for name, (d, b) in sv.items():
        if b:
            op = _op(by_name[name]) if name in by_name else "?"
            base = base_of(joint, name)
            op += f" of {base}" if base != name else ""
            st = f"  [{status(name)}]" if status else ""
            print(f"  {name:<14} {op:<34} {d:<18} {b:>8,} B{st}")
    print(f"recomputed in the backward ({len(rc)}):")
    for name, (op, d, f) in rc.items():
        print(f"  {name:<14} {op:<34} {d:<18} {f:>8,} FLOPs")
    by_base = {}                 # the diff compares storages: a saved view counts as its base
    for name, (d, b) in sv.items():
        base = base_of(joint, name)
        by_base[base] = (d, by_base.get(base, (d, 0))[1] + b)
    return by_base, rc


def show_diff(a_name, a, b_name, b):
    """Saved (by storage: a view as its base) and recomputed sets of ``a`` and ``b``."""
    (sa, ra), (sb, rb) = a, b
    only = lambda x, y: [k for k in x if k not in y and x[k][-1]]  # noqa: E731
    print(f"\n-- {a_name} vs {b_name}")
    for label, xs, src in ((f"saved by {a_name} only", only(sa, sb), sa),
                           (f"saved by {b_name} only", only(sb, sa), sb)):
        print(f"{label}: {sum(src[k][1] for k in xs):,} B: "
              + ", ".join(f"{k} ({src[k][1]:,})" for k in xs))
    for label, xs, src in ((f"recomputed by {a_name} only", only(ra, rb), ra),
                           (f"recomputed by {b_name} only", only(rb, ra), rb)):
        print(f"{label}: {sum(src[k][2] for k in xs):,} FLOPs: "
              + ", ".join(f"{k} {src[k][0]} ({src[k][2]:,})" for k in xs))


def _pick_plans(fr, torch_flops, which):
    if which == "all":
        return list(range(len(fr)))
    if which != "near":
        return [int(k) for k in which.split(",")]
    cheap = [k for k, c in enumerate(fr) if c.recompute_flops <= torch_flops]
    a = cheap[0] if cheap else len(fr) - 1
    return sorted({max(a - 1, 0), a})


def representability(spec_joint, n_out, torch_saved, torch_flops, torch_replay):
    """torch's saved set on hgraph's graph of the same (CSE'd) joint graph; see the docstring."""
    import planner
    from planner import simulate
    from planner.fixed_schedules import checkpoint_schedule
    from planner.torch import front as front_mod
    from planner.torch import measure as meter
    from planner.torch.model_graph import from_joint
    from planner.torch.partition import keep_names, partition

    tg = from_joint(spec_joint, n_out, decompose=True)
    raw = from_joint(spec_joint, n_out, decompose=True, fold=False)
    var = {name: i for i, name in enumerate(tg.var_node)}
    unfolded = set(raw.var_node)
    by_name = {n.name: n for n in spec_joint.graph.nodes}

    def status(name):
        n = by_name.get(name)
        if n is None:
            return "not in the joint graph"
        if name in var:
            return f"var {var[name]}"
        base = base_of(spec_joint, name)
        if base != name:
            return f"view of {base}: " + status(base)
        if _tag(n) == "is_backward":
            return "backward op (min-cut moved it to the forward)"
        if name in unfolded:
            return "folded by fold_unread"
        return "not a var (view / non-differentiable)"

    print("\n== torch's saved set on hgraph's imported graph (from_joint of torch's CSE'd joint)")
    print(f"graph: {tg.info['activations']} forward blocks, {len(tg.var_node)} vars "
          f"({len(raw.var_node)} before fold_unread)")
    groups = {}
    for name, (_, b) in torch_saved.items():
        if b:
            st = status(name).split(": ")[-1]
            groups.setdefault("var" if st.startswith("var") else st, []).append((name, b))
    for k, xs in groups.items():
        print(f"  {k}: {len(xs)} values, {sum(b for _, b in xs):,} B: "
              + ", ".join(f"{n} ({b:,})" for n, b in xs))
    subst = representable(spec_joint, [n for n, (_, b) in torch_saved.items() if b])
    print(f"torch's saved set made representable (views -> bases, backward ops -> their "
          f"forward inputs): {sorted(subst)}; not planner vars: {sorted(subst - set(var))}")
    keep_vars = {var[n] for n in subst if n in var}
    sched = checkpoint_schedule(tg.cg, keep_vars)
    sim = simulate.replay(tg.cg, sched, check=False)
    names = {tg.var_node[v] for v in keep_vars}
    fw, bw = partition(spec_joint, n_out, names)
    print(f"keeping exactly torch's saved vars ({len(keep_vars)}): planner-model peak "
          f"{sim.peak_bytes:,} B, model recompute cost {sim.recompute_cost:,}; "
          f"hgraph's partition of them: fx-replay peak {meter.predict_step_peak(fw, bw):,} B, "
          f"recompute {meter.recompute_flops(spec_joint, bw):,} FLOPs "
          f"(torch: {torch_replay:,} B, {torch_flops:,} FLOPs)")
    fw, bw = partition(spec_joint, n_out, subst)
    print(f"hgraph's partition of all of them (folded ones too): fx-replay peak "
          f"{meter.predict_step_peak(fw, bw):,} B, recompute "
          f"{meter.recompute_flops(spec_joint, bw):,} FLOPs")
    top = planner.plan(tg.cg, budget="100%")
    ct = front_mod.measured_candidate(tg, top)
    print(f"this graph's keep-all plan: model peak {top.peak_bytes:,} B; step replay "
          f"{ct.step_peak:,} B, {ct.recompute_flops:,} FLOPs")
    for solver in ("approx", "exact"):
        p = planner.plan(tg.cg, budget=int(sim.peak_bytes), solver=solver)
        c = front_mod.measured_candidate(tg, p)
        got = set(keep_names(tg.cg, p.schedule))
        print(f"planner.plan(budget={sim.peak_bytes:,}, {solver}): model peak "
              f"{p.peak_bytes:,} B, model recompute {p.recompute_cost:,}; step replay "
              f"{c.step_peak:,} B, {c.recompute_flops:,} FLOPs; keeps "
              f"{len(got)} vars, {len(got & names)} of torch's {len(names)}; "
              f"torch's not kept: {sorted(names - got)}; kept, not torch's: {sorted(got - names)}")
    return status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="examples/torch/NAME.py (resnet, gpt, unet)")
    ap.add_argument("budget", type=float, help="torch's activation_memory_budget")
    ap.add_argument("--plans", default="near",
                    help="hgraph front plans to compile: near (default), all, or indices 3,4")
    ap.add_argument("--no-torch-set", action="store_true",
                    help="skip compiling torch's saved set through hgraph's partition")
    args = ap.parse_args(argv)

    from planner.torch.compiled import HGraphPartitioner
    from planner.torch.model_file import load

    spec = load(os.path.join(tb.EXAMPLES, f"{args.model}.py:model"))
    from planner.torch import measure as meter

    # torch's min-cut at B
    part = _wrap(tb._recording_min_cut())
    peak = run_compiled(spec, part, budget=args.budget)
    tj, tfw, tbw = part.parts[-1]
    n_out = part.n_out[-1]
    torch_replay = meter.predict_step_peak(tfw, tbw)
    t_side = show_side(f"torch.compile {args.budget} (min-cut)", peak, tj, tfw, tbw)
    torch_flops = sum(f for *_, f in t_side[1].values())

    status = representability(tj, n_out, t_side[0], torch_flops, torch_replay)
    print("\n(torch's saved values again, by status on hgraph's graph)")
    for name, (d, b) in t_side[0].items():
        if b:
            print(f"  {name:<14} {d:<18} {b:>8,} B  [{status(name)}]")

    # hgraph's front (planned inside one compile), then the chosen plans compiled
    fronts = {}
    run_compiled(spec, HGraphPartitioner("100%", fronts=fronts, whole_front=True))
    fr = next(iter(fronts.values()))[0]
    chosen = _pick_plans(fr, torch_flops, args.plans)
    print(f"\n== hgraph's front ({len(fr)} plans; fx-replay peak, recompute FLOPs; "
          f"* = compiled below)")
    for k, c in enumerate(fr):
        which = "cse" if c.joint is next(iter(fronts.values()))[2] else "traced"
        print(f" {'*' if k in chosen else ' '}#{k:<3} {c.step_peak:>9,} B {c.recompute_flops:>10,} "
              f"FLOPs  {which} graph, planner budget {c.plan.budget_bytes:,}, "
              f"model peak {c.plan.peak_bytes:,}")
    for k in chosen:
        c = fr[k]
        hp = HGraphPartitioner(int(c.step_peak), fronts=fronts, whole_front=True)
        hpeak = run_compiled(spec, hp)
        assert hp.plans[-1] is c.plan, "the front's pick moved"
        hj, hfw, hbw = hp.parts[-1]
        h_side = show_side(f"hgraph #{k}", hpeak, hj, hfw, hbw, status)
        show_diff(f"torch {args.budget}", t_side, f"hgraph #{k}", h_side)

    if not args.no_torch_set:
        kp = KeepPartitioner(representable(tj, [n for n, (_, b) in t_side[0].items() if b]))
        kpeak = run_compiled(spec, kp.fn)
        kj, kfw, kbw = kp.parts[-1]
        if kp.missing:
            print(f"\n(torch's saved names not in this compile's joint: {kp.missing})")
        k_side = show_side("torch's saved set (representable) through hgraph's partition()", kpeak, kj, kfw,
                           kbw, status)
        show_diff(f"torch {args.budget}", t_side, "torch's set via hgraph", k_side)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
