"""Load ``FILE.py:FUNC`` model specs: ``FUNC()`` returns ``(model, inputs[, loss_fn])``.

Bad specs raise :class:`hgraph.common.errors.InputError` naming the file and the problem (the CLI
prints one line, exit 2). ``inputs`` may be one tensor or a tuple of them.

Errors raised by the user's own code are one line too, naming the line of the model file where
they happened (the deepest frame of the traceback in that file): an exception while the file is
imported (an import error, a ``NameError`` at module level), in ``FUNC()``, in the model's
``forward`` or in the loss function while the step is captured or run
(:func:`user_errors`), a ``FUNC()`` returning the wrong things, a loss that is not a scalar.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

from hgraph.common.errors import HGraphError, InputError

__all__ = ["ModelSpec", "load", "user_errors", "user_line"]


@dataclass
class ModelSpec:
    model: object
    inputs: tuple
    loss: object
    source: str
    module: object = None       # the imported model file (its other functions, e.g. blocks)
    func_line: int | None = None    # the line of ``def FUNC`` in the model file


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _chain(err: BaseException):
    """``err`` and the exceptions it was raised from or during (``__cause__`` / ``__context__``),
    outermost first."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def user_line(err: BaseException, path: str) -> int | None:
    """The line of ``path`` where ``err`` happened: the deepest frame of its traceback (or of
    the exceptions it was raised from) in that file; None if no frame is in it."""
    for e in _chain(err):
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                 if _same_file(f.filename, path)]
        if lines:
            return lines[-1]
    return None


def _one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (torch's messages run over many lines)."""
    text = str(err).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _code_line(fn, path: str) -> int | None:
    """The line where ``fn`` (a function, lambda or bound method) is defined, if in ``path``."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None or not _same_file(code.co_filename, path):
        return None
    return code.co_firstlineno


@contextmanager
def user_errors(spec: ModelSpec):
    """Turn an error raised by ``spec``'s model file while the step is captured or run into one
    :class:`InputError` line naming the file and line (``path:line: Type: message``).

    An :class:`HGraphError` about the loss (a non-scalar loss, an output that is not a tensor)
    gets the loss function's line (``FUNC``'s where the default loss is used); other
    HGraphErrors pass as they are; an exception with no frame in the model file (a failure of
    the bridge itself) propagates unchanged.
    """
    from planner.torch.capture import LossError

    path = spec.source
    # torch logs a fake tensor's failing meta kernel with its traceback before raising it
    muted = logging.getLogger("torch._subclasses.fake_tensor")
    was = muted.disabled
    muted.disabled = True
    try:
        yield
    except InputError:
        raise
    except LossError as err:
        line = _code_line(spec.loss, path) if spec.loss is not None else None
        raise InputError(path, line or spec.func_line, str(err)) from None
    except HGraphError:
        raise
    except Exception as err:
        line = user_line(err, path)
        if line is None:
            raise
        raise InputError(path, line, _one_line(err)) from None
    finally:
        muted.disabled = was


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
        if _same_file(err.filename or path, path):
            raise InputError(path, err.lineno, f"syntax error: {err.msg}") from None
        raise InputError(path, user_line(err, path), _one_line(err)) from None
    except Exception as err:        # ImportError, NameError ... at the file's top level
        del sys.modules[name]
        raise InputError(path, user_line(err, path), _one_line(err)) from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise InputError(path, None, f"no function {func!r} in the model file")
    func_line = _code_line(fn, path)
    try:
        got = fn()
    except Exception as err:
        raise InputError(path, user_line(err, path) or func_line, _one_line(err)) from None
    if not isinstance(got, tuple) or len(got) not in (2, 3):
        kind = f"a tuple of {len(got)}" if isinstance(got, tuple) else f"a {type(got).__name__}"
        raise InputError(path, func_line, f"{func}() must return (model, inputs) or "
                                          f"(model, inputs, loss_fn), not {kind}")
    model, inputs = got[0], got[1]
    loss = got[2] if len(got) == 3 else None
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(model, torch.nn.Module):
        raise InputError(path, func_line, f"{func}() must return an nn.Module first, not a "
                                          f"{type(model).__name__}")
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(x, torch.Tensor)
                                                        for x in inputs):
        raise InputError(path, func_line, f"{func}() must return the model's inputs as a "
                                          f"tensor or a tuple of tensors")
    if loss is not None and not callable(loss):
        raise InputError(path, func_line, f"{func}() must return a callable loss_fn third, "
                                          f"not a {type(loss).__name__}")
    return ModelSpec(model, tuple(inputs), loss, path, module, func_line)
