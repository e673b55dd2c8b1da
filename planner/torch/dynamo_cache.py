"""Dynamo's compiled-code cache, emptied for the frames of one training step before it is
compiled again.

Why: :class:`planner.torch.compiled.CompiledStep` compiles the same step several times on its
first call (torch's default partition, then candidates) and measures each. Dynamo caches
compiled code per code object, with guards that accept the same model (and another of the
same structure) again: a fresh outer function (:func:`planner.torch.compiled.fresh_function`)
is compiled anew, but a frame Dynamo compiled on its own — a module's ``forward`` after a
graph break, the resume function after the break — is reused from the cache, so its graphs
never reach the partitioner and every trial would measure the first one's partition (or,
where the model went through ``torch.compile`` earlier in the process, torch's own). Emptying
those frames' caches (``torch._dynamo.reset_code``) makes every compile hand every graph of
the step to the partitioner. Other compiled functions sharing a code object recompile on
their next call (a cost, not a change: each recompiles under its own settings).
"""

from __future__ import annotations

__all__ = ["StepFrames"]


class StepFrames:
    """The code objects a model's training step runs under Dynamo: its modules' ``forward``
    methods, the loss function's code, every code Dynamo converted while compiling the step
    (:meth:`converting`) and the resume functions Dynamo made of them at graph breaks."""

    def __init__(self, model, loss_fn=None):
        self.codes = {}
        for fn in [*(type(m).forward for m in model.modules()), loss_fn]:
            while fn is not None:       # a decorated forward (transformers'): every layer
                code = getattr(fn, "__code__", None)
                if code is not None:
                    self.codes.setdefault(id(code), code)
                fn = getattr(fn, "__wrapped__", None)

    def converting(self):
        """A context manager recording the code objects Dynamo converts inside it."""
        import contextlib

        from torch._dynamo import convert_frame

        @contextlib.contextmanager
        def record():
            before = set(convert_frame.input_codes.seen_ids)
            try:
                yield
            finally:
                for ref in list(convert_frame.input_codes.seen):
                    c = ref()
                    if c is not None and id(c) not in before:
                        self.codes.setdefault(id(c), c)
        return record()

    @staticmethod
    def reset_all() -> None:
        """Empty Dynamo's cache for every code it has compiled in this process: a frame of the
        step may be a plain function (a loss helper after a graph break) that another compile
        converted (``torch.compile`` of the same model earlier), which :attr:`codes` cannot
        name until Dynamo converts it again. Other compiled functions recompile on their next
        call."""
        import torch

        torch._dynamo.reset_code_caches()

    def reset(self) -> None:
        """Empty Dynamo's cache for every code of the step and the resume functions made of
        them, so the next compile converts every frame again."""
        import torch
        from torch._dynamo.resume_execution import ContinueExecutionCache

        stack, seen = list(self.codes.values()), set()
        while stack:
            c = stack.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            torch._dynamo.reset_code(c)
            stack.extend(ContinueExecutionCache.cache.get(c, {}).values())
