"""The step section of a capture's page: time per step by category and by program (stacked, one bar per
traced step, the step's wall time marked), and the step breakdown (device busy, idle, and what the
host did while the device idled) when the capture has one, with a row per host thread where several
dispatch programs (:mod:`hlo_doctor.render.html.step_threads`).

Everything is read from the op-stats JSON (``hlo-doctor.opstats/1``, what ``stats --format json``
prints), so a page of a run directory and a page of its ``opstats.json`` are the same page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Cell, Chart, Column, Section, num_cell, table, text_cell
from hlo_doctor.render.html.step_threads import thread_items

__all__ = ["BREAKDOWN_PARTS", "MAX_BARS", "MAX_BREAKDOWN_ROWS", "TOP_PROGRAMS", "breakdown_steps", "mean_totals",
           "per_step_totals", "step_section", "time_cell"]

TOP_PROGRAMS = 7
"""Programs drawn by name; the rest are summed as ``other``."""

BREAKDOWN_PARTS: tuple[str, ...] = ("busy", "idle: python", "idle: dispatch", "idle: compile", "idle: wait",
                                    "idle: untraced")
"""The parts of a step in the breakdown chart, in stacking order (busy first)."""

MAX_BREAKDOWN_ROWS = 48
"""Rows of the breakdown chart; with more device steps it draws each device's mean step."""
MAX_BARS = 60
"""Bars of the per-step charts; more traced steps are drawn as runs of consecutive steps."""


def time_cell(us: Any, div: float) -> Cell:
    """A time cell: the text in the table's unit, the value the JSON's microseconds."""
    return num_cell(us, lambda v: f"{v / div:,.3f}" if div > 1 else f"{v:,.1f}")


def _program_names(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, Any], str]:
    """(module, program id) -> the name people read: the module, with the id where a name repeats."""
    ids: dict[str, set[Any]] = defaultdict(set)
    for r in rows:
        ids[str(r.get("module", ""))].add(r.get("program_id"))
    return {(m, p): (f"{m}({p})" if len(ps) > 1 and p is not None else m) for m, ps in ids.items() for p in ps}


def per_step_totals(doc: Mapping[str, Any], by: str) -> tuple[list[int], dict[str, dict[int, float]]]:
    """(steps, {group: {step: us}}) from the per-step samples, ``by`` ``category`` or ``program``.

    ``time_us`` of a sample is the op's time in that step on one device; the groups sum it.
    """
    rows = doc.get("rows") or []
    per_step = doc.get("per_step") or {}
    cols = list(per_step.get("columns") or [])
    if not cols or not per_step.get("rows"):
        return [], {}
    i_step, i_mod, i_pid, i_op, i_t = (cols.index(c) for c in ("step", "module", "program_id", "op", "time_us"))
    names = _program_names(rows)
    category = {(str(r.get("module")), r.get("program_id"), str(r.get("op"))): str(r.get("category") or "other")
                for r in rows}
    sums: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    steps: set[int] = set()
    for s in per_step["rows"]:
        step, module, pid, op, t = int(s[i_step]), str(s[i_mod]), s[i_pid], str(s[i_op]), float(s[i_t] or 0.0)
        steps.add(step)
        group = (category.get((module, pid, op), "other") if by == "category"
                 else names.get((module, pid), module))
        sums[group][step] += t
    return sorted(steps), {g: dict(v) for g, v in sums.items()}


def mean_totals(doc: Mapping[str, Any], by: str) -> dict[str, float]:
    """{group: us per step}: the table's mean time per step summed by ``category`` or ``program``
    (what a table export without per-step samples still says)."""
    rows = doc.get("rows") or []
    names = _program_names(rows)
    sums: dict[str, float] = defaultdict(float)
    for r in rows:
        group = (str(r.get("category") or "other") if by == "category"
                 else names.get((str(r.get("module", "")), r.get("program_id")), str(r.get("module", ""))))
        sums[group] += float(r.get("time_per_step_us") or 0.0)
    return dict(sums)


def _bin_steps(steps: list[int], folded: Mapping[str, Mapping[int, float]], wall_of: Mapping[int, float]) -> tuple[
        list[int], dict[str, dict[int, float]], dict[int, float], dict[int, str]]:
    """At most :data:`MAX_BARS` bars: runs of consecutive steps, each the mean step of its run."""
    size = -(-len(steps) // MAX_BARS)
    runs = [steps[i:i + size] for i in range(0, len(steps), size)]
    out: dict[str, dict[int, float]] = {g: {i: sum(per.get(st, 0.0) for st in run) / len(run)
                                            for i, run in enumerate(runs)} for g, per in folded.items()}
    walls = {i: sum(wall_of[st] for st in run) / len(run) for i, run in enumerate(runs)
             if all(st in wall_of for st in run)}
    labels = {i: f"steps {run[0]}-{run[-1]}" for i, run in enumerate(runs)}
    return list(range(len(runs))), out, walls, labels


def _ordered_groups(sums: Mapping[str, Mapping[int, float]], keep: int | None) -> tuple[list[str], dict[str, str]]:
    """Groups by total time, largest first; past ``keep`` they fold into ``other``."""
    order = sorted(sums, key=lambda g: (-sum(sums[g].values()), g))
    if keep is None or len(order) <= keep + 1:
        return order, {g: g for g in order}
    kept = order[:keep]
    return kept + ["other"], {g: (g if g in kept else "other") for g in order}


def _stack_chart(doc: Mapping[str, Any], by: str, title: str) -> Chart | None:
    steps, sums = per_step_totals(doc, by)
    mean = not steps
    if mean:
        # No per-step samples (an export without them): one bar of the mean step.
        means = mean_totals(doc, by)
        if not means:
            return None
        steps, sums = [0], {g: {0: us} for g, us in means.items()}
    groups, fold = _ordered_groups(sums, TOP_PROGRAMS if by == "program" else None)
    folded: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for g, per in sums.items():
        for step, us in per.items():
            folded[fold[g]][step] += us
    walls = list(doc.get("step_times_us") or [])
    wall_of = {step: walls[i] for i, step in enumerate(steps)} if len(walls) == len(steps) and not mean else {}
    if mean and doc.get("step_time_us"):
        wall_of = {0: float(doc["step_time_us"])}
    labels = {0: "mean step"} if mean else {st: f"step {st}" for st in steps}
    binned = len(steps) > MAX_BARS
    if binned:
        steps, folded, wall_of, labels = _bin_steps(steps, folded, wall_of)

    def name(st: int) -> str:
        return labels[st]

    unit, div = charts.unit_of([sum(folded[g].get(s, 0.0) for g in groups) for s in steps] + list(wall_of.values()))
    values = [{"step": name(s), by: g, "time": folded[g].get(s, 0.0) / div} for s in steps for g in groups]
    marks = [{"step": name(s), "wall": wall_of[s] / div} for s in steps if s in wall_of]
    word = "category" if by == "category" else "program"
    top = max(groups, key=lambda g: sum(folded[g].values()))
    bars = ("one bar of the mean step (the capture's export holds no per-step samples)" if mean
            else f"one per run of consecutive traced steps ({len(steps)} runs, each bar the mean step of its run)"
            if binned else f"one per traced step ({len(steps)})")
    alt = (f"Stacked bars, {bars}, of the op time on one device by {word}; "
           f"{len(groups)} {'categories' if by == 'category' else 'programs'}, the largest {top}. "
           + ("A tick marks each step's wall time. " if marks else "")
           + "The table below holds every bar's numbers.")
    spec = charts.stacked_bars(values, x="step", x_title="traced step", y="time", y_title=f"op time ({unit})",
                               color=by, color_title=word, order=groups, description=alt, marks=marks,
                               mark_field="wall", mark_title=f"step wall time ({unit})")
    columns = [Column("steps" if binned else "step", not (mean or binned)),
               *(Column(f"{g} ({unit})", True) for g in groups),
               Column(f"sum ({unit})", True), Column(f"wall ({unit})", True, "step_times_us")]

    def first(st: int) -> Cell:
        return text_cell(name(st).removeprefix("steps ")) if mean or binned else num_cell(st, "d")

    rows = [[first(s), *(time_cell(folded[g].get(s, 0.0), div) for g in groups),
             time_cell(sum(folded[g].get(s, 0.0) for g in groups), div), time_cell(wall_of.get(s), div)]
            for s in steps]
    note = "; ".join(n for n in (
        "each row is the mean step of a run of consecutive steps "
        "(every step: 'hlo-doctor stats RUN --format json --per-step')"
        if binned else "",
        "op times overlap on XLA:CPU (ops run concurrently), so a step's sum can pass its wall time"
        if doc.get("backend") == "cpu" else "") if n)
    return Chart(f"step-by-{by}", title, alt, spec,
                 table(f"table-step-by-{by}", f"{title} ({unit})", columns, rows, note))


def _step_parts(s: Mapping[str, Any]) -> dict[str, float]:
    """One step's wall time split into :data:`BREAKDOWN_PARTS` (us), and its wall time as ``wall``."""
    idle = s.get("idle_by_kind") or {}
    out = {"busy": float(s.get("busy_us") or 0.0)}
    out.update({p: float(idle.get(p.removeprefix("idle: "), 0.0) or 0.0) for p in BREAKDOWN_PARTS[1:]})
    out["wall"] = float(s.get("wall_us") or 0.0)
    return out


def _breakdown_rows(steps: Sequence[Mapping[str, Any]], mean_of: Mapping[str, int] | None = None) -> tuple[
        list[tuple[str, str, dict[str, float]]], bool]:
    """(device, step label, parts) per device and step; with more than fit a chart, one row per device
    holding its mean step (and True). ``mean_of``: the steps are already those means (a page's
    document of a large capture), over this many steps per device."""
    def device(s: Mapping[str, Any]) -> str:
        return f"{s.get('host', '')} {s.get('device', '')}".strip()

    if mean_of:
        return [(device(s), f"mean of {mean_of.get(device(s), '?')}", _step_parts(s))
                for s in steps][:MAX_BREAKDOWN_ROWS], True
    if len(steps) <= MAX_BREAKDOWN_ROWS:
        return [(device(s), str(s.get("step")), _step_parts(s)) for s in steps], False
    per: dict[str, list[dict[str, float]]] = defaultdict(list)
    for s in steps:
        per[device(s)].append(_step_parts(s))
    rows = [(dev, f"mean of {len(ps)}", {k: sum(p[k] for p in ps) / len(ps) for k in ps[0]})
            for dev, ps in per.items()]
    return rows[:MAX_BREAKDOWN_ROWS], True


def breakdown_steps(bd: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The breakdown's steps as one dict per device step, from either layout of the JSON: a list of
    steps, or columns (``"layout": "columns"``, hosts and devices as indexes into their lists)."""
    steps = bd.get("steps") or []
    if not isinstance(steps, Mapping):
        return list(steps)
    hosts, devices = list(steps.get("hosts") or []), list(steps.get("devices") or [])
    plain = [k for k in ("step", "start_us", "wall_us", "busy_us", "op_us") if k in steps]
    nested = [k for k in ("host_us", "idle_by_kind") if isinstance(steps.get(k), Mapping)]
    return [{"host": hosts[h], "device": devices[d], **{k: steps[k][i] for k in plain},
             **{k: {kind: values[i] for kind, values in steps[k].items()} for k in nested}}
            for i, (h, d) in enumerate(zip(steps.get("host") or [], steps.get("device") or [], strict=True))]


def _breakdown_chart(bd: Mapping[str, Any]) -> Chart | None:
    steps = breakdown_steps(bd)
    if not steps:
        return None
    rows, means = _breakdown_rows(steps, bd.get("mean_of"))
    one_device = len({dev for dev, _, _ in rows}) == 1

    def label(dev: str, step: str) -> str:
        step_text = f"step {step}" if not means else step + " steps"
        return step_text if one_device else f"{dev} · {step_text}"

    unit, div = charts.unit_of([p["wall"] for _, _, p in rows])
    values = [{"row": label(dev, st), "part": part, "time": p[part] / div}
              for dev, st, p in rows for part in BREAKDOWN_PARTS]
    summary = bd.get("summary") or {}
    what = ("one per device, its mean step over the window" if means
            else f"one per device and step ({len(rows)})")
    alt = (f"Stacked horizontal bars, {what}: the device busy (union of its op intervals) and the idle time "
           "split by what the host did meanwhile (Python, dispatch, compile, waiting, untraced). Over the "
           f"window the device idled {float(summary.get('idle_pct') or 0.0):.1f}% of the step.")
    spec = charts.stacked_bars(values, x="row", x_title="device and step", y="time", y_title=f"time ({unit})",
                               color="part", color_title="part of the step", order=BREAKDOWN_PARTS,
                               description=alt, horizontal=True)
    columns = [Column("device"), Column("step", not means), Column(f"wall ({unit})", True, "wall_us"),
               Column(f"busy ({unit})", True, "busy_us"),
               *(Column(f"{p} ({unit})", True, f"idle_by_kind.{p.removeprefix('idle: ')}") for p in BREAKDOWN_PARTS[1:]),
               Column("idle %", True)]
    body = [[text_cell(dev), text_cell(st) if means else num_cell(int(st), "d"), time_cell(p["wall"], div),
             time_cell(p["busy"], div), *(time_cell(p[k], div) for k in BREAKDOWN_PARTS[1:]),
             num_cell(100.0 * (p["wall"] - p["busy"]) / p["wall"] if p["wall"] else None, ".1f")]
            for dev, st, p in rows]
    note = ("each row is a device's mean step ('hlo-doctor stats RUN --breakdown --format csv' has every step)"
            if means else "")
    return Chart("step-breakdown", "Step breakdown: device busy, idle and what the host did", alt, spec,
                 table("table-step-breakdown", f"Step breakdown per device and step ({unit})", columns, body,
                       "; ".join(x for x in (note, str(bd.get("busy_definition") or "")) if x)))


def step_section(doc: Mapping[str, Any]) -> Section:
    """Where a step's time goes: by category, by program, and the breakdown."""
    items: list[Any] = []
    missing: list[str] = []
    for by, title in (("category", "Time per step by category"), ("program", "Time per step by program")):
        chart = _stack_chart(doc, by, title)
        if chart is None:
            missing.append(f"{title.lower()}: the op stats hold no op")
            continue
        items.append(chart)
        if chart.table.rows and chart.table.rows[0][0].text == "mean":
            missing.append(f"{title.lower()} per traced step: the op stats hold no per-step samples (an export "
                           "without them); the chart shows the mean step")
    bd = doc.get("breakdown")
    chart = _breakdown_chart(bd) if isinstance(bd, Mapping) else None
    if chart is None:
        missing.append("step breakdown (device busy / idle / compile / host): the op stats have none "
                       "(written by an hlo-doctor from before the breakdown, or a table export); "
                       "'hlo-doctor stats RUN --breakdown' on the capture has it")
    else:
        items.append(chart)
        if isinstance(bd, Mapping):
            items.extend(thread_items(bd))
    return Section("step", "The step", tuple(items), tuple(missing))
