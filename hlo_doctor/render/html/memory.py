"""The memory section of a page: each program's peak and what it is made of, and for the programs of
the step the heap over program order with the peak marked (as xprof's memory viewer draws it) and the
buffers live at the peak.

Input is the JSON document ``hlo-doctor memory --format json`` writes (``hlo-doctor.memory/1``).
Cells keep the JSON's bytes as their values; the text people read is in KiB/MiB/GiB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hlo_doctor.core.format import fmt_bytes, fmt_source
from hlo_doctor.hlo.shape import fmt_shape
from hlo_doctor.render.html import charts
from hlo_doctor.render.html.model import Cell, Chart, Column, Note, Section, Table, num_cell, table, text_cell

__all__ = ["HEAP_CHARTS", "memory_section", "program_label"]

HEAP_CHARTS = 4
"""Programs whose heap is drawn (the step's, most frequent first, as the document lists them)."""
_MIB = float(2**20)


def program_label(p: Mapping[str, Any]) -> str:
    """``jit_sample(124)``: the module with its program id, as ``memory`` prints it."""
    pid = p.get("program_id")
    return f"{p.get('module', '')}({pid})" if pid is not None else str(p.get("module", ""))


def _bytes(value: Any) -> Cell:
    return num_cell(value, fmt_bytes)


def _mib(value: Any) -> Cell:
    return num_cell(value, lambda v: f"{v / _MIB:,.3f}")


def _programs_table(programs: Sequence[Mapping[str, Any]]) -> Table:
    columns = [Column("program"), Column("runs/step", True, "runs_per_step"), Column("peak", True, "peak_bytes"),
               Column("arguments", True, "argument_bytes"), Column("outputs", True, "output_bytes"),
               Column("donated", True, "alias_bytes"), Column("temporaries", True, "temporary_bytes"),
               Column("heap peak", True, "heap_peak_bytes"), Column("peak at", False, "peak_instruction")]
    rows = [[text_cell(program_label(p)), num_cell(p.get("runs_per_step"), ",.3g"), _bytes(p.get("peak_bytes")),
             _bytes(p.get("argument_bytes")), _bytes(p.get("output_bytes")), _bytes(p.get("alias_bytes")),
             _bytes(p.get("temporary_bytes")), _bytes(p.get("heap_peak_bytes")),
             text_cell(p.get("peak_instruction") or p.get("error") or None)] for p in programs]
    return table("table-memory-programs", "Peak device memory per program", columns, rows,
                 "the peak: the simulated heap's highest point plus the arguments, outputs and constants "
                 "(xprof's memory viewer's count)")


def _heap_chart(p: Mapping[str, Any], i: int) -> Chart:
    heap = [int(h) for h in p.get("heap") or ()]
    names = [str(n) for n in p.get("heap_instructions") or ()]
    whole = int(p.get("peak_bytes") or 0) - int(p.get("heap_peak_bytes") or 0)
    label = program_label(p)
    values = [{"event": k, "instruction": names[k] if k < len(names) else "", "memory": (h + whole) / _MIB}
              for k, h in enumerate(heap)]
    at = int(p.get("peak_position") or 0)
    at = min(max(at, 0), len(heap) - 1)
    # xprof's peak position: the event that reached the peak (the memory after it).
    peak = {"event": at, "memory": int(p.get("peak_bytes") or 0) / _MIB}
    alt = (f"Step line of {label}'s memory over its {len(heap)} heap events in program order: the temporaries "
           f"live before each event plus the {fmt_bytes(whole)} that live for the whole program (arguments, outputs, "
           f"constants). The peak, {fmt_bytes(p.get('peak_bytes'))}, is marked at event {at} "
           f"({p.get('peak_instruction') or 'no instruction'}).")
    spec = charts.heap_steps(values, x="event", x_title="heap event (program order)", y="memory",
                             y_title="memory (MiB)", label="instruction", peak=peak,
                             peak_label=f"peak {fmt_bytes(p.get('peak_bytes'))}", description=alt)
    columns = [Column("event", True), Column("instruction"), Column("temporaries before it", True, "heap"),
               Column("memory before it (MiB)", True, "memory_bytes")]
    rows = [[num_cell(k, "d"), text_cell(names[k] if k < len(names) else None), _bytes(h), _mib(h + whole)]
            for k, h in enumerate(heap)]
    return Chart(f"memory-heap-{i}", f"{label}: memory over program order", alt, spec,
                 table(f"table-memory-heap-{i}", f"{label}: memory at each heap event", columns, rows,
                       f"memory = temporaries + {whole:,} bytes live for the whole program; the peak, "
                       f"{int(p.get('peak_bytes') or 0):,} bytes, is reached by event {at} (the memory before "
                       f"event {at + 1})"))


def _peak_table(p: Mapping[str, Any], i: int) -> Table:
    columns = [Column("size", True, "size_bytes"), Column("kind", False, "category"),
               Column("op", False, "instruction"), Column("shape", False, "shape"), Column("source", False, "source")]
    rows = []
    for b in p.get("buffers_at_peak") or ():
        kind = str(b.get("category", "")) + (" (donated)" if b.get("aliased") else "")
        rows.append([_bytes(b.get("size_bytes")), text_cell(kind), text_cell(b.get("instruction")),
                     text_cell(fmt_shape(str(b.get("shape", ""))) or None),
                     text_cell(fmt_source(str(b.get("source", ""))) or None)])
    return table(f"table-memory-peak-{i}", f"{program_label(p)}: buffers live at the peak "
                 f"({fmt_bytes(p.get('peak_bytes'))})", columns, rows, "largest first; their sizes add up to the peak")


def memory_section(doc: Mapping[str, Any]) -> Section:
    """Peaks per program, and the step's programs' heaps and buffers at the peak."""
    programs = [p for p in doc.get("programs") or () if isinstance(p, Mapping)]
    items: list[Chart | Table | Note] = []
    missing: list[str] = []
    device = doc.get("device_memory_bytes")
    if device:
        items.append(Note(f"device memory: {fmt_bytes(device)} ({doc.get('device_kind') or doc.get('backend')})"))
    if not programs:
        return Section("memory", "Device memory", tuple(items), ("memory per program: the capture holds no buffer "
                                                                 "assignment",))
    items.append(_programs_table(programs))
    ran = [p for p in programs if p.get("runs_per_step")] or (
        programs if all(p.get("runs_per_step") is None for p in programs) else [])
    for i, p in enumerate(ran[:HEAP_CHARTS]):
        if len(p.get("heap") or ()) > 1:
            items.append(_heap_chart(p, i))
        else:
            items.append(Note(f"{program_label(p)}: no temporary in its heap trace; what lives for the whole program "
                              f"(arguments, outputs, constants) is its peak throughout"))
        items.append(_peak_table(p, i))
    if len(ran) > HEAP_CHARTS:
        items.append(Note(f"{len(ran) - HEAP_CHARTS} more program(s) of the step not drawn: "
                          "'hlo-doctor memory RUN' lists every one"))
    return Section("memory", "Device memory", tuple(items), tuple(missing))
