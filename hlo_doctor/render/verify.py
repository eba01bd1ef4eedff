"""Renderers of a verify report of two engine trees: the terminal view, JSON, Markdown, and the metric
rows both tables show. (``verify --target``'s report: :mod:`hlo_doctor.render.verify_target`.)"""

from __future__ import annotations

import json
import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hlo_doctor.core.escape.markdown import md_cell, md_cell_code
from hlo_doctor.core.format import fmt_bytes, fmt_ms
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.checks import ratio as _ratio
from hlo_doctor.verify.engine.results import VerifyReport
from hlo_doctor.verify.results import HloEvidence

__all__ = ["JSON_SCHEMA", "metric_rows", "statistic_lines", "to_json", "to_markdown", "to_terminal"]

JSON_SCHEMA = "hlo-doctor.verify/1"


def to_json(report: VerifyReport) -> str:
    """The whole report as JSON (schema ``hlo-doctor.verify/1``)."""
    return json.dumps({"schema": JSON_SCHEMA, **report.to_dict()}, indent=2, default=str) + "\n"


def metric_rows(report: VerifyReport) -> list[tuple[str, str, str, str, str, str]]:
    """(metric, baseline, treatment, ratio, interval, outcome) rows: the table people read.

    Throughput, batch TTFT, TPOT and decode step are medians (over rounds; the decode step over every
    step of every round); the decode step's and the throughput's ratio and interval are the paired
    rounds' (geometric mean of the per-pair ratios). ``profiled step ms`` (the step of verify's own
    captures, what diagnose's % of step divides by), ``removed op ms/step`` (the ops' times summed over threads) and ``argmax ms/step`` come
    from the two captures.
    """
    b, t = report.baseline, report.treatment
    rows: list[tuple[str, str, str, str, str, str]] = []

    def cmp_row(name: str, comparison: SampleComparison | None, fmt: str) -> None:
        if comparison is None:
            return
        interval = ("-" if math.isnan(comparison.ci_low)
                    else f"[{comparison.ci_low:.3f}, {comparison.ci_high:.3f}]")
        # The baseline and treatment cells are medians; a paired comparison's ratio is not theirs.
        tag = " paired" if comparison.method == "paired rounds" else ""
        rows.append((name, format(comparison.baseline_median, fmt), format(comparison.candidate_median, fmt),
                     f"x{comparison.ratio:.3f}{tag}", interval, str(comparison.outcome)))

    cmp_row("throughput tok/s", report.throughput, ",.1f")
    cmp_row("batch TTFT ms", report.ttft, ",.1f")
    t_worst = max(r.batch_ttft_ms for r in t.rounds)
    b_worst = max(r.batch_ttft_ms for r in b.rounds)
    rows.append(("TTFT worst round", f"{b_worst:,.1f}", f"{t_worst:,.1f}",
                 f"x{_ratio(t_worst, b_worst):.3f}", "-", ""))
    rows.append(("TPOT ms", f"{b.median('tpot_ms'):,.1f}", f"{t.median('tpot_ms'):,.1f}",
                 f"x{_ratio(t.median('tpot_ms'), b.median('tpot_ms')):.3f}", "-", ""))
    cmp_row("decode step ms", report.step_time, ",.1f")
    base_us, treat_us = report.profiled_step_us
    if base_us is not None and treat_us is not None:
        rows.append(("profiled step ms", f"{base_us / 1e3:,.1f}", f"{treat_us / 1e3:,.1f}",
                     f"x{_ratio(treat_us, base_us):.3f}", "-", "captured"))
    rows.append(("compiles", str(b.compiles), str(t.compiles), "-", "-", ""))
    removed = report.removed_time_per_step_us
    if removed is not None:
        # Op time summed over the threads that ran the ops: on XLA:CPU more than the wall step can hold.
        rows.append(("removed op ms/step", f"{removed / 1000:,.3f}", "0", "-", "-",
                     "gone (summed over threads, > step)" if report.removed_exceeds_step else "gone"))
    for o in report.removed_ops:
        if o.status == "narrowed" and o.time_per_step_us and o.treatment_time_per_step_us is not None:
            rows.append(("argmax ms/step", f"{o.time_per_step_us / 1000:,.3f}",
                         f"{o.treatment_time_per_step_us / 1000:,.3f}",
                         f"x{_ratio(o.treatment_time_per_step_us, o.time_per_step_us):.3f}", "-", "narrowed"))
    return rows


def statistic_lines(report: VerifyReport) -> list[str]:
    """One line per paired comparison: the medians the table shows and the statistic its verdict uses,
    each labelled (``decode step ms: medians 639.1 -> 585.6 (x0.916); verdict on the paired
    trimmed-mean ratio x0.994, 95% CI [...]: no change``), so the two cannot read as one figure."""
    out = []
    for name, c, fmt in (("decode step ms", report.step_time, ",.1f"), ("throughput tok/s", report.throughput, ",.1f")):
        if c is None or c.method != "paired rounds":
            continue
        medians = f"medians {format(c.baseline_median, fmt)} -> {format(c.candidate_median, fmt)}"
        if c.baseline_median:
            medians += f" (x{c.candidate_median / c.baseline_median:.3f})"
        out.append(f"{name}: {medians}; verdict on the {c.ratio_text()}: {c.outcome}")
    if report.removed_exceeds_step:
        out.append("removed op ms/step: the removed ops' times summed over the threads that ran them, not wall "
                   "time; more than the profiled step of the baseline")
    return out


def to_markdown(report: VerifyReport) -> str:
    """The report as Markdown (a PR comment or a file beside the JSON)."""
    s = report.settings
    status = "PASS" if report.passed else "FAIL"
    lines = [f"## hlo-doctor verify: {status} ({report.verdict})", ""]
    what = f"fix `{s.fix}` ({s.variant})" if s.fix and s.treatment is None else "treatment tree"
    cfg = report.config
    lines.append(
        f"Baseline `{report.baseline.source}` vs {what} `{report.treatment.source}`; "
        f"{s.rounds} interleaved rounds per variant, batch {cfg.get('batch')}, vocab {cfg.get('vocab_size')}, "
        f"{cfg.get('max_tokens')} tokens per request, backend {report.backend}, {report.elapsed_s:.0f} s."
    )
    lines += ["", "| # | check | result | figure |", "|---|---|---|---|"]
    for c in report.checks:
        lines.append(f"| {c.number} | {c.name} | {'pass' if c.passed else '**FAIL**'} | {_md(c.figure)} |")
    details = [c for c in report.checks if c.detail]
    if details:
        lines.append("")
        lines += [f"- check {c.number} ({c.name}): {_md(c.detail)}" for c in details]
    lines += ["", "Medians over the rounds (decode step: over every step of every round); the decode step's and "
              "the throughput's ratio and interval come from the paired rounds (each round's trimmed mean, "
              "compared within each AB/BA pair: t-test over the pairs). Profiled step, removed and argmax times "
              f"come from the captures ({s.profile_steps} profiled decode steps). {_stopping(report)}", "",
              f"| metric | baseline | treatment | ratio | {_level(report)} interval | outcome |",
              "|---|---:|---:|---:|---|---|"]
    for row in metric_rows(report):
        lines.append("| " + " | ".join(_md(x) for x in row) + " |")
    # Figures and words of our own (no name from a capture): written as they are.
    lines += ["", *(f"- {x}" for x in statistic_lines(report))] if statistic_lines(report) else []
    if report.removed_ops:
        lines += ["", "Wasteful ops in the baseline's trace (hlo-doctor rules) and in the treatment's:", "",
                  "| rule | op | shape | baseline time/step | treatment time/step | in treatment |",
                  "|---|---|---|---:|---:|---|"]
        for o in report.removed_ops:
            lines.append(f"| {_md(o.code)} | {md_cell_code(f'{o.module}/{o.op}')} | {md_cell_code(fmt_shape(o.shape))} | {fmt_ms(o.time_per_step_us)} | "
                         f"{fmt_ms(o.treatment_time_per_step_us) if o.status != 'gone' else '0 (gone)'} | {o.status} |")
    peaks = peak_changes(report.baseline_hlo, report.treatment_hlo)
    if peaks:
        lines += ["", "Peak device memory per program (the captures' buffer assignments):", ""]
        lines += [f"- {_md(p)}" for p in peaks]
    for note in report.notes:
        lines += ["", f"Note: {note}"]
    if report.fix_diff:
        lines += ["", "<details><summary>What the fix changed</summary>", "", "```diff", report.fix_diff.rstrip(),
                  "```", "</details>"]
    return "\n".join(lines) + "\n"


def _level(report: VerifyReport) -> str:
    """The intervals' level: 95% at alpha 0.05, higher at a budget's later looks (alpha spent per look)."""
    alpha = report.step_time.alpha if report.step_time is not None else report.settings.alpha
    return f"{(1 - alpha) * 100:.4g}%"


def _stopping(report: VerifyReport) -> str:
    """How many rounds ran and why no more, as a sentence."""
    stop = report.stopping
    if stop is None:
        return ""
    if stop.budget_s is None:
        return f"Rounds: {stop.rounds} a side (no --budget)."
    return f"Rounds: {stop.describe()}, {stop.looks} look(s) at the verdict."


def _md(text: str) -> str:
    return md_cell(text)


def peak_changes(baseline: HloEvidence | None, treatment: HloEvidence | None) -> list[str]:
    """One line per program of either side's steps: its peak on each side and the change (from the
    sides' captured buffer assignments); empty when neither side has them."""
    base = dict(baseline.peaks) if baseline is not None else {}
    treat = dict(treatment.peaks) if treatment is not None else {}
    lines = []
    for module in sorted(set(base) | set(treat), key=lambda m: -max(base.get(m, 0), treat.get(m, 0))):
        b, t = base.get(module), treat.get(module)
        change = fmt_bytes(t - b) if b is not None and t is not None else ("gone" if t is None else "new")
        if b is not None and t is not None and t > b:
            change = "+" + change
        lines.append(f"peak memory {module}: {fmt_bytes(b) if b is not None else '-'} -> "
                     f"{fmt_bytes(t) if t is not None else '-'} ({change})")
    return lines


def to_terminal(report: VerifyReport) -> RenderableType:
    """The people's view (stderr): checks first (they decide), then the measured table."""
    colour = "green" if report.passed else "red"
    status = "PASS" if report.passed else "FAIL"
    parts: list[RenderableType] = [Text(f"verify: {status} ({report.verdict})", style=f"bold {colour}")]
    checks = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("#", "check", "result", "figure"):
        checks.add_column(col, overflow="fold")
    for c in report.checks:
        checks.add_row(str(c.number), Text(c.name), Text("pass", style="green") if c.passed else Text("FAIL", style="bold red"),
                       Text(c.figure))
    parts.append(checks)
    parts += [Text(f"  check {c.number}: {c.detail}", style="red") for c in report.checks if not c.passed and c.detail]
    # No box: the table must fit an 80-column CI log without wrapping its rows.
    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for col, justify in (("median", "left"), ("baseline", "right"), ("treatment", "right"), ("ratio", "right"),
                         (f"{_level(report)} CI", "left"), ("outcome", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in metric_rows(report):
        table.add_row(*(Text(cell) for cell in row))
    parts.append(table)
    parts += [Text(f"  {line}") for line in statistic_lines(report)]
    if report.stopping is not None:
        parts.append(Text(f"  {_stopping(report)}", style="dim"))
    for op in report.removed_ops:
        now = "" if op.status == "gone" else f" ({fmt_ms(op.treatment_time_per_step_us)}/step)"
        parts.append(Text(f"  {op.code} {op.module}/{op.op} {fmt_shape(op.shape)}: {fmt_ms(op.time_per_step_us)}/step in "
                          f"baseline, {op.status} in treatment{now}", style="dim"))
    parts += [Text(f"  {line}", style="dim") for line in peak_changes(report.baseline_hlo, report.treatment_hlo)]
    parts += [Text(f"note: {note}", style="dim") for note in report.notes]
    return Group(*parts)
