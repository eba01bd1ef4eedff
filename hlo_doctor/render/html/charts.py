"""Vega-Lite specs of the report's kinds of chart, as plain dicts with their data inline.

Each builder takes rows of plain values (what the chart's table also shows) and returns a spec
without ``config``: :mod:`.vega` adds the page's or the static image's. Colours of data marks come
from palettes that read on white and on a dark page alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CATEGORY_SCHEME", "STATUS_COLORS", "diverging_bars", "grouped_bars", "heap_steps", "interval_strip",
           "overlaid_bars",
           "ratio_intervals", "reference_bars", "stacked_bars", "unit_of"]

CATEGORY_SCHEME = "tableau10"
"""Vega's categorical palette for categories, programs and parts of a step."""

STATUS_COLORS: Mapping[str, str] = {
    "baseline": "#4c78a8", "treatment": "#f58518", "time per step": "#4c78a8", "recoverable (finding)": "#e45756",
    "improved": "#54a24b", "no change": "#9d9d9d", "regressed": "#e45756", "inconclusive": "#eeca3b",
    "new": "#e45756", "gone": "#54a24b", "memory": "#4c78a8", "compute": "#f58518", "": "#9d9d9d",
}
"""Fixed colours of named series, the same in every chart."""

_WIDTH = 640
_ROW = 18  # px per bar of a horizontal bar chart


def unit_of(values: Sequence[float]) -> tuple[str, float]:
    """(unit, divisor) for times given in microseconds: ms from 10 ms up, else us."""
    peak = max((abs(v) for v in values if v is not None), default=0.0)
    return ("ms", 1000.0) if peak >= 10_000 else ("us", 1.0)


def _colors(names: Sequence[str]) -> dict[str, Any]:
    """A colour scale with the fixed colours of ``names`` (in that legend order)."""
    return {"domain": list(names), "range": [STATUS_COLORS.get(n, "#9d9d9d") for n in names]}


def _tooltip(*fields: tuple[str, str, str]) -> list[dict[str, Any]]:
    out = []
    for name, kind, title in fields:
        entry: dict[str, Any] = {"field": name, "type": kind, "title": title}
        if kind == "quantitative":
            entry["format"] = ",.4~r"
        out.append(entry)
    return out


def stacked_bars(values: Sequence[Mapping[str, Any]], *, x: str, x_title: str, y: str, y_title: str,
                 color: str, color_title: str, order: Sequence[str], description: str,
                 horizontal: bool = False, marks: Sequence[Mapping[str, Any]] = (),
                 mark_field: str = "", mark_title: str = "") -> dict[str, Any]:
    """Bars of ``y`` per ``x`` (nominal), stacked by ``color`` in ``order``; ``marks`` add one tick per
    ``x`` at ``mark_field`` (the step wall time over its parts)."""
    pos, val = ("y", "x") if horizontal else ("x", "y")
    xs: list[Any] = list(dict.fromkeys(v[x] for v in values))
    bar: dict[str, Any] = {
        "mark": {"type": "bar"},
        "encoding": {
            pos: {"field": x, "type": "ordinal", "title": x_title, "sort": xs,
                  **({} if horizontal else {"axis": {"labelAngle": 0 if len(xs) <= 12 else -60,
                                                     "labelOverlap": True}})},
            val: {"field": y, "type": "quantitative", "title": y_title, "stack": "zero"},
            "color": {"field": color, "type": "nominal", "title": color_title, "sort": list(order),
                      "scale": {"scheme": CATEGORY_SCHEME, "domain": list(order)}},
            "order": {"field": "_order", "type": "quantitative"},
            "tooltip": _tooltip((x, "ordinal", x_title), (color, "nominal", color_title),
                                (y, "quantitative", y_title)),
        },
    }
    rank = {name: i for i, name in enumerate(order)}
    data = [{**v, "_order": rank.get(v[color], len(rank))} for v in values]
    layers: list[dict[str, Any]] = [{**bar, "data": {"values": data}}]
    if marks:
        layers.append({
            "data": {"values": list(marks)},
            "mark": {"type": "tick", "thickness": 2, "color": "currentColor",
                     "size": 14 if horizontal else 24},
            "encoding": {pos: {"field": x, "type": "ordinal", "sort": xs},
                         val: {"field": mark_field, "type": "quantitative"},
                         "tooltip": _tooltip((x, "ordinal", x_title), (mark_field, "quantitative", mark_title))},
        })
    size = {"width": _WIDTH, "height": max(60, _ROW * len(xs))} if horizontal else {
        "width": max(_WIDTH // 2, min(_WIDTH, 28 * len(xs))), "height": 220}
    return {"description": description, **size, "layer": layers}


def overlaid_bars(values: Sequence[Mapping[str, Any]], *, label: str, parts: Sequence[str], value_title: str,
                  description: str) -> dict[str, Any]:
    """Horizontal bars per ``label``, one per part drawn over each other from zero (the recoverable part
    of an op's time over its time); ``values`` rows hold ``label`` and one field per part."""
    labels = [v[label] for v in values]
    return {
        "description": description, "width": _WIDTH, "height": max(60, _ROW * len(labels)),
        "data": {"values": list(values)},
        "transform": [{"fold": list(parts), "as": ["part", "value"]},
                      {"calculate": f"indexof({list(parts)!r}, datum.part)", "as": "_order"}],
        "mark": {"type": "bar"},
        "encoding": {
            "y": {"field": label, "type": "nominal", "title": None, "sort": labels},
            "x": {"field": "value", "type": "quantitative", "title": value_title, "stack": None},
            "color": {"field": "part", "type": "nominal", "title": None, "sort": list(parts),
                      "scale": _colors(parts)},
            "order": {"field": "_order", "type": "quantitative"},
            "tooltip": _tooltip((label, "nominal", "op"), ("part", "nominal", "part"),
                                ("value", "quantitative", value_title)),
        },
    }


def reference_bars(values: Sequence[Mapping[str, Any]], *, label: str, value: str, value_title: str,
                   color: str, reference: float, reference_label: str, description: str) -> dict[str, Any]:
    """Horizontal bars of ``value`` per ``label`` coloured by ``color``, and a rule at ``reference``
    (a chip's peak), labelled."""
    labels = [v[label] for v in values]
    names = list(dict.fromkeys(str(v[color]) for v in values))
    return {
        "description": description, "width": _WIDTH, "height": max(60, _ROW * len(labels)),
        "layer": [
            {"data": {"values": list(values)}, "mark": {"type": "bar"},
             "encoding": {"y": {"field": label, "type": "nominal", "title": None, "sort": labels},
                          "x": {"field": value, "type": "quantitative", "title": value_title,
                                "scale": {"domainMax": reference * 1.05}},
                          "color": {"field": color, "type": "nominal", "title": "bound by", "scale": _colors(names)},
                          "tooltip": _tooltip((label, "nominal", "op"), (value, "quantitative", value_title))}},
            {"data": {"values": [{"ref": reference, "text": reference_label}]},
             "mark": {"type": "rule", "strokeDash": [6, 3], "strokeWidth": 2, "color": "#e45756"},
             "encoding": {"x": {"field": "ref", "type": "quantitative"}}},
            {"data": {"values": [{"ref": reference, "text": reference_label}]},
             "mark": {"type": "text", "align": "right", "baseline": "top", "dx": -4, "dy": 2, "y": 0,
                      "color": "#e45756"},
             "encoding": {"x": {"field": "ref", "type": "quantitative"}, "text": {"field": "text"}}},
        ],
    }


def interval_strip(points: Sequence[Mapping[str, Any]], summary: Sequence[Mapping[str, Any]], *,
                   group: str, value: str, value_title: str, description: str,
                   point_mark: str = "point") -> dict[str, Any]:
    """Every sample as a point per ``group`` (baseline, treatment), each group's interval (``low`` to
    ``high``) as a rule and its median as a tick: two distributions side by side."""
    groups = list(dict.fromkeys(str(s[group]) for s in summary))
    color = {"field": group, "type": "nominal", "title": None, "scale": _colors(groups), "sort": groups}
    y = {"field": group, "type": "nominal", "title": None, "sort": groups}
    mark: dict[str, Any] = ({"type": "tick", "opacity": 0.45, "thickness": 1.5} if point_mark == "tick"
                            else {"type": "point", "filled": True, "size": 60, "opacity": 0.8})
    return {
        "description": description, "width": _WIDTH, "height": 56 * len(groups),
        "layer": [
            {"data": {"values": list(summary)}, "mark": {"type": "rule", "strokeWidth": 3, "opacity": 0.5},
             "encoding": {"y": y, "x": {"field": "low", "type": "quantitative", "title": value_title,
                                        "scale": {"zero": False}},
                          "x2": {"field": "high"}, "color": color,
                          "tooltip": _tooltip((group, "nominal", "variant"), ("low", "quantitative", "low"),
                                              ("high", "quantitative", "high"))}},
            {"data": {"values": list(points)}, "mark": mark,
             "encoding": {"y": y, "x": {"field": value, "type": "quantitative"}, "color": color,
                          "tooltip": _tooltip((group, "nominal", "variant"), ("round", "ordinal", "round"),
                                              (value, "quantitative", value_title))}},
            {"data": {"values": list(summary)},
             "mark": {"type": "tick", "thickness": 3, "size": 34, "color": "currentColor"},
             "encoding": {"y": y, "x": {"field": "median", "type": "quantitative"},
                          "tooltip": _tooltip((group, "nominal", "variant"),
                                              ("median", "quantitative", "median"))}},
        ],
    }


def ratio_intervals(rows: Sequence[Mapping[str, Any]], bands: Sequence[Mapping[str, Any]], *, label: str,
                    value_title: str, color_field: str, color_names: Sequence[str], description: str,
                    band_names: Sequence[str], band_colors: Sequence[str]) -> dict[str, Any]:
    """Ratios (``ratio``, ``low``, ``high`` per ``label``) as points with their interval, over shaded
    ``bands`` (``from``, ``to``, ``zone``; None for an end open to the axis' edge) on a log axis, and a
    rule at 1."""
    labels = [r[label] for r in rows]
    xs = [v for r in rows for v in (r.get("ratio"), r.get("low"), r.get("high")) if v]
    # A band's open end (None) reaches the axis' edge; its other end widens the axis to show it.
    xs += [v for b in bands for v in (b["from"], b["to"]) if v]
    lo, hi = min(xs + [1.0]) / 1.15, max(xs + [1.0]) * 1.15
    x = {"type": "quantitative", "scale": {"type": "log", "domain": [lo, hi], "clamp": True}}
    y = {"field": label, "type": "nominal", "title": None, "sort": labels}
    with_interval = [r for r in rows if r.get("low") and r.get("high")]
    clipped = [{**b, "from": lo if b["from"] is None else max(b["from"], lo),
                "to": hi if b["to"] is None else min(b["to"], hi)} for b in bands]
    return {
        "description": description, "width": _WIDTH, "height": max(70, 30 * len(labels)),
        "layer": [
            {"data": {"values": clipped}, "mark": {"type": "rect", "opacity": 0.18},
             "encoding": {"x": {**x, "field": "from", "title": value_title}, "x2": {"field": "to"},
                          "color": {"field": "zone", "type": "nominal", "title": None,
                                    "scale": {"domain": list(band_names), "range": list(band_colors)},
                                    "legend": {"symbolOpacity": 0.35}},
                          "tooltip": _tooltip(("zone", "nominal", "zone"), ("from", "quantitative", "from"),
                                              ("to", "quantitative", "to"))}},
            {"data": {"values": [{"one": 1.0}]}, "mark": {"type": "rule", "strokeDash": [4, 3], "opacity": 0.7,
                                                          "color": "currentColor"},
             "encoding": {"x": {**x, "field": "one"}}},
            {"data": {"values": with_interval}, "mark": {"type": "rule", "strokeWidth": 2, "color": "currentColor"},
             "encoding": {"y": y, "x": {**x, "field": "low"}, "x2": {"field": "high"}}},
            {"data": {"values": list(rows)},
             "mark": {"type": "point", "filled": True, "size": 90, "stroke": "currentColor", "strokeWidth": 0.5},
             "encoding": {"y": y, "x": {**x, "field": "ratio"},
                          "shape": {"value": "diamond"},
                          "color": {"field": color_field, "type": "nominal", "title": None,
                                    "scale": _colors(color_names)},
                          "tooltip": _tooltip((label, "nominal", "what"), ("ratio", "quantitative", "ratio"),
                                              ("low", "quantitative", "CI low"), ("high", "quantitative", "CI high"),
                                              (color_field, "nominal", "outcome"))}},
        ],
        "resolve": {"scale": {"color": "independent"}},
    }


def grouped_bars(values: Sequence[Mapping[str, Any]], *, label: str, group: str, groups: Sequence[str],
                 value: str, value_title: str, description: str) -> dict[str, Any]:
    """Horizontal bars of ``value`` per ``label``, one bar per ``group`` side by side (before/after)."""
    labels = list(dict.fromkeys(v[label] for v in values))
    return {
        "description": description, "width": _WIDTH, "height": max(60, 2 * _ROW * len(labels)),
        "data": {"values": list(values)}, "mark": {"type": "bar"},
        "encoding": {
            "y": {"field": label, "type": "nominal", "title": None, "sort": labels},
            "yOffset": {"field": group, "type": "nominal", "sort": list(groups)},
            "x": {"field": value, "type": "quantitative", "title": value_title},
            "color": {"field": group, "type": "nominal", "title": None, "scale": _colors(groups),
                      "sort": list(groups)},
            "tooltip": _tooltip((label, "nominal", "op"), (group, "nominal", "variant"),
                                (value, "quantitative", value_title)),
        },
    }


def diverging_bars(values: Sequence[Mapping[str, Any]], *, label: str, value: str, value_title: str,
                   color: str, names: Sequence[str], description: str) -> dict[str, Any]:
    """Horizontal bars either side of zero (new ops right, gone ops left), coloured by ``color``;
    rows with ``fails`` true are outlined."""
    labels = [v[label] for v in values]
    return {
        "description": description, "width": _WIDTH, "height": max(60, _ROW * len(labels)),
        "data": {"values": list(values)},
        "mark": {"type": "bar", "strokeWidth": 2},
        "encoding": {
            "y": {"field": label, "type": "nominal", "title": None, "sort": labels},
            "x": {"field": value, "type": "quantitative", "title": value_title},
            "color": {"field": color, "type": "nominal", "title": None, "scale": _colors(names)},
            "stroke": {"condition": {"test": "datum.fails", "value": "currentColor"}, "value": None},
            "tooltip": _tooltip((label, "nominal", "op"), (color, "nominal", "status"),
                                (value, "quantitative", value_title), ("judgement", "nominal", "judgement")),
        },
    }


def heap_steps(values: Sequence[Mapping[str, Any]], *, x: str, x_title: str, y: str, y_title: str,
               label: str, peak: Mapping[str, Any], peak_label: str, description: str) -> dict[str, Any]:
    """A program's memory over program order as xprof's memory viewer draws it: a step line of ``y``
    (its axis not from zero) per heap event ``x``, each point the memory before that event (its
    instruction ``label`` in the tooltip), held from the event before; the peak marked by a rule and a
    point at ``peak`` (the event that reached it and the peak), labelled ``peak_label``."""
    marker = [{**peak, "text": peak_label}]
    return {
        "description": description, "width": _WIDTH, "height": 220,
        "layer": [
            {"data": {"values": list(values)}, "mark": {"type": "line", "interpolate": "step-before",
                                                       "color": STATUS_COLORS["memory"], "point": True},
             "encoding": {"x": {"field": x, "type": "quantitative", "title": x_title,
                                "axis": {"tickMinStep": 1, "format": "d"}},
                          # Not from zero: what lives for the whole program would flatten the heap's steps.
                          "y": {"field": y, "type": "quantitative", "title": y_title, "scale": {"zero": False}},
                          "tooltip": _tooltip((x, "quantitative", x_title), (label, "nominal", "instruction"),
                                              (y, "quantitative", y_title))}},
            {"data": {"values": marker}, "mark": {"type": "rule", "strokeDash": [6, 3], "strokeWidth": 2,
                                                  "color": "#e45756"},
             "encoding": {"x": {"field": x, "type": "quantitative"}}},
            {"data": {"values": marker}, "mark": {"type": "point", "filled": True, "size": 80, "color": "#e45756"},
             "encoding": {"x": {"field": x, "type": "quantitative"}, "y": {"field": y, "type": "quantitative"},
                          "tooltip": _tooltip((x, "quantitative", x_title), (y, "quantitative", y_title))}},
            {"data": {"values": marker}, "mark": {"type": "text", "align": "left", "baseline": "bottom", "dx": 6,
                                                  "dy": -4, "color": "#e45756"},
             "encoding": {"x": {"field": x, "type": "quantitative"}, "y": {"field": y, "type": "quantitative"},
                          "text": {"field": "text"}}},
        ],
    }
