"""A captured joint graph as a planner graph (:class:`planner.cg.ComputationalGraph`).

Mapping (one var per tensor the forward computes, one forward block per var):

* placeholders ``primals_*`` (parameters, buffers, inputs) and forward values that read no
  differentiable value (constants, casts of data) are non-activation vars;
* view / alias ops are folded into the tensor they alias (they own no memory, cost nothing);
* a multi-output op (``var_mean``, the max-pool prims, attention, losses) gives one forward
  block per output (its ``getitem``), each reading the op's inputs and costing the whole op —
  recomputing any one output runs the op; the block's details name the op's node (``"group"``)
  so the outputs are known to be siblings;
* backward: ops carry ``seq_nr`` of the forward op they differentiate. A forward value a
  backward op reads is an ``input`` read of the backward block of the first forward block of
  that ``seq_nr`` (or the closest earlier one) when it is that block's input; otherwise of the
  first forward block that reads it (a value no forward op reads gets one: the zero-cost
  ``hgraph.keep`` block). A sibling output of the op a backward op differentiates (batch
  norm's saved statistics, max-pool indices) is an ``output`` read of its own block's backward
  instead: torch keeps it until that op's backward, so the plan must too (or recompute it).

Every block's details JSON carries ``node`` (the fx node name), ``op``, ``cost`` (FLOPs or
measured ns, :mod:`planner.torch.costs`) and ``capture`` (``inductor`` / ``eager``), so a graph
written to a file plans with the same costs and can be applied back to the model.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field

import torch

from hgraph.common.errors import HGraphError
from planner import cg
from planner.torch import capture as cap
from planner.torch import costs as costs_mod

__all__ = ["TorchGraph", "import_model", "from_joint", "is_view", "is_random", "UnsupportedOp",
           "seq_lookup"]


class UnsupportedOp(HGraphError):
    """An op the bridge cannot plan (a mutating op: recomputation would change its input)."""


@dataclass
class TorchGraph:
    """An imported training step: the planner graph plus what maps it back onto the fx graph.

    ``cg``: the planner graph; ``joint``: the fx joint GraphModule; ``var_node``: fx node name
    holding each var (list, var id order); ``decompose``: captured as Inductor sees it.
    """

    cg: object
    joint: object
    var_node: list
    num_fwd_outputs: int
    decompose: bool
    source: str | None = None
    info: dict = field(default_factory=dict)
    #: Plan fronts of this graph by their arguments (:func:`planner.torch.front.front`):
    #: computed once, every later budget is picked from them.
    fronts: dict = field(default_factory=dict, repr=False, compare=False)
    #: How :attr:`step_slack` is measured the first time it is read (``meter(tg) -> bytes``;
    #: :func:`planner.torch.graph` sets it), or None: the slack is what was set (0 if nothing).
    slack_meter: object = field(default=None, repr=False, compare=False)
    _slack: int | None = field(default=0, repr=False, compare=False)
    #: ``meter(tg, c) -> bytes``: the allocator's peak of candidate ``c``'s step
    #: (:func:`planner.torch.slack.checked_pick`), or None: picks are priced, not measured.
    step_meter: object = field(default=None, repr=False, compare=False)
    #: The allocator's peaks of the candidates measured so far, by their kept names.
    measured_peaks: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def step_slack(self) -> int:
        """Bytes the allocator measures over the replay (kernel scratch, scalars no fx node
        holds), added to every candidate's step peak (:func:`planner.torch.slack.measured_slack`);
        0 when not measured.

        Measured lazily, by :attr:`slack_meter`, the first time a price reads it, and kept:
        measuring runs the keep-everything step (about half of ``pt.graph`` on a 12-layer
        GPT-2), which a graph that is never priced (exported, or planned by ``pt.plan``) need
        not pay, so capture costs what the trace costs. While the meter runs the slack reads 0:
        the meter prices the keep-everything step by its replay alone, which is what it
        subtracts from the allocator's peak."""
        if self._slack is None:
            meter, self._slack = self.slack_meter, 0
            try:
                self._slack = int(meter(self))
            except BaseException:
                self._slack = None          # not measured: the next read tries again
                raise
        return self._slack

    @step_slack.setter
    def step_slack(self, value: int) -> None:
        self._slack = int(value)

    def slack_by(self, meter) -> None:
        """:attr:`step_slack` to be measured by ``meter(tg) -> bytes`` when first read."""
        self.slack_meter, self._slack = meter, None


def is_view(node) -> bool:
    """True for ops whose output aliases their first input (view, permute, alias, expand ...)."""
    t = node.target
    if t is operator.getitem:
        return is_view(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else False
    schema = getattr(t, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def view_source(node):
    """The node a view reads its storage from: its first argument, or for a ``getitem`` of a
    tuple-returning view (``split``) that view's first argument."""
    return node.args[0].args[0] if node.target is operator.getitem else node.args[0]


def _tag(node) -> str:
    return node.meta.get("partitioner_tag", "")


def _dropout_p(node):
    """The op's ``dropout_p`` argument (attention kernels are seeded only when it is > 0)."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "dropout_p" not in names:
        return None
    i = names.index("dropout_p")
    if "dropout_p" in node.kwargs:
        return node.kwargs["dropout_p"]
    return node.args[i] if i < len(node.args) else schema.arguments[i].default_value


def is_random(node) -> bool:
    """A seeded random op (dropout, ``rand_like``, Inductor's ``inductor_seeds``, attention with
    ``dropout_p > 0``): running it again draws new numbers unless its RNG state is replayed
    (:func:`planner.torch.partition.functionalize_rng`)."""
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags and _dropout_p(node) != 0


def _check_supported(node, source):
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        raise UnsupportedOp(f"{source or 'model'}: unsupported op {node.target} (node "
                            f"{node.name}): it mutates its input, so recomputing it would "
                            f"change the step; make the op out of place (e.g. inplace=False)")


def _op_name(target) -> str:
    name = str(target) if not callable(target) or hasattr(target, "_schema") else target.__name__
    return name.replace(" ", "_") or "op"


def _nbytes(val) -> int:
    return int(val.numel()) * int(val.element_size())


def _differentiable_inputs(joint, num_fwd_outputs: int) -> set:
    """Placeholders the step differentiates: the joint graph returns a gradient for them."""
    out = next(n for n in reversed(joint.graph.nodes) if n.op == "output")
    grads = list(out.args[0])[num_fwd_outputs:]
    primals = [n for n in joint.graph.nodes if n.op == "placeholder"
               and not n.name.startswith("tangents")]
    return {p for p, gr in zip(primals, grads) if gr is not None}


def _wanted_forward(joint, num_fwd_outputs: int) -> set:
    """Forward nodes the loss or the backward depends on (running-stat updates are not)."""
    nodes = list(joint.graph.nodes)
    out = next(n for n in reversed(nodes) if n.op == "output")
    fwd_outs = list(out.args[0])[:num_fwd_outputs]
    n_tangents = sum(1 for n in nodes if n.op == "placeholder" and n.name.startswith("tangents"))
    stack = [n for n in fwd_outs[len(fwd_outs) - n_tangents:] if isinstance(n, torch.fx.Node)]
    for n in nodes:
        if n.op == "call_function" and _tag(n) == "is_backward":
            stack.extend(a for a in n.all_input_nodes if _tag(a) == "is_forward")
    seen = set()
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


#: The type (and var name) of the zero-cost block that reads backward-only values.
KEEP = "hgraph.keep"


def _add_keep_block(fwd, produced, var_bytes, var_names, var_node, op_cost):
    """Append a zero-byte, zero-cost block reading the values only the backward reads.

    The planner's model keeps a value through the forward only on a block boundary (a later
    block reads it), so a value no forward op reads (batch norm's saved statistics, max-pool
    indices) would always be recomputed. This block reads every value no forward op reads (those
    and the loss), so a plan may keep them and the graph has one sink, as the DP needs; it owns
    nothing and costs nothing.
    """
    consumed = {v for _, _, ins in fwd for v in ins}
    leaves = sorted(var_of_block for var_of_block in produced if var_of_block not in consumed)
    op_cost[KEEP] = 0
    var_bytes.append(0)
    var_names.append(KEEP)
    var_node.append(KEEP)
    fwd.append((KEEP, KEEP, leaves))


def _backward_read(nodes, var_of) -> set:
    """Vars (of forward values) that some backward op reads."""
    return {var_of[a] for n in nodes if n.op == "call_function" and _tag(n) == "is_backward"
            for a in n.all_input_nodes if a in var_of and _tag(a) != "is_backward"}


def fold_unread(fwd, outs, read: set, op_cost: dict, var_bytes):
    """Fold every forward value no backward op reads into the blocks that read it.

    ``fwd``: (node, op node, input vars) per block in graph order, ``outs`` their output vars
    (``var_bytes`` their sizes);
    ``read``: vars some backward op reads. A value no backward op reads (most of a decomposed
    graph's pointwise intermediates: batch norm's centring and scaling, GELU's pieces) is never
    kept by torch: the partition saves values the backward reads and recomputes what lies
    between. As a block of its own such a value would sit on lower-set boundaries, where the
    planner's model keeps it until the backward (a peak torch never has). Folded, its readers
    read its inputs instead and cost its cost too (recomputing one runs the chain again, as
    Inductor's fused kernel does), so the graph's forward values are the ones the backward (or
    a recomputation) reads and the forward's results. A value smaller than everything made from
    it stays (max-pool's int8 offsets, from which the int64 indices are recomputed): keeping it
    may beat keeping what the backward reads. Returns (blocks, their costs, folded vars).
    """
    smallest_reader = {}         # var -> bytes of the smallest value a block makes from it
    for (_, _, ins), y in zip(fwd, outs):
        for v in ins:
            smallest_reader[v] = min(smallest_reader.get(v, var_bytes[y]), var_bytes[y])
    expand, extra, out, cost = {}, {}, [], []
    for (n, op, ins), y in zip(fwd, outs):
        new_ins, add = [], 0
        for v in ins:
            new_ins.extend(u for u in expand.get(v, (v,)) if u not in new_ins)
            add += extra.get(v, 0)
        c = int(op_cost[op]) + add
        if y not in read and y in smallest_reader and var_bytes[y] >= smallest_reader[y]:
            expand[y], extra[y] = new_ins, c
            continue
        out.append((n, op, new_ins))
        cost.append(c)
    return out, cost, set(expand)


def seq_lookup(seq: list):
    """``block(s)``: the forward block a backward op of ``seq_nr`` ``s`` differentiates.

    ``seq``: the ``seq_nr`` of each forward block's op, in block order. The first block of
    that ``seq_nr``, or of the closest earlier one (a decomposed op's pieces share it).
    """
    import bisect

    first_of_seq = {}
    for i, s in enumerate(seq):
        first_of_seq.setdefault(s, i)
    seq_keys = sorted(first_of_seq)

    def block(s):
        k = bisect.bisect_right(seq_keys, s) - 1
        return first_of_seq[seq_keys[k]] if k >= 0 else 0

    return block


def from_joint(joint, num_fwd_outputs: int, decompose: bool, costs: str = "flops",
               source: str | None = None, fold: bool = True) -> TorchGraph:
    """Build the planner graph of a joint fx graph (see the module docstring for the mapping)."""
    if costs not in costs_mod.COST_KINDS:
        raise HGraphError(f"unknown cost {costs!r}; expected one of "
                          f"{', '.join(costs_mod.COST_KINDS)}")
    cost_of = costs_mod.node_flops if costs == "flops" else costs_mod.node_nanoseconds
    nodes = list(joint.graph.nodes)
    var_of, var_lists, fwd, op_cost = _forward_blocks(joint, nodes, num_fwd_outputs, cost_of,
                                                      source)
    var_bytes, var_names, var_node = var_lists
    block_cost = [int(op_cost[op]) for _, op, _ in fwd]
    if fold:
        fwd, block_cost, folded = fold_unread(fwd, [var_of[n] for n, _, _ in fwd],
                                              _backward_read(nodes, var_of), op_cost,
                                              var_bytes)
        kept = [v for v in range(len(var_bytes)) if v not in folded]
        new_id = {v: i for i, v in enumerate(kept)}
        var_of = {n: new_id[v] for n, v in var_of.items() if v in new_id}
        var_bytes, var_names, var_node = ([xs[v] for v in kept]
                                          for xs in (var_bytes, var_names, var_node))
        fwd = [(n, op, [new_id[v] for v in ins]) for n, op, ins in fwd]
    block_of_var = {var_of[n]: i for i, (n, _, _) in enumerate(fwd)}
    reads_of = _backward_reads(nodes, var_of, fwd, block_of_var)
    _add_keep_block(fwd, list(block_of_var), var_bytes, var_names, var_node, op_cost)
    first_reader = {}
    for i, (_, _, ins) in enumerate(fwd):
        for v in ins:
            first_reader.setdefault(v, i)
    reads = [dict() for _ in range(len(fwd))]
    for b, vs in reads_of.items():
        for v, tag in vs.items():
            reads[b if b >= 0 else first_reader[v]].setdefault(v, tag)
    out_var = [var_of[n] if n is not KEEP else len(var_bytes) - 1 for n, _, _ in fwd]
    functions = _functions(fwd, reads, out_var, block_cost, "inductor" if decompose else "eager")
    text = cg.dumps(cg.ComputationalGraph(var_bytes, var_names, functions))
    g = cg.loads(text, path=f"{source or 'model'}")   # validated like any file, lines numbered
    info = dict(forward_ops=sum(1 for x in nodes if _tag(x) == "is_forward"),
                activations=len(fwd), activation_bytes=int(sum(var_bytes[v] for v in block_of_var)))
    return TorchGraph(g, joint, var_node, num_fwd_outputs, decompose, source, info)


def _forward_blocks(joint, nodes, num_fwd_outputs: int, cost_of, source):
    """(var of each fx node -- views map to their base's --, [var bytes, names, fx node
    names], forward blocks ``(node, op node, input vars)``, cost of each op node): the vars of
    the step's placeholders and the forward ops that read a differentiable value."""
    var_of = {}
    var_bytes, var_names, var_node = [], [], []

    def new_var(node):
        var_of[node] = len(var_bytes)
        var_bytes.append(_nbytes(node.meta["val"]))
        var_names.append(node.name)
        var_node.append(node.name)

    for n in nodes:
        if n.op == "placeholder" and _tag(n) != "is_backward" and not n.name.startswith("tangents"):
            new_var(n)
    differentiable = _differentiable_inputs(joint, num_fwd_outputs)
    wanted = _wanted_forward(joint, num_fwd_outputs)
    fwd = []
    op_cost = {}
    for n in nodes:
        if n.op != "call_function" or _tag(n) != "is_forward" or n not in wanted:
            continue
        _check_supported(n, source)
        val = n.meta.get("val")
        if is_view(n):
            base = view_source(n)
            if base in var_of:
                var_of[n] = var_of[base]
            continue
        if not isinstance(val, torch.Tensor):
            continue            # a tuple-returning op: its getitems are the blocks
        op = n.args[0] if n.target is operator.getitem else n
        ins = []
        for a in op.all_input_nodes:
            v = var_of.get(a)
            if a.op == "placeholder" and a not in differentiable:
                continue        # buffers, data: no gradient, always live
            if v is not None and v not in ins:
                ins.append(v)
        new_var(n)
        if not ins:
            continue            # reads no differentiable value (constants, data casts): an input
        if op not in op_cost:
            op_cost[op] = cost_of(op)
        fwd.append((n, op, ins))
    if not fwd:
        raise HGraphError(f"{source or 'model'}: the training step has no forward ops to plan")
    return var_of, (var_bytes, var_names, var_node), fwd, op_cost


def _backward_reads(nodes, var_of, fwd, block_of_var) -> dict:
    """{backward block (or ``-1 - var``: "a forward reader of var"): {var: tag}}: the forward
    values each backward op reads, charged to the block whose backward it belongs to."""
    seq = [fwd_op.meta.get("seq_nr", -1) for _, fwd_op, _ in fwd]
    block_for_seq = seq_lookup(seq)
    reads_of = {}
    for n in nodes:
        if n.op != "call_function" or _tag(n) != "is_backward":
            continue
        s = n.meta.get("seq_nr", -1)
        for a in n.all_input_nodes:
            if _tag(a) == "is_backward" or a.op == "placeholder" and a.name.startswith("tangents"):
                continue
            v = var_of.get(a)
            if v is None or v not in block_of_var:
                continue        # a parameter / input: always live
            b = block_for_seq(s)
            if v in fwd[b][2]:
                reads_of.setdefault(b, {})[v] = "input"
            elif fwd[block_of_var[v]][1] is fwd[b][1] or seq[block_of_var[v]] == s:
                # a sibling output of the op this backward op differentiates (batch norm's
                # statistics, max-pool indices): read as the output of its own block, so it
                # stays live (or is recomputed) until the op's backward, as torch keeps it
                reads_of.setdefault(block_of_var[v], {})[v] = "output"
            else:
                reads_of.setdefault(-1 - v, {})[v] = "input"    # a forward reader of v
    return reads_of


def _functions(fwd, reads, out_var, block_cost, capture: str) -> list:
    """The graph's forward blocks (details: fx node, op, cost, capture, op group) and their
    backward blocks (reading the output's gradient and ``reads``)."""
    nf = len(fwd)
    functions = []
    for i, (n, op, ins) in enumerate(fwd):
        name = n.name if n is not KEEP else KEEP
        detail = {"node": name, "op": _op_name(getattr(op, "target", KEEP)),
                  "cost": block_cost[i] if n is not KEEP else 0, "capture": capture}
        if op is not n:
            detail["group"] = op.name
        ftype = detail["op"]
        functions.append(cg.Function(i, "forward", [(v, "_") for v in ins], [out_var[i]], ftype,
                                     json.dumps(detail, sort_keys=True)))
    for i, (n, op, ins) in enumerate(fwd):
        y = out_var[i]
        inputs = [(y, "gradient")] + [(v, tag) for v, tag in sorted(reads[i].items())]
        functions.append(cg.Function(nf + i, "backward", inputs, list(ins), functions[i].type,
                                     "{}"))
    return functions


def import_model(model, inputs, loss=None, decompose: bool = True, costs: str = "flops",
                 source: str | None = None) -> TorchGraph:
    """Capture ``model``'s training step on ``inputs`` and build its planner graph; each a
    stage of the current progress (seconds each on a model of some depth)."""
    from hgraph.common.progress import current

    stages = current()
    with stages.stage("capturing the training step (AOTAutograd trace)"):
        joint, n_out = cap.capture(model, inputs, loss=loss, decompose=decompose)
    with stages.stage(f"the planner's graph ({len(joint.graph.nodes):,} joint nodes, "
                      f"{costs} costs)"):
        return from_joint(joint, n_out, decompose, costs=costs, source=source)
