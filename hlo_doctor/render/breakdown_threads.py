"""The step breakdown's host threads as rows: one per thread that dispatches programs, and the lines
of every thread other than the driver, each row naming its thread.

A host where more than one thread dispatches programs (a server's request thread beside a
detokenizer, a prefetch thread) has its threads running at the same time: the step rows and the
breakdown's lines are the driver thread's, and each other thread's time is a row of its own, never
added into the step's. :func:`threads_line` says so for the header; a capture where every host has
one dispatching thread gets no line and no rows (its views are what they were).

Shared by the terminal table and Markdown (:mod:`hlo_doctor.render.breakdown`) and the CSV
(:mod:`hlo_doctor.cli.breakdown_view`); the HTML page reads the same fields from the JSON
(:mod:`hlo_doctor.render.html.step_threads`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hlo_doctor.core.format import fmt_source, fmt_us
from hlo_doctor.opstats.breakdown import HOST_KINDS, HostLine, HostThread, StepBreakdown

__all__ = ["OTHER_LINE_COLUMNS", "THREAD_COLUMNS", "concurrent_hosts", "other_lines", "other_line_rows",
           "thread_name", "thread_rows", "threads_line"]

THREAD_COLUMNS: tuple[str, ...] = ("host", "thread", "entry frame", "role", "dispatch spans",
                                   *(f"host: {k}" for k in HOST_KINDS), *(f"idle: {k}" for k in HOST_KINDS))
"""Per thread: its time per device step by kind (``host:``) and the device's idle time per step while
it was in each kind (``idle:``)."""
OTHER_LINE_COLUMNS: tuple[str, ...] = ("thread", "idle/step", "host/step", "kind",
                                       "where (first frame outside the frameworks)", "what", "source")


def concurrent_hosts(b: StepBreakdown) -> dict[str, list[HostThread]]:
    """host -> its dispatching threads (the driver first), for the hosts with more than one."""
    per: dict[str, list[HostThread]] = {}
    for t in b.threads:
        per.setdefault(t.host, []).append(t)
    return {host: ts for host, ts in per.items() if len(ts) > 1}


def thread_name(t: HostThread, several_hosts: bool) -> str:
    """The thread as a row names it: its line's name and id, after its host where there are several."""
    return f"{t.host} {t.thread}" if several_hosts else t.thread


def threads_line(b: StepBreakdown) -> str:
    """The header's line on the hosts whose threads run at once; "" when no host has two."""
    parts = []
    for host, ts in concurrent_hosts(b).items():
        others = "the other thread's" if len(ts) == 2 else f"the other {len(ts) - 1} threads'"
        parts.append(f"{host}: {len(ts)} threads dispatch programs and run at the same time; the steps' host "
                     f"columns and lines are the driver thread's ({ts[0].thread}), {others} times are rows of "
                     "their own (threads below), not added into the step's")
    return " · ".join(parts)


def _role(t: HostThread) -> str:
    return "driver" if t.driver else "apart"


def thread_rows(b: StepBreakdown, fmt: Callable[[float], str] = fmt_us) -> list[list[str]]:
    """One row per dispatching thread (:data:`THREAD_COLUMNS`), hosts in order, the driver first;
    empty when no host has two such threads."""
    if not concurrent_hosts(b):
        return []
    return [[t.host, t.thread, t.entry or "-", _role(t), str(t.dispatches),
             *(fmt(t.host_by_kind_us.get(k, 0.0)) for k in HOST_KINDS),
             *(fmt(t.idle_by_kind_us.get(k, 0.0)) for k in HOST_KINDS)] for t in b.threads]


def other_lines(b: StepBreakdown) -> list[tuple[HostThread, HostLine]]:
    """(thread, line) of every thread other than a driver, most idle time first (then host time);
    empty when no host has two dispatching threads."""
    if not concurrent_hosts(b):
        return []
    pairs = [(t, x) for t in b.threads if not t.driver for x in t.lines]
    pairs.sort(key=lambda p: (-p[1].idle_us, -p[1].host_us, p[0].host, p[0].thread, p[1].kind, p[1].where,
                              p[1].target))
    return pairs


def other_line_rows(b: StepBreakdown, kind_words: dict[str, str], limit: int | None = None) -> list[list[str]]:
    """The other threads' lines as rows (:data:`OTHER_LINE_COLUMNS`), at most ``limit``."""
    several = len({t.host for t in b.threads}) > 1
    pairs: Sequence[tuple[HostThread, HostLine]] = other_lines(b)
    return [[thread_name(t, several), fmt_us(x.idle_us), fmt_us(x.host_us), kind_words.get(x.kind, x.kind),
             x.where or "(frameworks only)", x.target, fmt_source(x.source) if x.source else ""]
            for t, x in pairs[:limit]]
