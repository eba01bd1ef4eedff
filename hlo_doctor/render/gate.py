"""Renderers of a gate result: the JSON verdict, a Markdown summary for pull requests, JUnit XML, text.

Each returns a string; the CLI decides where it goes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from hlo_doctor.core.escape.markdown import md_cell, md_cell_code, md_code, md_text
from hlo_doctor.core.escape.terminal import term
from hlo_doctor.core.escape.xml import xml_lines, xml_text
from hlo_doctor.core.format import fmt_num, split_source
from hlo_doctor.gate.result import GateResult, OpDiff, Verdict, undecided_reason
from hlo_doctor.render.github import annotation
from hlo_doctor.render.locations import map_source

__all__ = ["to_github", "to_json", "to_junit", "to_markdown", "to_text"]


def to_json(result: GateResult) -> str:
    """The JSON verdict (strict JSON: no NaN)."""
    return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


def _pct(d: OpDiff, speed: float = 1.0) -> str:
    """The change of the row's own figures: the candidate's mean time per step against the baseline's
    scaled by the machine-speed factor (the judgement's statistic, the per-step medians, is in its
    reason: :attr:`hlo_doctor.gate.result.OpDiff.why`)."""
    if d.baseline_us is None or d.candidate_us is None:
        return "new" if d.baseline_us is None else "gone"
    if d.baseline_us == 0:
        return "-"
    return f"{(d.candidate_us / (d.baseline_us * speed) - 1) * 100:+.1f}%"


def _headline(result: GateResult) -> str:
    if result.verdict is Verdict.REGRESSION:
        n = len(result.violations)
        return f"FAIL: {n} regression{'s' if n != 1 else ''}"
    if result.verdict is Verdict.INCONCLUSIVE:
        return f"INCONCLUSIVE (strict): {len(result.within_noise)} change(s) within noise"
    noise = f", {len(result.within_noise)} change(s) within noise" if result.within_noise else ""
    return f"PASS: no regression{noise}"


def _step_line(result: GateResult) -> str:
    s = result.step
    if s is None:
        return "step time: not judged"
    ci = f", {1 - s.alpha:.0%} CI x{s.ci_low:.3f}..x{s.ci_high:.3f}, p={s.p_value:.2g}" if s.tested else ""
    speed = result.speed_factor
    against = f" against the baseline x{speed:.3f} machine speed" if speed != 1.0 else ""
    return (
        f"step time (median): {s.baseline_median / speed:,.0f} -> {s.candidate_median:,.0f} us "
        f"({s.change_pct:+.1f}%{against}{ci}; n={s.n_baseline}/{s.n_candidate}): {result.step_judgement}"
        + (f" ({why})" if (why := undecided_reason(result.step_judgement, s)) else "")
    )


def _md_escape(text: str) -> str:
    return md_cell(text)


def to_markdown(result: GateResult, *, max_rows: int = 15, max_violations: int = 30) -> str:
    """A summary for a pull-request comment: verdict, violations, step time, new/vanished/changed ops."""
    icon = {Verdict.PASS: ":white_check_mark:", Verdict.REGRESSION: ":x:", Verdict.INCONCLUSIVE: ":warning:"}
    lines = [
        f"### hlo-doctor gate: {icon[result.verdict]} {_headline(result)}",
        "",
        f"Baseline {md_code(result.baseline.label)} vs candidate {md_code(result.candidate.label)} "
        f"({md_text(result.candidate.backend or 'unknown backend')}"
        f"{', ' + md_text(result.candidate.device_kind) if result.candidate.device_kind else ''}; "
        f"{result.baseline.num_steps} / {result.candidate.num_steps} steps). "
        f"Matched {result.count('matched')} ops ({result.matched_fraction:.0%} of the baseline's op time), "
        f"{result.count('new')} new, {result.count('vanished')} vanished.",
        "",
        f"**{_step_line(result)}**",
        "",
    ]
    if result.violations:
        lines += ["| rule | what | time/step (us) |", "|---|---|---:|"]
        # A pull-request comment has a size limit: the JSON verdict keeps every violation.
        shown_violations = result.violations[:max_violations]
        lines += [
            f"| {md_cell_code(v.rule)} | {_md_escape(v.message)} | {fmt_num(v.time_per_step_us)} |" for v in shown_violations
        ]
        if len(result.violations) > max_violations:
            lines.append(f"| ... | {len(result.violations) - max_violations} more in the JSON verdict | |")
        lines.append("")

    def table(title: str, rows: list[OpDiff]) -> None:
        if not rows:
            return
        lines.extend([
            f"**{title}**", "",
            "| op | shape | module | baseline us/step | candidate us/step | change | judgement |",
            "|---|---|---|---:|---:|---:|---|",
        ])
        for d in rows[:max_rows]:
            lines.append(
                f"| {md_cell_code(d.ops.split(', ')[0] or d.opcode)} ({md_cell(d.opcode)}) | {md_cell_code(d.shape)} | "
                f"{md_cell_code(d.module)} | {fmt_num(d.baseline_us)} | {fmt_num(d.candidate_us)} | {_pct(d, result.speed_factor)} | "
                f"{md_cell(d.shown_judgement)} |"
            )
        if len(rows) > max_rows:
            lines.append(f"| ... {len(rows) - max_rows} more | | | | | | |")
        lines.append("")

    table("New ops", [d for d in result.ops if d.status == "new"])
    table("Vanished ops", [d for d in result.ops if d.status == "vanished"])
    changed = [d for d in result.ops if d.status == "matched" and d.judgement not in ("below floor", "ignored")]
    table("Largest changes among matched ops", changed)
    if result.ops:
        lines += [f"<sub>{_legend(result)}</sub>", ""]
    for note in result.notes:
        lines.append(f"> {md_text(note)}")
    p = result.policy
    lines += [
        "",
        "<details><summary>Policy</summary>",
        "",
        f"From {md_text(p.source)}: step time +{p.max_step_regression_pct:g}% max; op time +{p.max_op_regression_pct:g}% "
        f"max above {p.op_floor_us:g} us/step; new {', '.join(p.fail_on_new) or 'nothing'} of at least "
        f"{p.new_op_min_bytes:,} bytes fail; alpha {p.alpha:g}"
        f"{' (Bonferroni across ops)' if p.alpha else ''}; ignore {md_text(', '.join(p.ignore)) or 'nothing'}"
        f"{'; strict' if result.strict else ''}.",
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def to_junit(result: GateResult, *, timestamp: datetime | None = None, source_root: Path | None = None) -> str:
    """JUnit XML: one test case for the step time, one per judged or new op; failures are violations
    (and, under strict, changes within noise).

    ``timestamp`` (default: now, UTC) is when the gate ran. A case's ``time`` is the candidate's time per
    step of what it judges, in seconds (the suite's: the candidate's step time), so that CI test-report
    views chart it across builds; ``file`` names the op's source, relative to ``source_root`` when it is
    in the checkout.
    """
    when = (timestamp or datetime.now(UTC)).replace(microsecond=0)
    suite = ET.Element("testsuite", name="hlo-doctor gate", timestamp=when.isoformat())
    # Which policy judged: a report must say where its limits came from (a file, flags or defaults).
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="policy", value=xml_text(result.policy.source))
    # name, classname, failure message, output, time (s), file
    cases: list[tuple[str, str, str | None, str, float, str]] = []
    by_key = {v.key: v for v in result.violations}
    step_fail = by_key.get("step")
    step_msg = step_fail.message if step_fail else (
        _step_line(result) if result.strict and "step" in result.within_noise else None
    )
    step_s = result.candidate.step_time_us / 1e6
    cases.append(("step time", "gate.step", step_msg, _step_line(result), step_s, ""))
    root = (source_root or Path.cwd()).resolve()
    for d in result.ops:
        if d.judgement in ("below floor", "ignored", "vanished") or d.status == "vanished":
            continue
        v = by_key.get(d.key)
        msg = v.message if v else (
            f"{d.key}: inconclusive ({d.comparison.reason if d.comparison else ''})"
            if d.judgement == "inconclusive" else None
        )
        kind = "new op" if d.status == "new" else "op time"
        out = (f"{d.key}: {fmt_num(d.baseline_us)} -> {fmt_num(d.candidate_us)} us/step "
               f"({_pct(d, result.speed_factor)}): {d.shown_judgement}")
        path = split_source(d.source)[0]
        file = (map_source(path, root) or path) if path else ""
        cases.append((f"{kind}: {d.key}", f"gate.{d.module}", msg, out, (d.candidate_us or 0.0) / 1e6, file))
    failures = 0
    for name, classname, msg, out, seconds, file in cases:
        # xml_text: a character XML 1.0 forbids (U+0001 in an op name) would make the file unreadable.
        case = ET.SubElement(suite, "testcase", name=xml_text(name), classname=xml_text(classname),
                             time=f"{seconds:.6f}")
        if file:
            case.set("file", xml_text(file))
        if msg is not None:
            failures += 1
            ET.SubElement(case, "failure", message=xml_text(msg), type="regression").text = xml_lines(msg)
        ET.SubElement(case, "system-out").text = xml_lines(out)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", "0")
    suite.set("time", f"{step_s:.6f}")
    top = ET.Element("testsuites", name="hlo-doctor", tests=str(len(cases)), failures=str(failures),
                     time=f"{step_s:.6f}", timestamp=when.isoformat())
    top.append(suite)
    ET.indent(top)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(top, encoding="unicode") + "\n"


def _legend(result: GateResult) -> str:
    scaled = f" x{result.speed_factor:.3f} (machine speed)" if result.speed_factor != 1.0 else ""
    return (
        f"us: mean time per step; change: of those means, against the baseline{scaled}; a judgement "
        "tests the per-step medians (the means without samples) and says why when it cannot decide"
    )


def to_text(result: GateResult, *, max_rows: int = 20, fit: bool = False) -> str:
    """Plain text for a log or ``--format table --output FILE``.

    Columns are as wide as their widest cell; ``fit`` (a terminal) cuts op, shape and module names to
    28/26/26 characters instead, so that a row fits a screen.
    """
    lines = [
        f"hlo-doctor gate: {_headline(result)}",
        f"baseline  {result.baseline.label}  ({result.baseline.num_steps} steps)",
        f"candidate {result.candidate.label}  ({result.candidate.num_steps} steps)",
        _step_line(result),
    ]
    for v in result.violations:
        lines.append(f"  FAIL [{v.rule}] {v.message}")
    shown = [d for d in result.ops if d.judgement not in ("below floor", "ignored")][:max_rows]
    if shown:
        rows = [(term(d.ops.split(", ")[0] or d.opcode), term(d.shape), term(d.module)) for d in shown]
        if fit:
            rows = [(n[:28], s[:26], m[:26]) for n, s, m in rows]
            w: tuple[int, ...] = (28, 26, 26)
        else:
            w = tuple(max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(("op", "shape", "module")))
        lines.append(f"{'op':<{w[0]}} {'shape':<{w[1]}} {'module':<{w[2]}} {'base us':>10} {'cand us':>10} "
                     f"{'change':>8}  judgement")
        for (name, shape, module), d in zip(rows, shown, strict=True):
            lines.append(
                f"{name:<{w[0]}} {shape:<{w[1]}} {module:<{w[2]}} {fmt_num(d.baseline_us):>10} "
                f"{fmt_num(d.candidate_us):>10} {_pct(d, result.speed_factor):>8}  {d.shown_judgement}"
            )
        lines.append(_legend(result))
    lines.extend(_peak_lines(result))
    lines.extend(f"note: {n}" for n in result.notes)
    lines.append(f"policy: {result.policy.source}")
    # One line each: a newline in an op or module name (the first column) must not start a line of its
    # own, as ``::error ...`` would on a CI runner, nor an escape sequence reach the terminal.
    return "\n".join(term(line) for line in lines) + "\n"


def _peak_lines(result: GateResult) -> list[str]:
    """Each program's peak on both sides (the programs of the steps), where the captures have them."""
    if not result.memory:
        return []
    from hlo_doctor.core.format import fmt_bytes

    w = max(len("program"), *(len(d.module) for d in result.memory))
    out = [f"{'program':<{w}} {'base peak':>11} {'cand peak':>11}  judgement"]
    for d in result.memory:
        base = fmt_bytes(d.baseline_bytes) if d.baseline_bytes is not None else "-"
        cand = fmt_bytes(d.candidate_bytes) if d.candidate_bytes is not None else "-"
        out.append(f"{d.module:<{w}} {base:>11} {cand:>11}  {d.judgement}")
    return out


def to_github(result: GateResult, *, source_root: Path | None = None) -> str:
    """GitHub Actions workflow commands: an ``::error`` per violation (on the op's source line where it is
    in the checkout), a ``::warning`` per change within noise under strict, and a closing notice."""
    root = (source_root or Path.cwd()).resolve()
    by_key = {d.key: d for d in result.ops}
    lines = []
    for v in result.violations:
        op = by_key.get(v.key)
        path, line = split_source(op.source if op else "")
        relative = (map_source(path, root) if path else None) or ""
        lines.append(annotation("error", v.message, title=f"hlo-doctor gate: {v.rule}", file=relative, line=line))
    # A change within noise says why in the annotation too (a warning under strict, else a notice).
    level = "warning" if result.strict else "notice"
    lines.extend(annotation(level, f"{key}: {by_key[key].shown_judgement if key in by_key else 'within noise'}",
                            title="hlo-doctor gate: within noise") for key in result.within_noise)
    lines.append(annotation("notice", result.policy.source, title="hlo-doctor gate policy"))
    lines.append(annotation("notice", _headline(result), title="hlo-doctor gate"))
    return "\n".join(lines) + "\n"
