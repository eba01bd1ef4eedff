"""Renderers of a ``verify FILE.py:FUNC`` report: the terminal view, JSON, Markdown and JUnit XML."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hlo_doctor.core.escape.markdown import md_cell
from hlo_doctor.core.escape.xml import xml_lines, xml_text
from hlo_doctor.core.format import fmt_ms
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.verify import peak_changes
from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.program.results import ProgramReport

__all__ = ["JSON_SCHEMA", "fixed_at", "metric_rows", "to_json", "to_junit", "to_markdown", "to_terminal"]

JSON_SCHEMA = "hlo-doctor.verify-program/1"
REMOVED_ROWS = 8
"""Removed ops listed by the table and Markdown (JSON holds every one)."""


def to_json(report: ProgramReport) -> str:
    """The whole report as JSON (schema ``hlo-doctor.verify-program/1``)."""
    return json.dumps({"schema": JSON_SCHEMA, **report.to_dict()}, indent=2, default=str) + "\n"


def _what(report: ProgramReport) -> str:
    s = report.settings
    if s.fix is not None:
        safety = "" if report.fix_safe is None else (" (safe)" if report.fix_safe else " (unsafe)")
        return f"`{s.baseline}` as written vs with fix `{s.fix}`{safety} (a fixed copy)"
    return f"`{s.baseline}` vs `{s.treatment}`"


def fixed_at(report: ProgramReport) -> str:
    """Which line(s) of the target's file the fix changed, and why there: the baseline's finding that
    named each one, or ``--fix-line``; "" without ``--fix``."""
    s = report.settings
    if s.fix is None:
        return ""
    file = s.baseline.rpartition(":")[0].rsplit("/", 1)[-1]
    if report.fix_sites:
        return ("fixed at the line(s) the baseline's findings name: "
                + "; ".join(site.describe(file) for site in report.fix_sites))
    if s.fix_line is not None:
        arg = f" (argument {s.fix_arg})" if s.fix_arg else ""
        return f"fixed at {file}:{s.fix_line}{arg}, as --fix-line said"
    return ""


def _setup(report: ProgramReport) -> str:
    s = report.settings
    load = f"load average {report.load_average[0]:.2f} -> {report.load_average[1]:.2f}"
    rounds = report.stopping.rounds if report.stopping is not None else len(report.baseline.rounds)
    return (f"{rounds} interleaved rounds per side of {s.steps} calls ({s.warmup} warm-up), outputs compared "
            f"{report.outputs}; backend {report.backend}, {report.elapsed_s:.0f} s, {load}.")


def _interval(c: SampleComparison) -> str:
    return "-" if math.isnan(c.ci_low) else f"[{c.ci_low:.3f}, {c.ci_high:.3f}]"


def metric_rows(report: ProgramReport) -> list[tuple[str, str, str, str, str, str]]:
    """(metric, baseline, treatment, ratio, interval, outcome): the step time, the round time, the compiles
    and the removed ops' time."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for name, c in (("step ms", report.step_time), ("round ms", report.round_time)):
        if c is not None:
            # Medians in the baseline and treatment cells; a paired comparison's ratio is not theirs.
            tag = " paired" if c.method == "paired rounds" else ""
            rows.append((name, f"{c.baseline_median:,.3f}", f"{c.candidate_median:,.3f}", f"x{c.ratio:.3f}{tag}",
                         _interval(c), str(c.outcome)))
    rows.append(("compiles", str(report.baseline.compiles), str(report.treatment.compiles), "-", "-", ""))
    removed = report.removed_time_per_step_us
    if removed is not None:
        # Op time summed over the threads that ran the ops: on XLA:CPU it can exceed the wall step.
        step = report.step_time.baseline_median if report.step_time is not None else None
        over = " (summed over threads, > step)" if step is not None and removed / 1000 > step else ""
        rows.append(("removed op ms/step", f"{removed / 1000:,.3f}", "0", "-", "-",
                     f"{len(report.removed_ops)} op(s) gone{over}"))
    return rows


def _md(text: str) -> str:
    return md_cell(text)


def to_markdown(report: ProgramReport) -> str:
    """The report as Markdown (a PR comment or a file beside the JSON)."""
    status = "PASS" if report.passed else "FAIL"
    lines = [f"## hlo-doctor verify: {status} ({report.verdict})", "", f"{_what(report)}; {_setup(report)}", ""]
    if fixed_at(report):
        lines += [_md(fixed_at(report)) + ".", ""]
    lines += ["| # | check | result | figure |", "|---|---|---|---|"]
    for c in report.checks:
        result = "pass" if c.passed else ("not run" if c.figure.startswith("not run") else "**FAIL**")
        lines.append(f"| {c.number} | {c.name} | {result} | {_md(c.figure)} |")
    details = [c for c in report.checks if c.detail]
    if details:
        lines.append("")
        lines += [f"- check {c.number} ({c.name}): {_md(c.detail)}" for c in details]
    lines += ["", "Medians (step: every measured call; round: each round's wall time).", "",
              "| metric | baseline | treatment | ratio | CI (1 - alpha) | outcome |", "|---|---:|---:|---:|---|---|"]
    lines += ["| " + " | ".join(_md(x) for x in row) + " |" for row in metric_rows(report)]
    if report.removed_ops:
        lines += ["", "Ops of the baseline's capture that the treatment's capture does not run:", "",
                  "| rule | program/op | shape | baseline time/step |", "|---|---|---|---:|"]
        for o in report.removed_ops[:REMOVED_ROWS]:
            lines.append(f"| {o.code or '-'} | {_md(o.module)}/{_md(o.op)} | `{fmt_shape(o.shape)}` | "
                         f"{fmt_ms(o.time_per_step_us)} |")
        if len(report.removed_ops) > REMOVED_ROWS:
            lines.append(f"\n{len(report.removed_ops) - REMOVED_ROWS} more in verify.json.")
    lines += [f"\n- {_md(p)}" for p in peak_changes(report.baseline_hlo, report.treatment_hlo)]
    lines += [f"\nNote: {note}" for note in report.notes]
    if report.fix_diff:
        lines += ["", "<details><summary>What the fix changed (in a copy)</summary>", "", "```diff",
                  report.fix_diff.rstrip(), "```", "</details>"]
    return "\n".join(lines) + "\n"


def to_junit(report: ProgramReport, *, timestamp: datetime | None = None) -> str:
    """JUnit XML: one test case per check, a failure for each check that did not pass; the step-time
    case's ``time`` is the treatment's median call in seconds."""
    when = (timestamp or datetime.now(UTC)).replace(microsecond=0)
    suite = ET.Element("testsuite", name="hlo-doctor verify", timestamp=when.isoformat())
    props = ET.SubElement(suite, "properties")
    for name, value in (("baseline", report.settings.baseline), ("treatment", report.settings.treatment or ""),
                        ("fix", report.settings.fix or ""), ("outputs", report.outputs)):
        ET.SubElement(props, "property", name=name, value=xml_text(value))
    failures = 0
    for c in report.checks:
        seconds = (report.treatment.median_step_ms or 0.0) / 1e3 if c.number == 4 else 0.0
        case = ET.SubElement(suite, "testcase", name=xml_text(f"{c.number} {c.name}"), classname="verify.program",
                             time=f"{seconds:.6f}")
        if not c.passed:
            failures += 1
            message = f"{c.figure}: {c.detail}" if c.detail else c.figure
            ET.SubElement(case, "failure", message=xml_text(message), type="verify").text = xml_lines(message)
        ET.SubElement(case, "system-out").text = xml_lines(f"{c.figure}" + (f"\n{c.detail}" if c.detail else ""))
    suite.set("tests", str(len(report.checks)))
    suite.set("failures", str(failures))
    suite.set("time", f"{report.elapsed_s:.3f}")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def to_terminal(report: ProgramReport) -> RenderableType:
    """The people's view (stderr): the verdict, the checks (they decide), then the measured table."""
    colour = "green" if report.passed else "red"
    parts: list[RenderableType] = [
        Text(f"verify: {'PASS' if report.passed else 'FAIL'} ({report.verdict})", style=f"bold {colour}"),
        Text(_what(report).replace("`", "") + "; " + _setup(report), style="dim")]
    if fixed_at(report):
        parts.append(Text(fixed_at(report), style="dim"))
    checks = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("#", "check", "result", "figure"):
        checks.add_column(col, overflow="fold")
    for c in report.checks:
        result = (Text("pass", style="green") if c.passed else
                  Text("not run", style="yellow") if c.figure.startswith("not run") else Text("FAIL", style="bold red"))
        checks.add_row(str(c.number), Text(c.name), result, Text(c.figure))
    parts.append(checks)
    parts += [Text(f"  check {c.number}: {c.detail}", style="red") for c in report.checks if not c.passed and c.detail]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (("median", "left"), ("baseline", "right"), ("treatment", "right"), ("ratio", "right"),
                         ("CI", "left"), ("outcome", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in metric_rows(report):
        table.add_row(*(Text(cell) for cell in row))
    parts.append(table)
    for op in report.removed_ops[:REMOVED_ROWS]:
        parts.append(Text(f"  gone: {op.module}/{op.op} {fmt_shape(op.shape)}: {fmt_ms(op.time_per_step_us)}/step"
                          + (f" ({op.code})" if op.code else ""), style="dim"))
    parts += [Text(f"  {line}", style="dim") for line in peak_changes(report.baseline_hlo, report.treatment_hlo)]
    parts += [Text(f"note: {note}", style="dim") for note in report.notes]
    return Group(*parts)
