"""Apply a plan to a PyTorch training step: a partitioner that saves exactly the plan's tensors.

The plan's schedule says which forward values are still live when the backward phase starts
(:func:`kept_vars`): those are the tensors the forward hands the backward; every other forward
value the backward reads is recomputed there from kept values, parameters and inputs
(``torch._functorch.partitioners._extract_fwd_bwd_modules`` copies the forward ops it needs into
the backward graph; ``reordering_to_mimic_autograd_engine`` then places each recomputation just
before its first use, as the autograd engine would run the backward). Where the plan recomputes a
value more than once, :mod:`planner.torch.episodes` gives each of its recompute episodes its own
copy in the backward, in the plan's order.

Two ways in:

* :func:`apply_plan` — ``aot_function`` with this partition function, forward and backward run
  as traced (no compiler): for users who do not compile. Captured undecomposed, the graph runs
  the same aten ops eager autograd runs, so gradients equal eager's bit for bit.
* :func:`planner.torch.compiled.compile_model` — ``torch.compile`` with hgraph as Inductor's
  partitioner (``torch._inductor.config.custom_partitioner_fn``), splitting by :func:`partition`.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import torch
from torch._functorch.partitioners import (_extract_fwd_bwd_modules,
                                           reordering_to_mimic_autograd_engine)

from hgraph.common.errors import HGraphError
from planner.torch import capture as cap
from planner.torch.episodes import follow_episodes
from planner.torch.model_graph import is_random, is_view
from planner.walk import ScheduleWalker

__all__ = ["kept_vars", "saved_nodes", "partition", "apply_plan", "apply_keep", "plan_capture",
           "keep_names", "functionalize_rng", "rng_state_bytes", "replay_under", "graphs_only"]


def kept_vars(g, schedule) -> set:
    """Forward vars whose forward-phase value the schedule's backward reads (what torch saves).

    A var live when the backward phase starts (every forward block has run) is kept only if a backward block or a
    recomputation reads it before the backward forgets it; one the backward forgets first is
    recomputed there, which is what the partition does with a value it does not save.
    """
    return _Kept(g).walk(schedule.ops)


class _Kept(ScheduleWalker):
    """:func:`kept_vars` as a visitor of the schedule walk (:mod:`planner.walk`): the values
    the forward phase left live (by var), and which of them a backward-phase step reads."""

    def __init__(self, g):
        super().__init__(g)
        self.fwd_live, self.kept = set(), set()
        self.ran, self.started = 0, False

    def visit(self, s: int, op) -> None:
        if op.kind == "forget":
            if op.which == "forward":
                self.fwd_live.discard(op.index)
        elif self.started:                       # a backward block or a recomputation
            self.kept.update(v for v in (self.buf_var[b] for b in self.reads
                                         if not self.buf_grad[b]) if v in self.fwd_live)
        elif op.index < self.nf:
            self.fwd_live.add(self.buf_var[self.writes[0][1]])
            self.ran += self.computes[op.index] == 1
            self.started = self.ran == self.nf   # the forward phase ends once every block ran

    def finish(self, n: int) -> set:
        return {v for v in self.kept if self.g.is_activation[v]}


def plan_capture(g) -> str:
    """``"inductor"`` or ``"eager"``: how the planned graph was captured (its details say)."""
    if not g.forward:
        raise HGraphError("the plan's graph has no forward functions")
    try:
        return json.loads(g.forward[0].details)["capture"]
    except (ValueError, KeyError):
        raise HGraphError(f"{g.path or 'graph'}: not a graph imported from PyTorch "
                          f"(no 'capture' in its details); import it with "
                          f"'hgraph graph torch FILE.py:FUNC'") from None


def _tag(n):
    return n.meta.get("partitioner_tag", "")


def rng_state_bytes(node) -> int:
    """Bytes of the generator state that replays ``node``'s random numbers (the CPU generator's
    Mersenne-Twister state; a CUDA generator's seed and offset)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    cuda = any(isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in vals)
    return 16 if cuda else int(torch.get_rng_state().numel())


def _saved_random(node) -> bool:
    """A random op the backward reads through a recomputation is saved when its output is no
    larger than the RNG state that would replay it (Inductor's ``inductor_seeds``: a few int64
    seeds, from which each dropout's mask is recomputed exactly); a larger one, or one with
    several outputs (``native_dropout``: a tuple is no saveable value), is recomputed with the
    forward's RNG state (:func:`functionalize_rng`)."""
    val = node.meta.get("val")
    return (is_random(node) and isinstance(val, torch.Tensor)
            and val.numel() * val.element_size() <= rng_state_bytes(node))


def saved_nodes(joint, keep: set) -> list:
    """Forward nodes to save: the kept ones (and inputs) that the backward reaches.

    Walks back from every forward value a backward op reads: a kept node or a placeholder is
    saved, anything else is recomputed in the backward, so its own inputs are walked too. A
    random op is never drawn anew: a small one is saved (:func:`_saved_random`), a larger one
    replayed from the forward's RNG state (:func:`functionalize_rng`).
    """
    saved, seen = {}, set()
    stack = []
    for n in joint.graph.nodes:
        if n.op == "call_function" and _tag(n) == "is_backward":
            stack.extend(a for a in n.all_input_nodes if _tag(a) == "is_forward"
                         or (a.op == "placeholder" and not a.name.startswith("tangents")))
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder" or (n.name in keep and not is_view(n)) or _saved_random(n):
            saved[n] = None
        else:
            stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(joint.graph.nodes)}
    return sorted(saved, key=order.__getitem__)


def _fake_rng_state(node):
    """A fake tensor shaped like the generator state of ``node``'s device (for ``meta["val"]``)."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = detect_fake_mode() or FakeTensorMode()
    real = torch.empty(rng_state_bytes(node), dtype=torch.uint8)
    return mode.from_tensor(real)


def replay_under(mode_cls) -> None:
    """Let the RNG replay operators of :func:`functionalize_rng` run under a
    ``TorchDispatchMode`` of type ``mode_cls`` (a meter: MemTracker, a FLOP counter).

    A higher-order operator needs a rule per dispatch mode and torch has none for these
    meters; this one runs the operator's own kernel with the mode active, so the meter sees
    the random op (its allocations, its FLOPs) as it sees any other.
    """
    from torch._C import DispatchKey
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    for hop in (run_and_save_rng_state, run_with_rng_state):
        if mode_cls in hop.python_key_table:
            continue
        kernel = hop.py_kernels[DispatchKey.BackendSelect]

        def under_mode(mode, *args, _kernel=kernel, **kwargs):
            with mode:
                return _kernel(*args, **kwargs)

        hop.py_impl(mode_cls)(under_mode)


def functionalize_rng(fw, bw) -> int:
    """Replay the forward's random numbers wherever the backward recomputes a random op.

    As torch's partitioner does for checkpointed regions (``functionalize_rng_ops``): the
    forward runs each such op through ``run_and_save_rng_state`` and hands the state it ran
    with to the backward (one more saved value, :func:`rng_state_bytes`); every copy of the op
    in the backward, one per recompute episode (``meta["recompute_of"]``), runs through
    ``run_with_rng_state`` with that state, so it draws exactly the forward's numbers and leaves
    the generator where it was. Returns the number of ops rewritten.
    """
    import operator

    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    fw_random = {n.name: n for n in fw.graph.nodes if n.op == "call_function" and is_random(n)}
    copies = {}
    for n in bw.graph.nodes:
        origin = n.meta.get("recompute_of", n.name)
        if n.op == "call_function" and origin in fw_random and is_random(n):
            copies.setdefault(origin, []).append(n)
    if not copies:
        return 0
    out = next(iter(fw.graph.find_nodes(op="output")))
    tangent = next((n for n in bw.graph.find_nodes(op="placeholder") if "tangent" in n.name),
                   None)
    if tangent is None:
        raise HGraphError("cannot replay random ops: the backward graph has no tangent input")
    states = []
    for k, (name, bw_nodes) in enumerate(copies.items()):
        node = fw_random[name]
        with fw.graph.inserting_before(node):
            both = fw.graph.call_function(run_and_save_rng_state, (node.target, *node.args),
                                          dict(node.kwargs))
            state = fw.graph.call_function(operator.getitem, (both, 0))
            state.meta["val"] = _fake_rng_state(node)
            value = fw.graph.call_function(operator.getitem, (both, 1))
            value.meta = dict(node.meta)
        node.replace_all_uses_with(value)
        fw.graph.erase_node(node)
        states.append(state)
        with bw.graph.inserting_before(tangent):
            ph = bw.graph.placeholder(f"rng_state_{k}")
            ph.meta["val"] = state.meta["val"]
        for b in bw_nodes:
            with bw.graph.inserting_before(b):
                again = bw.graph.call_function(run_with_rng_state, (ph, b.target, *b.args),
                                               dict(b.kwargs))
                again.meta = dict(b.meta)
            b.replace_all_uses_with(again)
            bw.graph.erase_node(b)
    outs = list(out.args[0])
    out.args = (tuple(outs + states),)     # saved values end the outputs (no symbolic sizes)
    fw.recompile()
    bw.recompile()
    return len(copies)


def snapshot_inputs(joint, names) -> set:
    """Give the backward a forward-time copy of the placeholders ``names``; their new names.

    Buffers (batch norm's running statistics) are updated in place after the forward; a
    backward that saved the buffer itself (to recompute a batch norm) then fails autograd's
    version check. Every reader of the buffer reads a clone taken at the start of the forward
    instead (the same values); the clone is what gets saved.
    """
    g = joint.graph
    first = next(n for n in g.nodes if n.op != "placeholder")
    made = set()
    for ph in [n for n in g.nodes if n.op == "placeholder" and n.name in names]:
        users = list(ph.users)
        if not users:
            continue
        with g.inserting_before(first):
            copy = g.call_function(torch.ops.aten.clone.default, (ph,))
        copy.meta.update(val=ph.meta["val"], partitioner_tag="is_forward")
        for u in users:
            u.replace_input_with(ph, copy)
        made.add(copy.name)
    joint.recompile()
    return made


def partition(joint, num_fwd_outputs: int, keep: set, snapshot=(), plan=None):
    """(forward module, backward module) that keep exactly ``keep`` (fx node names).

    ``snapshot``: placeholder names the backward must read as forward-time copies
    (:func:`snapshot_inputs`). ``plan``: the plan (anything with the ``graph`` made from
    ``joint`` and a ``schedule``) whose
    recompute episodes the backward follows (:func:`planner.torch.episodes.follow_episodes`);
    None: each value not saved is recomputed once.
    """
    if snapshot:
        keep = set(keep) | snapshot_inputs(joint, set(snapshot))
    saved = saved_nodes(joint, keep)
    fw, bw = _extract_fwd_bwd_modules(joint, saved, [], num_fwd_outputs=num_fwd_outputs)
    fw.graph.eliminate_dead_code()
    bw.graph.eliminate_dead_code()
    bw = reordering_to_mimic_autograd_engine(bw)
    if plan is not None:
        follow_episodes(bw, joint, plan.graph, plan.schedule)
    functionalize_rng(fw, bw)
    return fw, bw


@contextmanager
def graphs_only():
    """fx graph modules made inside have graphs but no generated code: lazy graph modules
    (``_use_lazy_graph_module``, what torch's own partitioner builds), and the plain
    ``GraphModule`` that ``reordering_to_mimic_autograd_engine`` makes skips its
    ``recompile``. Generating and compiling a module's Python code is about a sixth of a
    partition of a 2,000-node joint graph, three modules per candidate, and a priced
    candidate is never run (nor a min-cut partition whose saved names are all that is read,
    :func:`planner.torch.seeds.min_cut_keeps`); calling one made here fails (it has no
    ``forward``), never runs stale code."""
    from torch.fx._lazy_graph_module import _use_lazy_graph_module
    from torch.fx.graph_module import GraphModule

    real = GraphModule.recompile
    GraphModule.recompile = lambda self: None
    try:
        with _use_lazy_graph_module(True):
            yield
    finally:
        GraphModule.recompile = real


def keep_names(g, schedule) -> set:
    """fx node names of the kept vars (the importer's zero-byte keep block owns no node)."""
    from planner.torch.model_graph import KEEP

    return {g.var_names[v] for v in kept_vars(g, schedule)} - {KEEP}


def apply_plan(model, plan, inputs, loss=None):
    """A training step ``step(*inputs) -> loss`` that runs the plan (aot_function, no compiler).

    ``plan``: a :class:`planner.api.Plan` made on a graph from :func:`planner.torch.graph`
    (``decompose=False`` for gradients bitwise equal to eager). Gradients accumulate into the
    model's parameters' ``.grad`` as ``loss.backward()`` would.
    """
    g = plan.graph
    return apply_keep(model, keep_names(g, plan.schedule), plan_capture(g) == "inductor",
                      loss=loss, plan=plan)


def apply_keep(model, keep: set, decompose: bool, loss=None, plan=None):
    """:func:`apply_plan` for an explicit set of fx node names to keep (``plan``: whose
    recompute episodes the backward follows, see :func:`partition`)."""
    step = cap.make_step(model, loss)
    info = {}
    first = len(step.params)         # placeholders: params, buffers, inputs (in that order)
    buffers = {f"primals_{i + 1}" for i in range(first, first + len(step.buffers))}

    def partition_fn(joint, _joint_inputs, *, num_fwd_outputs, **_kw):
        names = {n.name for n in joint.graph.nodes}
        missing = sorted(keep - names)
        if missing:
            raise HGraphError(f"the plan does not match this model: node {missing[0]} is not "
                              f"in its training step (re-import the model)")
        fw, bw = partition(joint, num_fwd_outputs, keep, snapshot=buffers, plan=plan)
        info["forward"], info["backward"] = fw, bw
        return fw, bw

    fn = cap.traced(step, partition_fn, decompose)
    fixed = {}

    def run(*xs):
        args = step.args(xs)
        shapes = _signature([*args[2], *xs])
        if "shapes" not in fixed:
            fixed["shapes"] = shapes
        elif shapes != fixed["shapes"]:
            raise HGraphError(f"this step was planned for inputs {_show(fixed['shapes'])} and "
                              f"got {_show(shapes)}: a planned step is fixed to its shapes; "
                              f"plan again for the new shapes, or use planner.torch.compile, "
                              f"which re-plans when shapes change")
        out = cap.call_traced(fn, *args)
        out.backward()
        return out.detach()

    run.partition = info
    run.step_reads = lambda: list(step.consts)      # labels the loss reads (measure_step)
    return run


def _signature(tensors) -> tuple:
    return tuple((tuple(t.shape), t.dtype, t.device.type) if isinstance(t, torch.Tensor)
                 else type(t).__name__ for t in tensors)


def _show(sig) -> str:
    return "(" + ", ".join("x".join(map(str, s[0])) or "scalar" if isinstance(s, tuple) else s
                           for s in sig) + ")"
