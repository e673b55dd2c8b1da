"""Capture a model's joint forward+backward graph through AOTAutograd.

The step traced is ``loss_fn(model(*inputs))`` as a function of the parameters, buffers and
inputs (``torch.func.functional_call``), so the graph is the one ``aot_function`` and
``torch.compile`` partition. With ``decompose=True`` the joint graph is decomposed with
Inductor's own table (batch norm becomes var_mean + elementwise, max-pool its low-memory
prims): the graph the compiler partitions, so a plan made on it keeps values the compiler keeps.
With ``decompose=False`` it is the aten graph eager autograd runs, op for op (bitwise equal
gradients when applied).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from functorch.compile import aot_function

__all__ = ["Step", "make_step", "capture", "cse", "decompositions", "default_loss"]


def default_loss(out):
    """The issue's default: the output if it is a scalar, else its mean."""
    return out if out.dim() == 0 else out.mean()


def decompositions(decompose: bool):
    """Inductor's decomposition table (the graph the compiler partitions), or none."""
    if not decompose:
        return {}
    import torch._inductor.lowering  # noqa: F401  (the decompositions consult it)
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


@dataclass
class Step:
    """The functional training step of a model: ``fn(params, buffers, consts, *inputs) -> loss``.

    ``consts``: tensors the loss function closes over (labels, targets); they enter the traced
    graph as inputs (AOTAutograd traces with fake tensors and refuses captured real ones).
    """

    fn: object
    params: list
    buffers: list
    consts: list

    def args(self, inputs, params=None, buffers=None):
        """The flat argument tuple of ``fn`` for ``inputs``."""
        return (self.params if params is None else params,
                self.buffers if buffers is None else buffers, self.consts, *inputs)


def make_step(model, loss=None) -> Step:
    """The model's step as a function of flat parameter / buffer lists (functional_call)."""
    names = [n for n, _ in model.named_parameters()]
    bnames = [n for n, _ in model.named_buffers()]
    loss_fn = loss or default_loss
    cells = [c for c in (getattr(loss_fn, "__closure__", None) or ())
             if isinstance(c.cell_contents, torch.Tensor)]
    consts = [c.cell_contents for c in cells]

    def fn(params, buffers, traced_consts, *inputs):
        state = dict(zip(names, params))
        state.update(zip(bnames, buffers))
        out = torch.func.functional_call(model, state, inputs)
        saved = [c.cell_contents for c in cells]
        for c, t in zip(cells, traced_consts):
            c.cell_contents = t
        try:
            return loss_fn(out)
        finally:
            for c, t in zip(cells, saved):
                c.cell_contents = t

    return Step(fn, [p for _, p in model.named_parameters()],
                [b for _, b in model.named_buffers()], consts)


def cse(joint):
    """A copy of the joint GraphModule with common subexpressions merged (``fx_graph_cse``,
    torch's min-cut partitioner's first step): the backward's copies of forward subexpressions
    (batch norm's ``x - mean``) then read the forward's value. Node names are kept; ``joint``
    itself is left as it is (the copy shares its submodules)."""
    from torch._functorch.compile_utils import fx_graph_cse

    return torch.fx.GraphModule(joint, fx_graph_cse(joint.graph))


def _boxed(gm, _inputs):
    """Run ``gm`` as traced, in the boxed convention that frees each input after its last use.

    AOTAutograd hands the backward its saved tensors in a list it gives away (``steal_args``);
    fx's boxed code generation clears that list on entry, and fx frees every value after its
    last use, so a saved tensor lives until the backward op that last reads it, not until the
    whole backward ends (the plan frees it there too; Inductor does the same).
    """
    from torch.fx.graph import _BoxedCodeGen

    gm.graph.set_codegen(_BoxedCodeGen())
    gm.recompile()

    def run(args):
        return gm(args)

    run._boxed_call = True
    return run


def traced(step: Step, partition_fn, decompose: bool):
    """``aot_function`` of the step with ``partition_fn``; forward/backward run as traced."""
    return aot_function(step.fn, fw_compiler=_boxed, bw_compiler=_boxed,
                        partition_fn=partition_fn, decompositions=decompositions(decompose))


def capture(model, inputs, loss=None, decompose: bool = True):
    """(joint GraphModule, num_fwd_outputs) of one training step; runs the step once on copies."""
    from torch._functorch.partitioners import default_partition

    got = {}

    def grab(joint, joint_inputs, **kwargs):
        got["joint"], got["n_out"] = joint, kwargs["num_fwd_outputs"]
        return default_partition(joint, joint_inputs, **kwargs)

    step = make_step(model, loss)
    params = [p.detach().clone().requires_grad_(p.requires_grad) for p in step.params]
    buffers = [b.detach().clone() for b in step.buffers]
    out = traced(step, grab, decompose)(*step.args(inputs, params, buffers))
    if out.dim() != 0:
        raise ValueError(f"the loss must be a scalar, got shape {tuple(out.shape)}")
    return got["joint"], got["n_out"]
