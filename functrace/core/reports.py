"""Reports on jitted programs (``lowered.report()``, ``compiled.report()``) for people and notebooks.

A report *is* its text (a ``str`` subclass: ``print(report)`` shows it, ``"kernel" in report``
searches it, as before reports were objects), with a one-line ``repr`` summing it up and an
HTML form (``_repr_html_``: tables, host steps grouped by reason with counts) that Jupyter shows.
"""
from __future__ import annotations

import html
import re
from collections import Counter

import numpy as np


def html_table(title: str, header: list, rows: list) -> str:
    """An HTML table with a caption; every cell escaped."""
    head = "".join(f"<th style='text-align:left'>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left;white-space:pre'>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return (f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def title_html(text: str) -> str:
    """``text`` as HTML, its markdown code spans (`name`) as ``<code>`` elements."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


class ProgramReport(str):
    """The text of a report, with ``summary`` (its one-line gist) and ``tables`` (``(title, header,
    rows)`` for the HTML form)."""

    summary: str
    tables: list

    def __new__(cls, text: str, summary: str, tables: list):
        report = super().__new__(cls, text)
        report.summary = summary
        report.tables = tables
        return report

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.summary}>"

    def __str__(self) -> str:
        return str.__str__(self)

    def _repr_html_(self) -> str:
        return f"<div><p>{title_html(self.summary)}</p>" + "".join(html_table(*t) for t in self.tables) + "</div>"


class LoweredReport(ProgramReport):
    """What the optimizer's passes did to a program (``lowered.report()``): equation counts per pass
    (``counts``) and the buffer analysis of the result (``analysis``)."""

    def __new__(cls, passes_report):
        a = passes_report.analysis
        saved_bytes = sum(int(np.prod(v.aval.shape, dtype=np.int64)) * v.aval.dtype.itemsize
                          for v in a.saved_for_backward)
        counts = passes_report.counts
        summary = (f"{counts[-1][1]} equations after optimization (from {counts[0][1]}); "
                   f"{len(a.saved_for_backward)} values saved for backward ({saved_bytes} bytes); "
                   f"peak live intermediate bytes {a.peak_bytes}")
        tables = [("Passes", ["pass", "equations"], counts),
                  ("Buffers", ["measure", "value"], [("values saved for backward", len(a.saved_for_backward)),
                                                     ("bytes saved for backward", saved_bytes),
                                                     ("peak live intermediate bytes", a.peak_bytes)])]
        report = super().__new__(cls, str(passes_report), summary, tables)
        report.counts = counts
        report.analysis = a
        return report


class CompiledReport(ProgramReport):
    """How a compiled program runs (``compiled.report()``): its backend and device, kernel launches
    and the host steps, grouped by why they run on the host (``host_steps``: {(primitive, reason):
    count})."""

    def __new__(cls, executable):
        text = executable.report()
        launches = getattr(executable, "num_kernel_launches", 0)
        host_steps: Counter = Counter()
        kernels = []
        plan = getattr(executable, "plan", None)
        for step in (plan.steps if plan is not None else []):
            if hasattr(step, "reasons"):  # a run of host steps
                host_steps.update((e.primitive.name, why) for e, why in zip(step.eqns, step.reasons))
            else:
                kernels.extend(line.strip()[len("kernel"):].strip() for line in step.describe()
                               if line.strip().startswith("kernel"))
        backend = getattr(executable, "backend", "?")
        rt = getattr(executable, "rt", None)
        where = f"{backend} on {rt.name}" if rt is not None else backend
        if plan is None:  # every equation a host step: count them so, as the summary says
            eqns = executable.closed.jaxpr.eqns
            why = ("a small program: below a kernel launch's latency" if backend == "opencl"
                   else f"the {backend} backend")
            host_steps.update((e.primitive.name, why) for e in eqns)
            summary = f"{where}: {len(eqns)} equations run by numpy on the host"
            if backend == "opencl":
                summary += f" ({why})"
            if "host steps per call" not in text:
                text += f"\nhost steps per call: {len(eqns)} (every equation; {why})"
        else:
            summary = (f"{where}: {launches} kernel launches, {sum(host_steps.values())} host steps per call"
                       + (f" ({_reasons_summary(host_steps)})" if host_steps else ""))
        tables = []
        if kernels:
            tables.append(("Kernels, in launch order", ["#", "kernel", "work"],
                           [(i, *k.split(": ", 1)) if ": " in k else (i, k, "") for i, k in enumerate(kernels)]))
        if host_steps:
            tables.append(("Host steps, by reason", ["reason", "steps", "primitives"],
                           _grouped_host_steps(host_steps)))
        peak = getattr(executable, "peak_bytes", None)
        tables.append(("Program", ["measure", "value"],
                       [("backend", backend)] + ([("device", rt.name)] if rt is not None else [])
                       + [("kernel launches per call", launches), ("host steps per call", sum(host_steps.values()))]
                       + ([("peak live intermediate bytes", peak)] if peak is not None else [])))
        report = super().__new__(cls, text, summary, tables)
        report.host_steps = dict(host_steps)
        report.kernel_launches = launches
        return report


def _grouped_host_steps(host_steps: Counter) -> list:
    """(reason, number of steps, "prim x n, ...") rows, the most frequent reason first."""
    by_reason: dict = {}
    for (prim, why), n in host_steps.items():
        by_reason.setdefault(why, Counter())[prim] += n
    rows = [(why, sum(c.values()), ", ".join(f"{p} x{n}" if n > 1 else p for p, n in c.most_common()))
            for why, c in by_reason.items()]
    return sorted(rows, key=lambda r: -r[1])


def _reasons_summary(host_steps: Counter) -> str:
    rows = _grouped_host_steps(host_steps)
    return "; ".join(f"{n} {why}" for why, n, _ in rows[:2]) + ("; ..." if len(rows) > 2 else "")
