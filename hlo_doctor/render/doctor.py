"""Renderers of ``hlo-doctor doctor``'s result: ``report.md`` (what was found, what the fix changed,
what it measured, the verdict), ``doctor.json`` and the terminal view.

They read the result through :class:`DoctorOutcome`, a Protocol that
:class:`hlo_doctor.doctor.DoctorResult` satisfies: the orchestrator imports its renderers, never the
other way round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Group, RenderableType
from rich.text import Text

from hlo_doctor.core.errors import ExitCode
from hlo_doctor.core.escape.markdown import md_cell, md_cell_code, md_code, md_text
from hlo_doctor.core.format import fmt_ms, fmt_source
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.verify import metric_rows
from hlo_doctor.render.verify import to_terminal as verify_terminal
from hlo_doctor.verify.engine.results import VerifyReport

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis

__all__ = ["JSON_SCHEMA", "DoctorOutcome", "to_json", "to_markdown", "to_terminal"]

JSON_SCHEMA = "hlo-doctor.doctor/1"
"""The ``schema`` tag of doctor.json."""


class DoctorRunSettings(Protocol):
    """What the renderers read of the doctor's settings."""

    @property
    def out_dir(self) -> Path: ...

    @property
    def variant(self) -> str: ...


class DoctorOutcome(Protocol):
    """What the renderers read of a doctor run (:class:`hlo_doctor.doctor.DoctorResult` is one)."""

    @property
    def settings(self) -> DoctorRunSettings: ...

    @property
    def engine_dir(self) -> str: ...

    @property
    def diagnosis(self) -> Diagnosis: ...

    @property
    def fix_id(self) -> str | None: ...

    @property
    def fix_diff(self) -> str: ...

    @property
    def treatment_dir(self) -> Path | None: ...

    @property
    def verify(self) -> VerifyReport | None: ...

    @property
    def stage_seconds(self) -> tuple[tuple[str, float], ...]: ...

    @property
    def elapsed_s(self) -> float: ...

    def estimate(self) -> dict[str, Any] | None: ...

    @property
    def verdict(self) -> str: ...

    @property
    def exit_code(self) -> ExitCode: ...

    def to_dict(self) -> dict[str, Any]: ...


def _diff_stats(diff: str) -> list[tuple[str, int, int]]:
    """(file, lines added, lines removed) per file of a unified diff."""
    stats: list[tuple[str, int, int]] = []
    for line in diff.splitlines():
        if line.startswith("+++ "):
            stats.append((line[4:].removeprefix("b/"), 0, 0))
        elif stats and line.startswith("+") and not line.startswith("+++"):
            name, a, r = stats[-1]
            stats[-1] = (name, a + 1, r)
        elif stats and line.startswith("-") and not line.startswith("---"):
            name, a, r = stats[-1]
            stats[-1] = (name, a, r + 1)
    return stats


def to_markdown(result: DoctorOutcome) -> str:
    """``report.md``: what was found, what the fix changed, what it measured, the verdict."""
    d = result.diagnosis
    lines = [f"# hlo-doctor doctor: {result.verdict}", ""]
    lines.append(f"Engine `{result.engine_dir}`; artifacts in `{result.settings.out_dir}`; "
                 f"{result.elapsed_s:.0f} s in all (" +
                 ", ".join(f"{name} {s:.0f} s" for name, s in result.stage_seconds) + ").")
    lines += ["", "## 1. What was found", "",
              f"Diagnosis of the engine's own trace (`profile/`, {d.num_steps} decode steps, "
              f"backend {d.backend or '?'}): {d.summary_line()}.", ""]
    if d.fixes_line():
        lines += [d.fixes_line() + ".", ""]
    if d.findings:
        lines += ["| rule | op | shape | time/step | % of step | source | fix |", "|---|---|---|---:|---:|---|---|"]
        for f in d.findings:
            pct = "-" if f.pct_of_step is None else f"{f.pct_of_step:.1f}%"
            lines.append(f"| {md_cell(f.code)} | {md_cell_code(f'{f.module}/{f.op}')} | {md_cell_code(fmt_shape(f.shape))} | "
                         f"{fmt_ms(f.time_per_step_us)} | {pct} | {md_cell_code(fmt_source(f.source)) or '-'} | "
                         f"{md_cell(f.fix or '-')} |")
    lines += ["", "## 2. What the fix changed", ""]
    if result.fix_id is None:
        lines.append("No bundled fix applies to these findings; nothing was changed.")
    else:
        lines.append(f"`hlo-doctor apply-fix {result.fix_id}` ({result.settings.variant} variant) on a copy of the "
                     f"engine (`treatment-engine/`; the original is untouched), diff in `fix.diff`:")
        lines.append("")
        for name, added, removed in _diff_stats(result.fix_diff):
            lines.append(f"- `{name}`: +{added} -{removed}")
    lines += ["", "## 3. What it measured", ""]
    v = result.verify
    if v is None:
        lines.append("Nothing to verify.")
    else:
        cfg = v.config
        lines.append(f"`hlo-doctor verify`: baseline and treatment in one process, each warmed up with its own "
                     f"precompiled menu, {v.settings.rounds} interleaved rounds each of the offline batch "
                     f"(batch {cfg.get('batch')}, vocab {cfg.get('vocab_size')}, {cfg.get('max_tokens')} tokens "
                     f"per request).")
        lines += ["", "| # | check | result | figure |", "|---|---|---|---|"]
        for c in v.checks:
            lines.append(f"| {c.number} | {c.name} | {'pass' if c.passed else '**FAIL**'} | "
                         f"{md_cell(c.figure)} |")
        lines += ["", "| metric | baseline | treatment | ratio | 95% interval | outcome |",
                  "|---|---:|---:|---:|---|---|"]
        for row in metric_rows(v):
            lines.append("| " + " | ".join(md_cell(x) for x in row) + " |")
        if v.removed_ops:
            lines += ["", "Wasteful ops of the baseline and what became of them in the treatment's own trace:", ""]
            for o in v.removed_ops:
                now = "" if o.status == "gone" else f" ({fmt_ms(o.treatment_time_per_step_us)} per step)"
                lines.append(f"- {md_text(o.code)} {md_code(f'{o.module}/{o.op}')} {md_code(fmt_shape(o.shape))}: "
                             f"{fmt_ms(o.time_per_step_us)} per step, {md_text(o.status)}{now}")
        for note in v.notes:
            lines += ["", f"Note: {note}"]
        lines += _estimate_lines(result)
    lines += ["", "## 4. Verdict", ""]
    if v is None:
        lines.append(result.verdict)
    else:
        failed = [c for c in v.checks if not c.passed]
        if not failed:
            st = v.step_time  # check 5's statistic: the decode steps, paired rounds
            change = f"decode step {st.outcome} ({st.ratio_text()})" if st is not None else "decode step not measured"
            lines.append(f"**PASS**: the fix stays on the precompiled menu, keeps the tokens and removes the wasteful "
                         f"ops from the trace; {change}.")
        else:
            lines.append("**FAIL**: " + "; ".join(f"check {c.number} ({c.name}): {c.figure}" for c in failed))
    return "\n".join(lines) + "\n"


def to_json(result: DoctorOutcome) -> str:
    """``doctor.json``: the result as data (schema ``hlo-doctor.doctor/1``)."""
    return json.dumps({"schema": JSON_SCHEMA, **result.to_dict()}, indent=2, default=str) + "\n"


def to_terminal(result: DoctorOutcome) -> RenderableType:
    """The people's view (stderr): what was found, what was fixed, verify's view, the verdict."""
    d = result.diagnosis
    parts: list[RenderableType] = [Text(f"found: {d.summary_line()}", style="bold")]
    if d.fixes_line():
        parts.append(Text(f"  {d.fixes_line()}"))
    for f in d.findings:
        tps = "-" if f.time_per_step_us is None else f"{f.time_per_step_us:,.0f} us/step"
        parts.append(Text(f"  {f.code} {f.module}/{f.op} {fmt_shape(f.shape)}: {tps} {fmt_source(f.source)}"))
    if result.fix_id is not None:
        parts.append(Text(f"fixed: {result.fix_id} ({result.settings.variant}) on a copy: {result.treatment_dir}",
                          style="bold"))
    if result.verify is not None:
        parts.append(verify_terminal(result.verify))
    line = _estimate_line(result)
    if line:
        parts.append(Text(line))
    colour = "green" if int(result.exit_code) == 0 else "red"
    parts.append(Text(f"doctor: {result.verdict} ({result.elapsed_s:.0f} s); report: "
                      f"{Path(result.settings.out_dir) / 'report.md'}", style=f"bold {colour}"))
    return Group(*parts)


def _estimate_line(result: DoctorOutcome) -> str:
    """``estimate: diagnose promised 14.48 ms per step; verify measured 17.25 ms of the decode step (0.84)...``."""
    e = result.estimate()
    if e is None or e["promised_ms"] is None:
        return ""
    got, ratio = e["measured_decode_step_ms"], e["promise_over_decode_step"]
    if got is not None:
        measured = (f"; verify measured {fmt_ms(got * 1e3)} of the decode step by its verdict's ratio"
                    + ("" if ratio is None else f" (promise / measured {ratio:.2f})"))
    else:
        measured = f"; the decode step: {e['decode_step']}" if e.get("decode_step") else ""
    measured += _measured_range(e)
    # One capture a side: a difference, not a measured saving (no test says it is more than noise).
    seen = e["measured_profiled_step_ms"]
    if seen is not None:
        measured += (f"; the fixed side's profiled step was {fmt_ms(abs(seen) * 1e3)} "
                     f"{'shorter' if seen >= 0 else 'longer'} (one capture a side, not tested)")
    how = f" ({e['how']})" if e.get("how") else ""
    return f"estimate: diagnose promised {_promised(e)}{how}{measured}"


def _measured_range(e: dict[str, Any]) -> str:
    """``; the saving verify's ratio allows: 8.5-41.5 ms (95% CI x the baseline's median): the promise
    lies inside it`` ("" without one)."""
    span = e.get("measured_decode_step_range_ms")
    if not isinstance(span, list) or len(span) != 2:
        return ""
    inside = e.get("promise_in_measured_range")
    where = ("the promise lies inside it" if inside else
             "the promise lies outside it" + ("; its range overlaps it" if e.get("ranges_overlap") else ""))
    return (f"; the saving verify's ratio allows: {fmt_ms(span[0] * 1e3)} to {fmt_ms(span[1] * 1e3)} "
            f"(its 95% CI x the baseline's median decode step): {where}")


def _promised(e: dict[str, Any]) -> str:
    """``14.48 ms per step [11.20 ms, 17.00 ms]``, or ``no saving (may cost: net -1.20 ms per step
    [-3.10 ms, 900 us])``
    where the range the what-if's interval allows does not lie above 0: never a saving for a fix
    measured slower."""
    rng = e.get("promised_range_ms")
    span = f" [{fmt_ms(rng[0] * 1e3)}, {fmt_ms(rng[1] * 1e3)}]" if isinstance(rng, list) and len(rng) == 2 else ""
    sign = "-" if e["promised_ms"] < 0 else ""
    net = f"{sign}{fmt_ms(abs(e['promised_ms']) * 1e3)} per step{span}"
    verdict = e.get("promise") or "saving"
    return net if verdict == "saving" else f"no saving ({verdict}: net {net})"


def _estimate_lines(result: DoctorOutcome) -> list[str]:
    """Diagnose's promise for the fix beside what verify measured of it (a table: every figure)."""
    e = result.estimate()
    if e is None or e["promised_ms"] is None:
        return []

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f}"

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    if e.get("how") in ("program A/B", "replay"):
        basis = f"measured by a {e['how']}: {e.get('measured_by') or ''}"
    else:
        cost = f", less {ms(e['cost_ms'])} ms the fix costs here (what-if run)" if e["cost_ms"] else ""
        basis = f"a model: {ms(e['recovered_ms'])} ms recovered{cost}"
    return ["", f"Promised by diagnose: {_promised(e)} ({md_text(basis)}).",
            "", "| saving per step | ms | promise / measured |", "|---|---:|---:|",
            f"| promised (diagnose, from the baseline's capture) | {ms(e['promised_ms'])} | - |",
            f"| measured: decode step (the verdict's paired ratio x the baseline's median, no profiler) | "
            f"{ms(e['measured_decode_step_ms']) if e['measured_decode_step_ms'] is not None else e.get('decode_step')} | "
            f"{ratio(e['promise_over_decode_step'])} |",
            *_range_row(e),
            f"| difference: profiled step (one capture a side, not tested) | {ms(e['measured_profiled_step_ms'])} | "
            f"{ratio(e['promise_over_profiled_step'])} |"]


def _range_row(e: dict[str, Any]) -> list[str]:
    """The table's row of the saving verify's ratio allows (none without one)."""
    span = e.get("measured_decode_step_range_ms")
    if not isinstance(span, list) or len(span) != 2:
        return []
    inside = "promise inside" if e.get("promise_in_measured_range") else "promise outside"
    return [f"| measured: decode step, the saving the verdict's 95% CI allows (x the baseline's median) | "
            f"{span[0]:,.1f} to {span[1]:,.1f} | {inside} |"]
