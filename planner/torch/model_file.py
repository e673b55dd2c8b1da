"""Load ``FILE.py:FUNC`` model specs: ``FUNC()`` returns ``(model, inputs[, loss_fn])``.

Bad specs raise :class:`hgraph.errors.InputError` naming the file and the problem (the CLI
prints one line, exit 2). ``inputs`` may be one tensor or a tuple of them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass

from hgraph.errors import InputError

__all__ = ["ModelSpec", "load"]


@dataclass
class ModelSpec:
    model: object
    inputs: tuple
    loss: object
    source: str
    module: object = None       # the imported model file (its other functions, e.g. blocks)


def load(spec: str) -> ModelSpec:
    """Import FILE.py and call FUNC (``spec`` is ``FILE.py:FUNC``)."""
    import torch

    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise InputError(spec, None, "expected FILE.py:FUNC")
    if not os.path.isfile(path):
        raise InputError(path, None, "no such model file")
    name = "hgraph_model_" + os.path.splitext(os.path.basename(path))[0]
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module      # torch.compile (dynamo) imports the model's module by name
    try:
        mod_spec.loader.exec_module(module)
    except SyntaxError as err:
        del sys.modules[name]
        raise InputError(path, err.lineno, f"syntax error: {err.msg}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise InputError(path, None, f"no function {func!r} in the model file")
    got = fn()
    if not isinstance(got, tuple) or len(got) not in (2, 3):
        raise InputError(path, None, f"{func}() must return (model, inputs) or "
                                     f"(model, inputs, loss_fn)")
    model, inputs = got[0], got[1]
    loss = got[2] if len(got) == 3 else None
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(model, torch.nn.Module) or not all(isinstance(x, torch.Tensor)
                                                         for x in inputs):
        raise InputError(path, None, f"{func}() must return an nn.Module and tensor inputs")
    return ModelSpec(model, tuple(inputs), loss, path, module)
