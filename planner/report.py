"""The plan's report: JSON fields, a short terminal summary table, a memory-timeline plot.

:func:`build` reads a :class:`planner.api.Plan`'s fields into the report dict (keys below);
:func:`write_json` / :func:`plot` / :func:`print_summary` write through the one writer
(:mod:`hgraph.common.fileio`: files atomically, a failed write one line naming the file);
:func:`summary_table` renders the few numbers a user looks at first (rich), including what
changes how to read them: the DP family actually used (``fell_back``), the scale approximations
(``dp_window``, ``dp_front_cap``, ``dp_exact``), how the baseline was obtained
(``baseline_kind``) and, after ``--execute``, the measured peak.

Report keys: ``graph``, ``nodes`` (activations), ``variables``, ``depth`` (topological levels),
``solver``, ``strategy``, ``units``, ``budget`` (as given), ``budget_bytes``, ``peak_bytes``
(simulated), ``within_budget``, ``baseline_peak_bytes`` (no recomputation) with
``baseline_kind`` (``simulated``, or ``activation_sum`` for graphs too large for a baseline
schedule), ``lower_bound_bytes``, ``recompute_cost``, ``forward_cost``, ``overhead``
(recompute / forward), ``recomputed`` (functions computed more than once), ``ops``,
``seconds``, ``blocks``, ``model_recompute_cost``, ``model_peak_bytes``, ``comp_ratio``,
``n_lower_sets``, ``recompute_lower_bound`` and ``gap`` with ``certificate`` (method, every
bound computed, the model cost and budget certified: :mod:`planner.certificate`; absent with
``certify="off"``), ``dp_segmented`` (from ``planner.dp.scale.SEGMENTED_LIMIT``
activations: the DP cut into ``segments`` on the engine, ``mode``, ``handed_over``, the
composed front's ``composed_recompute_cost`` / ``composed_ckpt_bytes``),
``milp`` (``--solver milp``: optimal, dual bound, stages, seconds),
``engine`` (tasks, blocks, mode, runtime, supersteps; with ``dp_segmented`` also
``walks_reused``: segments whose free walk the final solve took from the workers' stashes,
an earlier solve's of the session) and ``decisions``: one
object per activation (``var``, ``function``, ``bytes``, ``block``, ``decision`` keep|recompute,
``computes``, ``reason``); in the dict a :class:`Decisions` sequence, not a list — write the
report with :func:`write_json` / :func:`dumps` (``json.dumps`` of the raw dict refuses it).

Example::

    >>> import json, os, tempfile
    >>> import planner
    >>> from planner import synth
    >>> p = planner.plan(synth.build(layers=2, heads=2), budget="60%")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     write_json(p.report, os.path.join(d, "r.json")); plot(p, os.path.join(d, "t.png"))
    ...     back = json.load(open(os.path.join(d, "r.json")))
    >>> back["peak_bytes"] == p.peak_bytes, len(back["decisions"])
    (True, 40)
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence

import numpy as np

from hgraph.common.fileio import write_bytes, write_stream, write_text
from hgraph.common.formatting import format_bytes

__all__ = ["build", "Decisions", "decisions", "dumps", "write_json", "summary_table", "print_summary", "plot",
           "solver_text", "approximations_text", "over_budget_text", "BASELINE_KINDS",
           "NO_BOUND_TEXT"]


class Decisions(Sequence):
    """The per-activation decisions of a plan, held as arrays (~60 bytes an activation) and
    made into the report's objects (``var``, ``function``, ``bytes``, ``block``,
    ``decision``, ``computes``, ``reason``) only when read — a list of 10^6 dicts with their
    reason strings was ~600 MB of the driver, and its JSON text as much again
    (bench/NOTES_scale.md). A sequence: ``len``, indexing and iteration give the dicts."""

    def __init__(self, var, func, nbytes, block, ckpt, computes, t):
        self.var, self.func, self.nbytes, self.block = var, func, nbytes, block
        self.ckpt, self.computes, self.t = ckpt, computes, t

    def __len__(self) -> int:
        return int(self.var.size)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.rows(*i.indices(len(self))[:2]) if i.step in (None, 1) else \
                [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self.rows(i % n, i % n + 1)[0]

    def __eq__(self, other):
        """Equal to decisions with the same rows (a list of the dicts included), as the list
        it replaces was."""
        if isinstance(other, Decisions):
            return all(np.array_equal(a, b) for a, b in zip(self._columns(), other._columns()))
        if isinstance(other, list):
            return len(other) == len(self) and self.rows(0, len(self)) == other
        return NotImplemented

    __hash__ = None

    def _columns(self):
        return (self.var, self.func, self.nbytes, self.block, self.ckpt, self.computes, self.t)

    def __repr__(self) -> str:
        return f"Decisions({len(self)} activations)"

    def rows(self, lo: int, hi: int) -> list:
        """The dicts of activations ``lo`` … ``hi − 1``."""
        out = []
        cols = zip(self.var[lo:hi].tolist(), self.func[lo:hi].tolist(),
                   self.nbytes[lo:hi].tolist(), self.block[lo:hi].tolist(),
                   self.ckpt[lo:hi].tolist(), self.computes[lo:hi].tolist(),
                   self.t[lo:hi].tolist())
        for var, func, nbytes, i, c, k, t in cols:
            if k > 1 and not c:
                reason = (f"inside block {i}, not on its boundary: freed after the forward pass "
                          f"and recomputed before block {i}'s backward pass (cost {t} each time)")
            elif k > 1:
                reason = ("a backward function reads this retained output after it was freed "
                          "(ReLU/MaxPool exception): recomputed just for that read")
            elif c:
                reason = f"checkpoint: on the boundary of block {i} (a later block reads it), kept"
            else:
                reason = (f"block {i}'s values are still live when its backward pass starts; "
                          f"not recomputed")
            out.append({"var": var, "function": func, "bytes": nbytes, "block": i,
                        "decision": "recompute" if k > 1 else "keep", "computes": k,
                        "reason": reason})
        return out


def decisions(g, ag, groups, sim) -> Decisions:
    """Per-activation decision (keep / recompute) with the reason, from the plan's blocks
    (``groups``: 0-based block index of every node; reported from 1) and the replay."""
    n = ag.n
    grp = np.asarray(groups, dtype=np.int64)
    later = np.full(n, -1, np.int64)
    np.maximum.at(later, ag.src, grp[ag.dst])
    computes = np.asarray(sim.computes, dtype=np.int64)[ag.func]
    return Decisions(ag.var, ag.func, ag.bytes, grp + 1, later > grp, computes, ag.t)


def build(p) -> dict:
    """The report dict of a plan (a :class:`planner.api.Plan`; see the module docstring for the
    keys), read off its fields in this order: the JSON report's own."""
    m = p.model
    segmented, ran = _segmented(m)
    return {
        "graph": p.graph.name,
        "nodes": p.nodes,
        "variables": p.variables,
        "depth": p.depth,
        "solver": p.solver,
        "strategy": p.strategy,
        "units": p.units,
        "budget": p.budget,
        "budget_bytes": p.budget_bytes,
        "peak_bytes": p.peak_bytes,
        "within_budget": p.within_budget,
        "baseline_peak_bytes": p.baseline_peak_bytes,
        "baseline_kind": p.baseline_kind,
        "lower_bound_bytes": p.lower_bound_bytes,
        "recompute_cost": p.recompute_cost,
        "forward_cost": p.forward_cost,
        "overhead": p.overhead,
        "recomputed": p.recomputed,
        "ops": p.ops,
        "seconds": p.seconds,
        "blocks": m.blocks,
        "model_recompute_cost": m.model_recompute_cost,
        "model_peak_bytes": m.model_peak_bytes,
        "comp_ratio": m.comp_ratio,
        "n_lower_sets": m.n_lower_sets,
        "family": m.family,
        "fell_back": m.fell_back,
        **({"dp_window": m.dp_window, "dp_front_cap": m.dp_front_cap, "dp_exact": m.dp_exact}
           if m.on_scale_path else {}),
        **({"dp_segmented": segmented} if segmented is not None else {}),
        **({"milp": dict(m.milp)} if m.milp else {}),
        **({"recompute_lower_bound": p.recompute_certificate.bound, "gap": p.recompute_certificate.gap,
            "certificate": p.recompute_certificate.report()} if p.recompute_certificate is not None else {}),
        "accounting": (p.step or {}).get("accounting", "activations"),
        **{k: v for k, v in (p.step or {}).items() if k != "accounting"},
        **({"workspace_bytes": None} if p.step and not _convolves(p.graph) else {}),
        "engine": {**p.engine, **ran},
        "decisions": p.decisions,
    }


def _segmented(m) -> tuple[dict | None, dict]:
    """The segmented DP's account split in two: what the plan is (the report's
    ``dp_segmented``; None for a DP walked whole) and how the session ran it
    (``walks_reused``: free walks the workers took from their stashes, which depends on the
    session's earlier solves and on failures, so it goes to the ``engine`` line, beside the
    supersteps)."""
    if not m.dp_segmented:
        return None, {}
    seg = dict(m.dp_segmented)
    reused = seg.pop("walks_reused", None)
    return seg, ({} if reused is None else {"walks_reused": int(reused)})


def _convolves(g) -> bool:
    """Whether a forward op of ``g`` is a convolution: the only kernels the workspace cap
    (``workspace_bytes``) bounds; without one the report says null, not a cap nothing uses."""
    return "conv2d" in (g.ops or ())


def dumps(report: dict) -> str:
    """The report as JSON: indented, except that each of the ``decisions`` (one per activation,
    10^6 of them on big graphs) is one compact line — written by the C encoder (``indent``
    would run the pure-Python one, far slower) and still one object per line to read."""
    return "".join(_json_chunks(report))


#: Decisions made into JSON at a time (:func:`write_json` streams them).
DECISION_CHUNK = 1 << 14


def _json_chunks(report: dict):
    """:func:`dumps`'s text in pieces: the head, then the decisions
    :data:`DECISION_CHUNK` at a time, so a 10^6-activation report is never whole in memory."""
    rest = {k: v for k, v in report.items() if k != "decisions"}
    text = json.dumps(rest, indent=1)
    if "decisions" not in report:
        yield text + "\n"
        return
    rows = report["decisions"]
    yield (text[:-2] + "," if rest else "{") + '\n "decisions": '   # text ends with "\n}"
    if not len(rows):
        yield "[]\n}\n"
        return
    sep = "[\n  "
    for lo in range(0, len(rows), DECISION_CHUNK):
        yield sep + ",\n  ".join(map(json.dumps, rows[lo:lo + DECISION_CHUNK]))
        sep = ",\n  "
    yield "\n ]\n}\n"


def write_json(report: dict, path) -> None:
    """The report as JSON (:func:`dumps`), by the one writer (``-``: stdout), in pieces."""
    write_text(path, _json_chunks(report))


#: How the no-recomputation baseline was obtained (``baseline_kind``), as the table says it.
BASELINE_KINDS = {"simulated": "simulated",
                  "activation_sum": "Σ activations, not simulated"}


def solver_text(report: dict) -> str:
    """The solver as run: ``exact -> approx (fallback)`` when the exact DP fell back."""
    if report.get("fell_back"):
        return f"{report['solver']} -> {report.get('family', 'approx')} (fallback)"
    return report["solver"]


def approximations_text(report: dict) -> str | None:
    """The approximate DP's scale options (``dp_window``/``dp_front_cap``) and what is known of
    the plan's distance to the family's optimum (none with either: :data:`NO_BOUND_TEXT`; the
    optimum itself without both), or None when the report has none (graphs planned without
    the scale path)."""
    if "dp_exact" not in report:
        return None
    if report["dp_exact"]:
        return "none (exact approximate DP: the family's optimum)"
    parts = [f"window {report['dp_window']}" if report.get("dp_window") else "no window",
             f"front cap {report['dp_front_cap']}" if report.get("dp_front_cap") else "no front cap"]
    seg = report.get("dp_segmented")
    if seg:
        parts.append(f"segmented: {seg['segments']} segments on the engine ({seg['mode']}, "
                     f"{seg['handed_over']} walked seeded)")
    return ", ".join(parts) + "; " + NO_BOUND_TEXT


#: What is known of how far a windowed or capped plan is from the approximate family's optimum
#: (the exact approximate DP's): none is proven; the gap is measured by ``bench/quality_bench.py``.
NO_BOUND_TEXT = "no known bound vs. the family's optimum"


def summary_table(report: dict, table=None):
    """A rich Table with the headline numbers and what qualifies them (``table``: another class
    with its surface, e.g. :class:`planner.plain_table.PlainTable`)."""
    if table is None:
        from rich.table import Table as table

    tab = table(title=f"plan: {report['graph']} ({report['nodes']:,} nodes, "
                      f"{solver_text(report)}, {report['strategy']}-centric)", show_header=False)
    tab.add_column("what", style="bold")
    tab.add_column("value", justify="right")
    base = max(1, report["baseline_peak_bytes"])
    kind = report.get("baseline_kind", "simulated")
    rows = [
        ("budget", f"{format_bytes(report['budget_bytes'])}  ({report['budget_bytes']:,} B)"),
        ("peak (simulated)", f"{format_bytes(report['peak_bytes'])}  "
                             f"({100 * report['peak_bytes'] / base:.1f}% of baseline)"),
        ("baseline (no recompute)", f"{format_bytes(report['baseline_peak_bytes'])}  "
                                    f"({BASELINE_KINDS.get(kind, kind)})"),
        *_over_budget_rows(report),
        *_step_rows(report),
        ("lower bound", format_bytes(report["lower_bound_bytes"])),
        ("recompute / forward", f"{report['recompute_cost']:,} / {report['forward_cost']:,}  "
                                f"({100 * report['overhead']:.1f}%)"),
        ("recomputed functions", f"{report['recomputed']:,}"),
        ("blocks", f"{report['blocks']:,}"),
    ]
    if report.get("fell_back"):
        rows.append(("DP family", f"{report.get('family', 'approx')} (fell back: the exact DP "
                                  f"is over --max-lower-sets)"))
    approx = approximations_text(report)
    if approx is not None:
        rows.append(("DP approximations", approx))
    ex = report.get("execute")
    if ex:
        how = (f"{ex.get('backend', '?')}, "
               f"{'recycling after last use' if ex.get('recycle') else 'freed at forgets'}")
        rows.append(("peak executed, tracked", f"{format_bytes(ex['tracked_peak_bytes'])}  "
                                               f"(plan's count; {how})"))
        rows.append(("peak executed, measured", f"{format_bytes(ex['measured_peak_bytes'])}  "
                                                f"({ex.get('meter', '?')}; "
                                                f"{ex['measured_over_predicted']:.2f}x predicted)"))
        if ex.get("measured_step_peak_bytes") is not None and "step_peak_bytes" in ex:
            rows.append(("step executed, measured", f"{format_bytes(ex['measured_step_peak_bytes'])}  "
                                                    f"({ex.get('meter', '?')}; "
                                                    f"{ex['measured_over_step_peak']:.3f}x the "
                                                    f"predicted step)"))
    rows += certificate_rows(report)
    rows.append(("seconds", f"{report['seconds']:.2f}"))
    for k, v in rows:
        tab.add_row(k, v)
    return tab


def certificate_rows(report: dict) -> list:
    """The table's rows for the certificate and the MILP. Why so wordy: a bound is only
    meaningful with the budget and model it certifies (on a whole-step plan, the activations'
    model at the activation budget the step was planned at, not the step's budget), a gap
    over a bound of 0 says nothing ("n/a"), and a skipped or time-limited bound must say so."""
    rows = []
    if "recompute_lower_bound" in report:
        c = report.get("certificate", {})
        bound = report["recompute_lower_bound"]
        cost = c.get("cost", report["model_recompute_cost"])
        at = c.get("budget_units", 0) * c.get("comp_ratio", 1)
        model = ("activations' model at the activation budget " if
                 report.get("accounting") == "whole-step" else "model at ")
        rows.append(("recompute lower bound", f"{bound:,} ({c.get('method', '?')}; model cost "
                                              f"{cost:,}; {model}{format_bytes(at)})"))
        rows.append(("gap", "n/a (bound 0)" if bound == 0 and cost > 0
                     else f"{100 * report['gap']:.1f}%"))
        rows += [("certificate", note) for note in c.get("notes", ())]
    if report.get("milp"):
        mi = report["milp"]
        if mi["optimal"]:
            how = "optimal"
        elif mi.get("stopped") == "killed":
            how = (f"time limit {mi['time_limit']:g} s hit before HiGHS returned "
                   f"({mi['variables']:,} variables): stopped, no dual bound")
        elif mi["dual_bound"] is None:
            how = f"time limit {mi['time_limit']:g} s hit: no dual bound yet"
        else:
            how = f"time limit {mi['time_limit']:g} s hit: dual bound {mi['dual_bound']:g}"
        rows.append(("MILP (HiGHS)", f"{how}; {mi['stages']} stages "
                                     f"({mi.get('stages_from', 'free order')}), "
                                     f"{mi['seconds']:.2f} s"))
        if mi.get("schedule"):
            rows.append(("MILP schedule", mi["schedule"]))
    return rows


def over_budget_text(report: dict) -> str | None:
    """Why the plan's peak is above its budget, or None when it fits (``within_budget``): the
    table says it beside the peak, where the JSON's ``within_budget: false`` alone does not.

    A plan is above its budget only where the budget does not bind the replayed peak: Chen's
    chain ignores it, and ``--units reference`` fits the reference DP's model (activations and
    their gradients, scaled sizes: FORMAT.md §4.2) while the replay also counts the parameters'
    gradients as they accumulate (vgg19 at 60 %: model 2.20 GiB under a 2.24 GiB budget, the
    replay 2.67 GiB, of which 0.46 GiB parameters' gradients)."""
    if report.get("within_budget", True):
        return None
    whole = report.get("accounting") == "whole-step"
    peak = report["step_peak_bytes"] if whole else report["peak_bytes"]
    head = (f"{'step peak' if whole else 'peak'} {format_bytes(peak)} > budget "
            f"{format_bytes(report['budget_bytes'])}: ")
    if report.get("solver") == "chen":
        return head + "Chen's sqrt(n) chain ignores the budget (as the reference's does)"
    if report.get("units") == "reference":
        return head + (f"--units reference fits the reference's model (peak "
                       f"{format_bytes(report['model_peak_bytes'])}: activations and their "
                       f"gradients, scaled sizes), the replay also counts the parameters' "
                       f"gradients; --units bytes fits the replay")
    return head + "the solver's plan does not fit it"


def _over_budget_rows(report: dict) -> list:
    text = over_budget_text(report)
    return [] if text is None else [("above the budget", text)]


def _step_rows(report: dict) -> list:
    """The whole step's rows of the table (graphs with op arguments: the budget's accounting),
    or the accounting alone."""
    if report.get("accounting") != "whole-step":
        return [("accounting", "activations (the reference's)")]
    bd = report["step_peak_breakdown"]
    parts = ", ".join(f"{k.replace('_', ' ')} {format_bytes(v)}" for k, v in bd.items()
                      if k not in ("op", "step") and v)
    return [("accounting", "whole step (budget, percentages: the step's)"),
            ("step peak (predicted)", f"{format_bytes(report['step_peak_bytes'])}  "
                                      f"(no recompute: {format_bytes(report['step_baseline_peak_bytes'])})"),
            ("at the step peak", f"{bd['op']}: {parts}"),
            *([("convolution workspace", format_bytes(report["workspace_bytes"]))]
              if report.get("workspace_bytes") is not None else [])]   # null: no convolution


def print_summary(report: dict, file=None) -> None:
    """Print :func:`summary_table` (to stdout by default: it is the result; pass stderr when
    stdout carries data)."""
    import sys

    from planner.plain_table import PlainTable, plain_stream

    out = file or sys.stdout
    text = summary_table(report, PlainTable).render(100) if plain_stream(out) else None
    if text is None:            # a terminal: rich's rendering, colours as rich chooses for out
        from rich.console import Console

        rendered = io.StringIO()
        Console(file=rendered, width=100, force_terminal=_terminal(out) or None).print(
            summary_table(report))
        text = rendered.getvalue()
    write_stream(out, text)     # a full disk or a closed pipe: one line (the one writer)


def _terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def plot(p, path) -> None:
    """PNG of live bytes per op: the plan, the no-recomputation baseline and the budget line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rep = p.report
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    gib = 2**30
    if p.baseline_timeline is not None and len(p.baseline_timeline):
        ax.plot(np.arange(len(p.baseline_timeline)), p.baseline_timeline / gib, color="0.6",
                lw=1.2, label="no recomputation")
    else:
        ax.axhline(rep["baseline_peak_bytes"] / gib, color="0.6", ls=":",
                   label="no recomputation (Σ activations)")
    tl = np.asarray(p.timeline)
    ax.plot(np.arange(len(tl)), tl / gib, color="C0", lw=1.4,
            label=f"plan ({rep['solver']}, {rep['strategy']}): peak {format_bytes(rep['peak_bytes'])}")
    ax.axhline(rep["budget_bytes"] / gib, color="C3", ls="--",
               label=f"budget {format_bytes(rep['budget_bytes'])}")
    ax.set_xlabel("schedule step")
    ax.set_ylabel("live memory (GiB)")
    ax.set_title(f"{rep['graph']}: memory timeline, recompute overhead {100 * rep['overhead']:.1f}%")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    write_bytes(path, png.getvalue())
