"""The executor's plain step with this tree's kernels against another revision's, and torch (issue 26).

A kernel change is judged here rather than across two bench runs: on a shared machine two runs
minutes apart meet different loads. This process builds one zoo model and steps it in turn with
the op table (``planner/ops``) as it is, with the op table as it was at ``--base`` (loaded from git
into a module of its own; :data:`planner.ops.OPS` entries swapped for the step), and PyTorch
eager (bench/kernels_bench.py's translation); one of each per round, the order reversed every
other round, CPU time by default (``--clock``; one BLAS thread unless ``--threads``). The
executor's step is timed by its run (``RunResult.cpu_seconds`` / ``seconds``), as in
kernels_bench. Prints each side's median and fastest step, the ratios, and the largest
gradient difference between the two kernel sets (relative to each gradient's largest entry).

    python3 bench/kernels_ab.py resnet --base 5ded723 --batch 32 --width 64 --depth 2 --image 32
    python3 bench/kernels_ab.py resnet50 --base ede6890 --dtype float64 --no-torch --steps 1 ...
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _git(*args) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout


def load_ops(rev: str):
    """The op table at git revision ``rev`` as a module of its own (``ops_at_<rev>``):
    ``planner/ops.py`` before the split into a package, else the ``planner/ops/`` package with
    its ``planner.ops`` imports pointed at the copy (so no module of this tree is mixed in)."""
    name = f"ops_at_{rev.replace('-', '_').replace('~', '_').replace('^', '_')}"
    folder = Path(tempfile.mkdtemp(prefix="kernels_ab."))
    files = _git("ls-tree", "--name-only", rev, "planner/ops.py", "planner/ops/").split()
    if "planner/ops.py" in files:
        path = folder / f"{name}.py"
        path.write_text(_git("show", f"{rev}:planner/ops.py"))
    else:
        (folder / name).mkdir()
        for f in (f for f in files if f.endswith(".py")):
            text = re.sub(r"\bplanner\.ops\b", name, _git("show", f"{rev}:{f}"))
            (folder / name / Path(f).name).write_text(text)
        path = folder / name / "__init__.py"
    if not path.exists():
        raise subprocess.CalledProcessError(128, ["git", "show", f"{rev}:planner/ops"],
                                            stderr=f"no op table at {rev}")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod                      # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


SIZE_FLAGS = ("batch", "width", "depth", "image", "seq", "heads")


def add_arguments(ap, steps: int) -> None:
    """The A/B tools' common flags: the model, ``--base``, the sizes, ``--steps``, ``--threads``."""
    ap.add_argument("model")
    ap.add_argument("--base", required=True, help="git revision whose op table (planner/ops) is the baseline")
    for k in SIZE_FLAGS:
        ap.add_argument(f"--{k}", type=int, default=None)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--threads", type=int, default=1)


def rerun_with_threads(script: str, threads: int, argv):
    """``script`` run again with OPENBLAS/OMP/MKL_NUM_THREADS at ``threads`` (they are read when
    the libraries load): its exit code; None when they already are."""
    want = {v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if all(os.environ.get(k) == v for k, v in want.items()):
        return None
    words = sys.argv[1:] if argv is None else list(argv)
    return subprocess.call([sys.executable, str(Path(script).resolve())] + words,
                           env={**os.environ, **want})


def prepare(tool: str, args, argv):
    """The common start of the A/B tools (this script; bench/ops_step_ab.py at 78975d9):
    ``args.threads`` BLAS threads (the script rerun when the variables differ: its exit code),
    ``planner/ops.py`` at ``args.base``, the zoo model at the ``SIZE_FLAGS`` given, its executor step. Returns
    an exit code (2 after a one-line error naming ``tool``: no such revision, an unknown model,
    sizes its shape rules refuse) or ``(base ops module, tracer, sizes, inputs, step)``."""
    code = rerun_with_threads(tool_path(tool), args.threads, argv)
    if code is not None:
        return code
    sys.path.insert(0, str(ROOT / "bench"))
    import numpy as np

    import kernels_bench as kb
    from hgraph.common.errors import HGraphError
    from planner.execute import backend, executor, export

    try:
        old = load_ops(args.base)
    except subprocess.CalledProcessError as err:
        print(f"{tool}: no op table (planner/ops) at {args.base}: {err.stderr.strip()}", file=sys.stderr)
        return 2
    sizes = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k) is not None}
    try:
        t = kb.build(args.model, sizes, args.dtype)
    except HGraphError as err:
        print(f"{tool}: {err}", file=sys.stderr)
        return 2
    g = export.to_cg(t)
    leaf = executor.leaves(g, np, 0)
    return old, t, sizes, leaf, kb.executor_step(g, leaf, backend.get("numpy"))


def tool_path(tool: str) -> Path:
    """The A/B tool's script (``bench/<tool>.py``)."""
    return ROOT / "bench" / f"{tool}.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, steps=5)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="float64: check that two kernel sets agree beyond float32 rounding")
    args = ap.parse_args(argv)
    got = prepare("kernels_ab", args, argv)
    if isinstance(got, int):
        return got
    old, t, sizes, leaf, step = got
    import numpy as np

    import kernels_bench as kb
    from planner import ops

    mine = dict(ops.OPS)

    def run_with(table):
        ops.OPS.update(table)
        try:
            r = step()
        finally:
            ops.OPS.update(mine)
        return kb._run_time(r, args.clock), r

    sides = {"base": lambda: run_with(old.OPS), "this tree": lambda: run_with(mine)}
    if not args.no_torch:
        import torch

        torch.set_num_threads(args.threads)
        t_step, values = kb.torch_step(t, leaf)
        now = kb.CLOCKS[args.clock]

        def torch_side():
            kb.clear_grads(values)
            t0 = now()
            t_step()
            return now() - t0, None

        sides["torch"] = torch_side
    grads = {k: fn()[1] for k, fn in sides.items()}          # warm-up, and the gradients
    times = {k: [] for k in sides}
    names = list(sides)
    for i in range(args.steps):
        for k in (names if i % 2 == 0 else names[::-1]):
            times[k].append(sides[k]()[0])
    gap = max(float(np.abs(grads["this tree"].param_grads[v] - a).max() /
                    max(float(np.abs(a).max()), 1e-30))
              for v, a in grads["base"].param_grads.items())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.model} {sizes}, {args.dtype}, {args.threads} thread(s), {args.clock} clock, median of {args.steps} "
          f"(fastest), load {os.getloadavg()[0]:.2f}:")
    for k in names:
        line = f"  {k:10s} {med[k]:.4f} s ({min(times[k]):.4f})"
        if k != "torch" and "torch" in med:
            line += f"  {med[k] / med['torch']:.2f}x torch ({min(times[k]) / min(times['torch']):.2f}x)"
        print(line)
    print(f"  this tree / base: {med['this tree'] / med['base']:.3f} "
          f"({min(times['this tree']) / min(times['base']):.3f}); "
          f"max grad rel diff between them {gap:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
