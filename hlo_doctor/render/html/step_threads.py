"""The step breakdown's host threads on a capture's page, where several threads of a host dispatch
programs: a line saying they run at the same time, a table with a row per thread (its time per
device step by kind, the device's idle time while it was in each kind), and the other threads' lines
(most idle first), each row naming its thread.

Read from the breakdown's JSON (``threads``, :meth:`hlo_doctor.opstats.breakdown.StepBreakdown.to_dict`).
A capture where every host has one dispatching thread gets nothing here (its page is what it was).
The line above the tables holds no figure: every number is in a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Cell, Column, Note, Table, num_cell, table, text_cell

__all__ = ["KINDS", "MAX_THREAD_LINES", "thread_items"]

KINDS: tuple[str, ...] = ("python", "dispatch", "compile", "wait", "untraced")
"""The kinds of host time, in the breakdown's order (``HOST_KINDS``)."""
MAX_THREAD_LINES = 30
"""Rows of the other threads' lines on a page (the CSV and JSON hold every one)."""


def _concurrent(threads: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    per: dict[str, list[Mapping[str, Any]]] = {}
    for t in threads:
        per.setdefault(str(t.get("host", "")), []).append(t)
    return {host: ts for host, ts in per.items() if len(ts) > 1}


def _us(value: Any, div: float) -> Cell:
    return num_cell(value, lambda v: f"{v / div:,.3f}" if div > 1 else f"{v:,.1f}")


def _by_kind(t: Mapping[str, Any], key: str) -> list[float]:
    d = t.get(key) or {}
    return [float(d.get(k, 0.0) or 0.0) for k in KINDS]


def thread_items(bd: Mapping[str, Any]) -> list[Note | Table]:
    """The line and the two tables (see the module's docstring); empty when no host has two
    dispatching threads."""
    threads = [t for t in bd.get("threads") or [] if isinstance(t, Mapping)]
    hosts = _concurrent(threads)
    if not hosts:
        return []
    several = len({str(t.get("host", "")) for t in threads}) > 1

    def name(t: Mapping[str, Any]) -> str:
        return f"{t.get('host', '')} {t.get('thread', '')}" if several else str(t.get("thread", ""))

    note = Note("; ".join(
        f"On {host} these threads dispatch programs and run at the same time: the step rows above are the "
        "driver thread's (the table's first row of that host); the others' times are rows of their own, "
        "not added into the step's" for host in hosts))
    unit, div = charts.unit_of([v for t in threads for key in ("host_by_kind_us", "idle_by_kind_us")
                                for v in _by_kind(t, key)])
    columns = [Column("host"), Column("thread"), Column("entry frame"), Column("role"),
               Column("dispatch spans", True, "dispatches"),
               *(Column(f"host: {k} ({unit})", True, f"host_by_kind_us.{k}") for k in KINDS),
               *(Column(f"idle: {k} ({unit})", True, f"idle_by_kind_us.{k}") for k in KINDS)]
    rows = [[text_cell(t.get("host", "")), text_cell(t.get("thread", "")), text_cell(t.get("entry") or "-"),
             text_cell("driver" if t.get("driver") else "apart"), num_cell(t.get("dispatches"), "d"),
             *(_us(v, div) for v in _by_kind(t, "host_by_kind_us")),
             *(_us(v, div) for v in _by_kind(t, "idle_by_kind_us"))] for t in threads]
    items: list[Note | Table] = [note, table(
        "table-step-threads", f"Threads that dispatch programs, per device step ({unit})", columns, rows,
        "host: what the thread did; idle: the device's idle time while it did it; each thread's host time "
        "sums to the step's wall time and its idle time to the step's idle time")]
    lines = sorted(((t, x) for t in threads if not t.get("driver") for x in t.get("lines") or []
                    if isinstance(x, Mapping)),
                   key=lambda p: (-float(p[1].get("idle_us") or 0.0), -float(p[1].get("host_us") or 0.0)))
    if lines:
        unit, div = charts.unit_of([float(x.get(k) or 0.0) for _, x in lines for k in ("idle_us", "host_us")])
        columns = [Column("thread"), Column(f"idle/step ({unit})", True, "idle_us"),
                   Column(f"host/step ({unit})", True, "host_us"), Column("kind"),
                   Column("where (first frame outside the frameworks)"), Column("what"), Column("source")]
        body = [[text_cell(name(t)), _us(x.get("idle_us"), div), _us(x.get("host_us"), div),
                 text_cell(x.get("kind", "")), text_cell(x.get("where") or "(frameworks only)"),
                 text_cell(x.get("target", "")), text_cell(x.get("source", ""))]
                for t, x in lines[:MAX_THREAD_LINES]]
        more = len(lines) - MAX_THREAD_LINES
        items.append(table("table-step-thread-lines", f"What the other threads ran while the device idled, "
                           f"per step ({unit})", columns, body,
                           f"{more} more: 'hlo-doctor stats RUN --breakdown --format csv'" if more > 0 else ""))
    return items
