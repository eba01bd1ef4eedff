"""One op-stats table from the parts of a capture's hosts (:class:`~hlo_doctor.hosts.work.HostPart`).

The hosts' metadata is combined as if their files had been read in one go
(:func:`~hlo_doctor.trace.read.combine_hosts`), their sums added up
(:func:`~hlo_doctor.opstats.totals.merge_totals`), and the table built from the sum
(:func:`~hlo_doctor.opstats.build.opstats_from_totals`): the same rows, per-host and per-device
columns, steps and breakdown as reading every file in one process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hlo_doctor.core.model import RunInfo
from hlo_doctor.hlo import HloModule
from hlo_doctor.hosts.work import HostFailure, HostPart
from hlo_doctor.opstats.build import modules_from_protos, opstats_from_totals
from hlo_doctor.opstats.schema import OpStats
from hlo_doctor.opstats.totals import EventTotals, device_rank, merge_totals
from hlo_doctor.opstats.validate import check_opstats
from hlo_doctor.trace.columns import OpColumns
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.read import combine_hosts


def left_out_note(left_out: Sequence[HostFailure], hosts: int) -> str:
    """The note that says which host files the table leaves out, and why."""
    why = "; ".join(f.reason for f in left_out)
    return (f"{len(left_out)} of {hosts} host files left out (--skip-bad-hosts): this table holds the other "
            f"{hosts - len(left_out)} only: {why}")


def merge_parts(parts: Sequence[HostPart], *, source_path: str, run: RunInfo | None = None,
                left_out: Sequence[HostFailure] = (),
                modules: tuple[tuple[HloModule, ...], tuple[str, ...]] | None = None,
                totals: EventTotals | None = None) -> OpStats:
    """The op stats of the hosts whose parts are given (in the order of their files); ``totals``
    their sums added up already (:class:`~hlo_doctor.opstats.totals.TotalsSum`: the parts then hold
    none), else the parts' own are added up here; ``left_out``
    are host files read by no part, said in the table's notes and ``hosts_left_out``; ``modules``
    the parsed modules of the parts' protos and their notes (:func:`modules_from_protos`), when the
    command parsed them already.

    Raises:
        InputError: no host has HLO op events.
    """
    trace = combine_hosts([p.read for p in parts], OpColumns().finish())
    if totals is None:
        totals = merge_totals([p.totals for p in parts if p.totals is not None])
    parsed, notes = modules if modules is not None else modules_from_protos(trace.module_protos)
    texts = [t for p in parts for t in p.op_texts] if trace.backend != "cpu" and not trace.module_protos else []
    warnings = [left_out_note(left_out, len(parts) + len(left_out))] if left_out else []
    stats = opstats_from_totals(trace, totals, parsed, run=run, source_path=source_path,
                                warnings=[*warnings, *notes], op_texts=texts, device_rank=device_rank(totals))
    stats = dataclasses.replace(stats, hosts_left_out=tuple((f.path, f.reason) for f in left_out))
    return check_opstats(stats, source_path)


def merge_dispatch(parts: Sequence[HostPart]) -> tuple[HostDispatch, ...]:
    """The hosts' dispatch spans per program, added up."""
    calls: dict[str, int] = {}
    total: dict[str, float] = {}
    for p in parts:
        for d in p.dispatch or ():
            calls[d.module] = calls.get(d.module, 0) + d.calls
            total[d.module] = total.get(d.module, 0.0) + d.total_us
    return tuple(HostDispatch(m, calls[m], total[m]) for m in sorted(calls))
