"""Capture a model's joint forward+backward graph through AOTAutograd.

The step traced is ``loss_fn(model(*inputs))`` as a function of the parameters, buffers and
inputs (``torch.func.functional_call``), so the graph is the one ``aot_function`` and
``torch.compile`` partition. With ``decompose=True`` the joint graph is decomposed with
Inductor's own table (batch norm becomes var_mean + elementwise, max-pool its low-memory
prims): the graph the compiler partitions, so a plan made on it keeps values the compiler keeps.
With ``decompose=False`` it is the aten graph eager autograd runs, op for op (bitwise equal
gradients when applied).

Recurrent modules (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) are traced as the per-timestep aten ops of
their native CPU/CUDA implementation: on CPU a float32 LSTM would otherwise trace as oneDNN's
opaque ``mkldnn_rnn_layer``, whose saved workspace AOTAutograd cannot hand to the backward (an
``AssertionError`` deep in its runtime) and which no plan could split. Only the tracing runs with
oneDNN off (:func:`native_rnn`); the traced forward and backward run with the caller's setting.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from functorch.compile import aot_function

from hgraph.common.errors import HGraphError

__all__ = ["Step", "make_step", "loss_slots", "loss_reads", "capture", "check_loss", "cse", "decompositions",
           "default_loss", "untraceable", "call_traced", "fresh_inputs", "has_rnn", "native_rnn",
           "LossError"]


class LossError(HGraphError):
    """The loss is not a scalar tensor (an HGraphError: one line; the CLI names the loss
    function's line in the model file, :func:`planner.torch.model_file.user_errors`)."""


def default_loss(out):
    """The loss when none is given: the model's output, which must then be a scalar.

    Why no mean of a larger output: a model whose output is logits, and whose caller forgot
    ``loss=``, would train on the logits' mean without a word (issue 39: loss 0.0055 where
    the intended cross entropy was 2.30); a refusal naming ``loss=`` costs one line instead.
    """
    return _scalar_or_refuse(out, "the model returns",
                             "no loss= was given, and there is no default loss: pass loss=FN "
                             "that turns the output into one (e.g. loss=lambda out: "
                             "F.cross_entropy(out, labels))")


def _scalar_or_refuse(out, subject: str, fix: str):
    """``out`` if it is a scalar tensor (real or traced), else a one-line :class:`LossError`:
    ``{subject} {what it is}, not a scalar loss: {fix}`` -- one check for the default loss
    and for a user's loss function, so both refusals read alike."""
    if not isinstance(out, torch.Tensor):
        got = f"a {type(out).__name__}"
    elif out.dim() != 0:
        got = f"a tensor of shape {tuple(out.shape)}"
    else:
        return out
    raise LossError(f"{subject} {got}, not a scalar loss: {fix}")


def decompositions(decompose: bool):
    """Inductor's decomposition table (the graph the compiler partitions), or none."""
    if not decompose:
        return {}
    import torch._inductor.lowering  # noqa: F401  (the decompositions consult it)
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


class _Slot:
    """Where a tensor the loss function reads lives outside its arguments: a closure cell, a
    global or an entry of a dict or list that the loss closes over. The step reads it afresh on
    every call (a label reassigned before each step is that step's label)."""

    _CELL = object()

    def __init__(self, holder, key=_CELL):
        self.holder, self.key = holder, key

    def get(self):
        return self.holder.cell_contents if self.key is self._CELL else self.holder[self.key]

    def set(self, value):
        if self.key is self._CELL:
            self.holder.cell_contents = value
        else:
            self.holder[self.key] = value


def _code_names(code) -> set:
    """Global names a function's code (and the functions, lambdas and comprehensions nested in
    it) may read."""
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _code_names(c)
    return names


def loss_slots(loss_fn) -> list:
    """Every place outside its arguments where ``loss_fn`` reads a tensor: closure cells and
    globals holding a tensor, and tensor entries of a dict or list held by one of them."""
    if loss_fn is default_loss:
        return []
    fn = getattr(loss_fn, "__func__", loss_fn)
    holders = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            holders.append((cell, _Slot._CELL, cell.cell_contents))
        except ValueError:          # an empty cell (a name assigned later)
            continue
    code, glob = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    for name in sorted(_code_names(code)) if code is not None else ():
        if name in glob:
            holders.append((glob, name, glob[name]))
    slots = []
    for holder, key, value in holders:
        if isinstance(value, torch.Tensor):
            slots.append(_Slot(holder, key))
        elif isinstance(value, dict):
            slots += [_Slot(value, k) for k, v in value.items() if isinstance(v, torch.Tensor)]
        elif isinstance(value, list):
            slots += [_Slot(value, i) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return slots


def loss_reads(loss_fn) -> list:
    """The tensors ``loss_fn`` reads outside its arguments now (labels, masks:
    :func:`loss_slots`): tensors that exist before a step runs, which a memory meter of the
    step leaves out as it does the inputs (:func:`planner.torch.measure.measure_step`)."""
    return [s.get() for s in loss_slots(loss_fn)]


@dataclass
class Step:
    """The functional training step of a model: ``fn(params, buffers, consts, *inputs) -> loss``.

    ``slots``: where the tensors the loss function reads besides the model's output live
    (labels, targets, masks: :func:`loss_slots`); they enter the traced graph as inputs
    (AOTAutograd traces with fake tensors and refuses captured real ones) and are read afresh
    on every call (:attr:`consts`).
    """

    fn: object
    params: list
    buffers: list
    slots: list
    rnn: bool = False       # the model holds a recurrent module (traced by native_rnn)

    @property
    def consts(self) -> list:
        """The tensors the loss reads now (a label reassigned since the last step is new)."""
        return [s.get() for s in self.slots]

    def args(self, inputs, params=None, buffers=None):
        """The flat argument tuple of ``fn`` for ``inputs``."""
        return (self.params if params is None else params,
                self.buffers if buffers is None else buffers, self.consts, *inputs)


def make_step(model, loss=None) -> Step:
    """The model's step as a function of flat parameter / buffer lists (functional_call)."""
    names = [n for n, _ in model.named_parameters()]
    bnames = [n for n, _ in model.named_buffers()]
    loss_fn = loss or default_loss
    slots = loss_slots(loss_fn)

    def fn(params, buffers, traced_consts, *inputs):
        state = dict(zip(names, params))
        state.update(zip(bnames, buffers))
        out = torch.func.functional_call(model, state, inputs)
        saved = [s.get() for s in slots]
        for s, t in zip(slots, traced_consts):
            s.set(t)
        try:
            return loss_fn(out)
        finally:
            for s, t in zip(slots, saved):
                s.set(t)

    return Step(fn, [p for _, p in model.named_parameters()],
                [b for _, b in model.named_buffers()], slots, has_rnn(model))


def has_rnn(model) -> bool:
    """True if ``model`` holds an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``nn.RNNBase``)."""
    return any(isinstance(m, torch.nn.RNNBase) for m in model.modules())


#: The caller's oneDNN setting while :func:`native_rnn` traces with it off (None: not tracing).
_CALLER_MKLDNN = [None]


@contextmanager
def native_rnn():
    """Trace with oneDNN off, so ``aten.lstm`` takes its native path (per-timestep mm, sigmoid,
    tanh ...) instead of ``mkldnn_rnn_layer``; the compiled forward and backward modules run
    with the caller's setting (:func:`_boxed`)."""
    if _CALLER_MKLDNN[0] is not None:       # nested: already off
        yield
        return
    was = torch._C._get_mkldnn_enabled()
    _CALLER_MKLDNN[0] = was
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(was)
        _CALLER_MKLDNN[0] = None


def call_traced(fn, *args):
    """``fn(*args)`` for a traced step, where a tracing failure on a tensor the capture cannot
    follow becomes its one line (:func:`untraceable`)."""
    try:
        return fn(*args)
    except HGraphError:
        raise
    except Exception as err:
        one_line = untraceable(err)
        if one_line is None:
            raise
        raise one_line from None


def untraceable(err: BaseException) -> HGraphError | None:
    """One line for a step the capture cannot follow: the model or loss reads a real tensor
    that is not an input, a parameter or buffer, nor one the loss reaches by a closure, a global
    or a dict/list entry (found as fake-tensor tracing failing on a real tensor)."""
    text = f"{type(err).__name__}: {err}"
    if "fake" not in text.lower() and "FakeTensor" not in text:
        return None
    return HGraphError("the step reads a tensor the capture cannot follow (not a model input, "
                       "parameter or buffer, nor a tensor the loss function holds in a closure "
                       "variable, a global, or a dict or list entry of one): keep labels and "
                       "masks in such a variable, or pass them to the model as inputs")


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
        caller = _CALLER_MKLDNN[0]
        if caller is None:
            return gm(args)
        torch._C._set_mkldnn_enabled(caller)    # traced by native_rnn: run as the caller would
        try:
            return gm(args)
        finally:
            torch._C._set_mkldnn_enabled(False)

    run._boxed_call = True
    return run


def traced(step: Step, partition_fn, decompose: bool):
    """``aot_function`` of the step with ``partition_fn``; forward/backward run as traced (a
    step with a recurrent module traces under :func:`native_rnn`)."""
    fn = aot_function(step.fn, fw_compiler=_boxed, bw_compiler=_boxed,
                      partition_fn=partition_fn, decompositions=decompositions(decompose))
    if not step.rnn:
        return fn

    def call(*args):
        with native_rnn():
            return fn(*args)

    return call


def fresh_inputs(inputs) -> tuple:
    """Copies of the tensors in ``inputs`` (same values, ``requires_grad`` and strides), so a
    model that writes to its input in place leaves the caller's tensor as it was."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            y = x.detach().clone()
            out.append(y.requires_grad_(x.requires_grad))
        else:
            out.append(x)
    return tuple(out)


class _Captured(BaseException):
    """Raised by :func:`capture`'s partition function once it holds the joint graph: what
    AOTAutograd would do next (partition, compile the two halves, run the forward) is work
    the capture never uses. A BaseException, so that no ``except Exception`` on the way out
    (AOTAutograd's, :func:`call_traced`'s) takes it for a failure."""


def check_loss(out):
    """``out`` if it is a scalar tensor (a real or traced one), else the one-line
    :class:`LossError` saying what the loss function returned."""
    return _scalar_or_refuse(out, "the loss function returns", "pass loss=FN returning a scalar "
                             "(e.g. loss=lambda out: out.mean())")


def capture(model, inputs, loss=None, decompose: bool = True):
    """(joint GraphModule, num_fwd_outputs) of one training step, traced on copies (of the
    parameters, buffers, inputs and the tensors the loss reads: planning never writes to the
    caller's tensors).

    Only the trace runs: the loss is checked as it is traced (:func:`check_loss`), and the
    partition function stops AOTAutograd once it holds the joint graph (:class:`_Captured`),
    so nothing is partitioned, compiled or run (on a 12-layer GPT about a sixth of the
    capture, bench/torch_plan_speed.py)."""
    import dataclasses

    got = {}

    def grab(joint, joint_inputs, **kwargs):
        got["joint"], got["n_out"] = joint, kwargs["num_fwd_outputs"]
        raise _Captured

    step = make_step(model, loss)
    inner = step.fn

    def fn(*args):
        return check_loss(inner(*args))

    checked = dataclasses.replace(step, fn=fn)
    params = [p.detach().clone().requires_grad_(p.requires_grad) for p in step.params]
    buffers = [b.detach().clone() for b in step.buffers]
    params, buffers, consts, *xs = step.args(fresh_inputs(inputs), params, buffers)
    try:
        call_traced(traced(checked, grab, decompose), params, buffers,
                    list(fresh_inputs(consts)), *xs)
    except _Captured:
        pass
    if "joint" not in got:
        raise HGraphError("AOTAutograd returned without a joint graph (the step needs no "
                          "gradient: no parameter or input requires grad)")
    return got["joint"], got["n_out"]
