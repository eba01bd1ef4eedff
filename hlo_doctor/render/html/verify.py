"""The verify sections: per-round throughput and decode-step times of baseline and treatment (every
sample, the median and the interquartile range), the ratios' bootstrap CIs against the minimum effect,
and the removed ops before and after; the checks as a table.

Read from ``verify.json`` (``hlo-doctor.verify/1``, or ``hlo-doctor.verify-target/1`` of
``verify --target``). A document from an older hlo-doctor lacks some fields: the section then lists
the charts it cannot draw and why, and draws the rest.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Cell, Chart, Column, Note, Section, Table, num_cell, table, text_cell

__all__ = ["checks_table", "fixed_at_table", "spread", "verify_sections"]

_VARIANTS = ("baseline", "treatment")
_OUTCOMES = ("improved", "no change", "regressed", "inconclusive")
_ZONES = ("within the minimum effect",)
_ZONE_COLORS = ("#9d9d9d",)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of the samples, quartiles interpolated as numpy does."""
    data = sorted(float(v) for v in values)
    if len(data) == 1:
        return data[0], data[0], data[0]
    q1, q2, q3 = statistics.quantiles(data, n=4, method="inclusive")
    return q1, q2, q3


def _rounds(doc: Mapping[str, Any], variant: str) -> list[Mapping[str, Any]] | None:
    side = doc.get(variant)
    rounds = side.get("rounds") if isinstance(side, Mapping) else None
    return list(rounds) if isinstance(rounds, list) and rounds else None


def _target_rounds(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """``verify --target``'s program level as the engine A/B's rounds: per variant, each round's
    throughput (rows/s) and its steady steps (the cold first step of a round left out, as its
    step-time comparison leaves it: check 2 judges it)."""
    for level in doc.get("levels") or []:
        rounds = (level.get("figures") or {}).get("rounds") if isinstance(level, Mapping) else None
        if isinstance(rounds, Mapping) and all(isinstance(rounds.get(v), list) and rounds[v] for v in _VARIANTS):
            return {v: {"rounds": [{"index": i, "throughput_rows_s": r.get("throughput_rows_s"),
                                    "step_times_ms": list(r.get("step_times_ms") or [])[1:]}
                                   for i, r in enumerate(rounds[v])]} for v in _VARIANTS}
    return None


def _strip_chart(doc: Mapping[str, Any], *, metric: str, title: str, unit: str, per_step: bool,
                 key: str) -> Chart | None:
    points: list[dict[str, Any]] = []
    samples: dict[str, list[float]] = {}
    for variant in _VARIANTS:
        rounds = _rounds(doc, variant)
        if rounds is None or any(r.get(metric) in (None, []) for r in rounds):
            return None
        vals: list[float] = []
        for r in rounds:
            got = [float(v) for v in r[metric]] if per_step else [float(r[metric])]
            vals.extend(got)
            points.extend({"variant": variant, "round": int(r.get("index", 0)), "value": v} for v in got)
        samples[variant] = vals
    summary: list[dict[str, Any]] = []
    for variant, vals in samples.items():
        q1, med, q3 = spread(vals)
        summary.append({"variant": variant, "low": q1, "median": med, "high": q3, "n": len(vals)})
    what = "every step of every round" if per_step else "each round"
    b, t = summary
    alt = (f"{title}: {what} as a mark per sample, for baseline ({b['n']} samples, median {b['median']:,.3f} "
           f"{unit}) and treatment ({t['n']}, median {t['median']:,.3f} {unit}); a bar spans each side's "
           "interquartile range and a black tick marks its median. The table below holds the numbers.")
    spec = charts.interval_strip(points, summary, group="variant", value="value", value_title=f"{title} ({unit})",
                                 description=alt, point_mark="tick" if per_step else "point")
    columns = (Column("variant"), Column("samples", True), Column(f"Q1 ({unit})", True),
               Column(f"median ({unit})", True), Column(f"Q3 ({unit})", True), Column(f"min ({unit})", True),
               Column(f"max ({unit})", True))
    rows = [[text_cell(s["variant"]), num_cell(s["n"], "d"), num_cell(s["low"], ",.3f"),
             num_cell(s["median"], ",.3f"), num_cell(s["high"], ",.3f"),
             num_cell(min(samples[str(s["variant"])]), ",.3f"), num_cell(max(samples[str(s["variant"])]), ",.3f")]
            for s in summary]
    return Chart(f"verify-{key}", title, alt, spec, table(f"table-verify-{key}", f"{title} ({unit})", columns, rows))


def _is_program(doc: Mapping[str, Any]) -> bool:
    """``verify FILE.py:FUNC``'s report: a call of the target is its step, check 4 its verdict."""
    return str(doc.get("schema", "")).startswith("hlo-doctor.verify-program")


def _comparisons(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    named = ((("step_time", "step time: one call of the target (lower is better; decides check 4)"),
              ("round_time", "round wall time (lower is better)")) if _is_program(doc) else
             (("throughput", "throughput (higher is better)"),
              ("step_time", "decode step time (lower is better; decides check 5)"),
              ("batch_ttft", "batch TTFT (lower is better)")))
    for key, name in named:
        if isinstance(doc.get(key), Mapping):
            out.append((name, doc[key]))
    for level in doc.get("levels") or []:  # verify --target: a throughput (and a step time) per level
        if not isinstance(level, Mapping):
            continue
        if isinstance(level.get("throughput"), Mapping):
            out.append((f"{level.get('level', '')} throughput (higher is better)", level["throughput"]))
        step = (level.get("figures") or {}).get("step_time")
        if isinstance(step, Mapping):
            out.append((f"{level.get('level', '')} step time (lower is better)", step))
    return out


def _ratio_chart(doc: Mapping[str, Any]) -> Chart | None:
    comps = [(n, c) for n, c in _comparisons(doc) if c.get("ratio")]
    if not comps:
        return None
    effect = max(float(c.get("min_effect") or 0.0) for _, c in comps)
    rows = [{"what": n, "ratio": float(c["ratio"]), "low": c.get("ci_low"), "high": c.get("ci_high"),
             "outcome": str(c.get("outcome", ""))} for n, c in comps]
    bands = [{"from": 1.0 - effect, "to": 1.0 + effect, "zone": _ZONES[0]}] if effect else []
    alt = ("Treatment over baseline, one diamond per figure at its ratio with its 95% confidence interval as a "
           "line (the ratio of the medians and a bootstrap interval; for figures compared by paired rounds, the "
           "geometric mean of the pairs' ratios and its t-interval); the grey band is the minimum effect (+-{effect:.0%}) inside which a "
           "change does not count. " + "; ".join(f"{n.split(' (')[0]} x{float(c['ratio']):.3f} ({c.get('outcome', '')})"
                                                   for n, c in comps) + ".")
    spec = charts.ratio_intervals(rows, bands, label="what", value_title="treatment / baseline (log scale)",
                                  color_field="outcome", color_names=_OUTCOMES, description=alt,
                                  band_names=_ZONES, band_colors=_ZONE_COLORS)
    columns = (Column("figure"), Column("baseline median", True, "baseline_median"),
               Column("treatment median", True, "candidate_median"), Column("ratio", True, "ratio"),
               Column("CI low", True, "ci_low"), Column("CI high", True, "ci_high"), Column("p", True, "p_value"),
               Column("min effect", True, "min_effect"), Column("outcome"))
    body = [[text_cell(n), num_cell(c.get("baseline_median"), ",.3f"), num_cell(c.get("candidate_median"), ",.3f"),
             num_cell(c.get("ratio"), ".4f"), num_cell(c.get("ci_low"), ".4f"), num_cell(c.get("ci_high"), ".4f"),
             num_cell(c.get("p_value"), ".3g"), num_cell(c.get("min_effect"), ".3f"), text_cell(c.get("outcome"))]
            for n, c in comps]
    return Chart("verify-ratios", "Treatment / baseline: 95% CI against the minimum effect", alt, spec,
                 table("table-verify-ratios", "Ratios of the medians", columns, body))


def _removed_chart(ops: Sequence[Mapping[str, Any]]) -> Chart:
    values: list[dict[str, Any]] = []
    unit, div = charts.unit_of([float(o.get("time_per_step_us") or 0.0) for o in ops])
    for o in ops:
        label = f"{o.get('code')} {o.get('module')}/{o.get('op')}"
        after = o.get("treatment_time_per_step_us")
        values.append({"op": label, "variant": "baseline", "time": float(o.get("time_per_step_us") or 0.0) / div})
        values.append({"op": label, "variant": "treatment",
                       "time": (float(after) if after is not None else 0.0) / div})
    alt = ("Grouped bars per wasteful op the baseline's capture showed: its time per step in the baseline and in "
           "the treatment (zero where it is gone). " + "; ".join(
               f"{o.get('code')} {o.get('op')}: {o.get('status')}" for o in ops) + ".")
    spec = charts.grouped_bars(values, label="op", group="variant", groups=_VARIANTS, value="time",
                               value_title=f"time per step ({unit})", description=alt)
    columns = (Column("rule", False, "code"), Column("module"), Column("op"), Column("shape"),
               Column(f"baseline ({unit}/step)", True, "time_per_step_us"),
               Column(f"treatment ({unit}/step)", True, "treatment_time_per_step_us"), Column("status"))

    def t(v: Any) -> Cell:
        return num_cell(v, lambda x: f"{x / div:,.3f}")

    body = [[text_cell(o.get("code")), text_cell(o.get("module")), text_cell(o.get("op")), text_cell(o.get("shape")),
             t(o.get("time_per_step_us")), t(o.get("treatment_time_per_step_us")), text_cell(o.get("status"))]
            for o in ops]
    return Chart("verify-removed", "Removed ops: time per step before and after", alt, spec,
                 table("table-verify-removed", f"Removed ops ({unit} per step)", columns, body))


def checks_table(checks: Sequence[Mapping[str, Any]]) -> Table:
    """The checks: number, name, pass/fail, the deciding figure and why."""
    columns = (Column("#", True, "number"), Column("check"), Column("result"), Column("figure"), Column("detail"))
    body = [[num_cell(c.get("number"), "d"), text_cell(c.get("name")),
             text_cell("pass" if c.get("passed") else "FAIL"), text_cell(c.get("figure")), text_cell(c.get("detail"))]
            for c in checks]
    return table("table-verify-checks", "Checks", columns, body)


def fixed_at_table(doc: Mapping[str, Any]) -> Table | None:
    """``verify FILE.py:FUNC --fix``: the line(s) of the file the fix changed and why there (the baseline's
    finding that named each one, or ``--fix-line``); None without a fix."""
    settings = doc.get("settings") or {}
    if not _is_program(doc) or not isinstance(settings, Mapping) or not settings.get("fix"):
        return None
    file = str(settings.get("baseline", "")).rpartition(":")[0].rsplit("/", 1)[-1]
    sites = [s for s in doc.get("fix_sites") or [] if isinstance(s, Mapping)]
    rows = [[text_cell(f"{file}:{s.get('line')}"), text_cell(s.get("argument") or None), text_cell(s.get("finding")),
             text_cell("safe" if s.get("safe") else "unsafe"), text_cell(", ".join(s.get("targets") or []))]
            for s in sites]
    if not rows and settings.get("fix_line") is not None:
        rows = [[text_cell(f"{file}:{settings['fix_line']}"), text_cell(settings.get("fix_arg") or None),
                 text_cell("--fix-line"), text_cell(None), text_cell(None)]]
    if not rows:
        return None
    columns = (Column("line"), Column("argument"), Column("named by"), Column("edit"),
               Column("findings it answers for (rule program)"))
    return table("table-verify-fixed-at", f"Where {settings['fix']} was applied (in a copy of {file})", columns, rows)


def _rounds_table(doc: Mapping[str, Any]) -> Table | None:
    rows = [r for v in _VARIANTS for r in (_rounds(doc, v) or [])]
    if not rows:
        return None
    columns = (Column("variant"), Column("round", True, "index"), Column("order", True, "order"),
               Column("throughput (tok/s)", True, "throughput_tok_s"),
               Column("batch TTFT (ms)", True, "batch_ttft_ms"), Column("TPOT (ms)", True, "tpot_ms"),
               Column("median step (ms)", True), Column("compiles", True, "compiles"))
    body = [[text_cell(r.get("variant")), num_cell(r.get("index"), "d"), num_cell(r.get("order"), "d"),
             num_cell(r.get("throughput_tok_s"), ",.2f"), num_cell(r.get("batch_ttft_ms"), ",.3f"),
             num_cell(r.get("tpot_ms"), ",.3f"),
             num_cell(statistics.median(r["step_times_ms"]) if r.get("step_times_ms") else None, ",.3f"),
             num_cell(r.get("compiles"), "d")] for r in sorted(rows, key=lambda r: int(r.get("order", 0)))]
    return table("table-verify-rounds", "Measured rounds, in the order they ran", columns, body)


def verify_sections(doc: Mapping[str, Any]) -> tuple[Section, ...]:
    """The verify part of a page: the measurement, the ratios, the removed ops, the checks."""
    items: list[Any] = []
    missing: list[str] = []
    older = "" if doc.get("schema") else " (a verify.json from an older hlo-doctor)"
    target = str(doc.get("schema", "")).startswith("hlo-doctor.verify-target")
    view = (_target_rounds(doc) or {}) if target else doc
    strips: tuple[tuple[str, str, str, bool, str], ...] = (
        ("throughput_rows_s" if target else "throughput_tok_s", "Throughput per round", "rows/s" if target else "tok/s",
         False, "throughput"),
        ("step_times_ms", "Sampling-step time" if target else "Decode-step time", "ms", True, "step_times"))
    if _is_program(doc):  # a program has no throughput: its rounds' wall times are in the rounds table
        strips = (("step_times_ms", "Step time (one call of the target)", "ms", True, "step_times"),)
    for metric, title, unit, per_step, key in strips:
        chart = _strip_chart(view, metric=metric, title=title, unit=unit, per_step=per_step, key=key)
        if chart is not None:
            items.append(chart)
        else:
            why = ("this verify --target report has no program-level rounds" if target
                   else f"the rounds in verify.json have no '{metric}'{older}")
            missing.append(f"{title.lower()} of baseline and treatment: {why}")
    chart = _ratio_chart(doc)
    if chart is not None:
        items.append(chart)
    else:
        missing.append(f"the ratios' CIs against the minimum effect: verify.json has no comparison with a ratio{older}")
    removed = [o for o in doc.get("removed_ops") or [] if isinstance(o, Mapping)]
    if removed and all("status" in o and "treatment_time_per_step_us" in o for o in removed):
        items.append(_removed_chart(removed))
    elif removed:
        missing.append("removed ops before/after: verify.json gives no treatment times of the removed ops"
                       f"{older}; re-run verify to draw it")
    elif not target:
        missing.append("removed ops before/after: verify.json lists no removed op (no finding of the baseline's "
                       "capture, or no capture)")
    rounds = _rounds_table(doc)
    if rounds is not None:
        items.append(rounds)
    checks = [c for c in doc.get("checks") or [] if isinstance(c, Mapping)]
    fixed = fixed_at_table(doc)
    tail: list[Any] = [fixed] if fixed is not None else []
    tail += [checks_table(checks)] if checks else []
    tail.extend(Note(str(n)) for n in doc.get("notes") or [])
    return (Section("verify", "The A/B measurement", tuple(items), tuple(missing)),
            Section("checks", "The checks", tuple(tail)))
