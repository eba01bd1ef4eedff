"""Reading memory: a capture's buffer assignments (the HloProtos of its ``/host:metadata`` plane, read
alone) or a compiled jax program's, into a :class:`~hlo_doctor.memory.model.MemoryReport`."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo import HloModule, parse_module
from hlo_doctor.hlo.printer import PrinterCrash, print_modules
from hlo_doctor.memory.build import failed_program, program_memory
from hlo_doctor.memory.capacity import device_memory, kv_cache
from hlo_doctor.memory.hlo_fields import UnwritableShape, module_from_hlo_proto
from hlo_doctor.memory.model import MemoryReport, ProgramMemory
from hlo_doctor.memory.proto import assignment_from_bytes, assignment_from_hlo_proto, instruction_names
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.model import ModuleProto
from hlo_doctor.trace.trace_json import is_trace_json

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["NO_ASSIGNMENTS", "memory_from_protos", "memory_of_compiled", "read_memory", "runs_per_step"]

NO_ASSIGNMENTS = "holds no buffer assignments (a trace JSON keeps no HLO): pass the .xplane.pb of the same capture"

ProgramKey = tuple[str, "int | None"]


def runs_per_step(table: pd.DataFrame | None, num_steps: int) -> dict[ProgramKey, float]:
    """(module, program id) -> how often the program ran per step, from an op-stats table
    (its most frequent op's occurrences on one device over the steps)."""
    if table is None or not len(table) or num_steps <= 0:
        return {}
    out: dict[ProgramKey, float] = {}
    devices = table["devices"].fillna(1).clip(lower=1) if "devices" in table else 1
    per_device = table["occurrences"].fillna(0) / devices
    for (module, pid), runs in per_device.groupby([table["module"], table["program_id"]], dropna=False):
        key = (str(module), None if pid is None or pid != pid else int(pid))
        out[key] = max(out.get(key, 0.0), float(runs.max()) / num_steps)
    return out


def _runs(runs: Mapping[ProgramKey, float] | None, name: str, pid: int | None) -> float | None:
    if runs is None:
        return None
    if (name, pid) in runs:
        return runs[(name, pid)]
    return next((v for (n, p), v in runs.items() if n == name and (p is None or pid is None)), 0.0)


def _ordered(programs: Iterable[ProgramMemory]) -> tuple[ProgramMemory, ...]:
    # The step's programs first (most frequent, then largest), the programs outside it after.
    return tuple(sorted(programs, key=lambda p: (-(p.runs_per_step or 0), -p.peak_bytes, p.module,
                                                 p.program_id or 0)))


def _wanted(only: Collection[str], name: str, label: str) -> bool:
    return not only or name in only or label in only


def memory_from_protos(protos: Sequence[ModuleProto], *, origin: str,
                       modules: Sequence[HloModule] = (), runs: Mapping[ProgramKey, float] | None = None,
                       backend: str = "", device_kind: str = "", only: Collection[str] = (),
                       describe: str = "all") -> MemoryReport:
    """The memory of each module proto (the first of each (name, program id) over the hosts).

    ``modules`` are the same programs already parsed (a trace's op-stats stage parses them); the
    others are read here from their ``HloModuleProto`` (:func:`~hlo_doctor.memory.hlo_fields.module_from_hlo_proto`;
    printed and parsed as text where it cannot be), where their buffers are described: ``describe`` ``all``, or ``step``
    (only the programs that ran in the steps, when ``runs`` says which: the others keep their figures
    and buffer names, without op, shape or line, and their HLO is not parsed). ``only`` (module
    names or ``name(id)`` labels) reads those programs alone. A module whose assignment cannot be
    read is kept with its error.
    """
    parsed = {(m.name, m.program_id): m for m in modules}
    seen: set[ProgramKey] = set()
    programs: list[ProgramMemory] = []
    missing: list[str] = []
    warnings: list[str] = []
    for proto in protos:
        key = (proto.name, proto.program_id)
        if key in seen:
            continue
        seen.add(key)
        label = f"{proto.name}({proto.program_id})" if proto.program_id is not None else proto.name
        if not _wanted(only, proto.name, label):
            continue
        try:
            assignment = assignment_from_hlo_proto(proto.hlo_proto, origin=label)
        except InputError as exc:
            programs.append(failed_program(proto.name, proto.program_id, exc.what, host=proto.host))
            warnings.append(f"{label}: buffer assignment not read ({exc.what})")
            continue
        if assignment is None:
            missing.append(label)
            continue
        module = parsed.get(key)
        rps = _runs(runs, proto.name, proto.program_id)
        p = None
        if module is None and (describe == "all" or runs is None or rps):
            # The fields a buffer's description needs, read from the proto; printed and parsed as
            # text only where the proto holds a shape the reader here cannot write as the text does.
            from_proto = module_from_hlo_proto(proto.hlo_proto, program_id=proto.program_id)
            try:
                p = None if from_proto is None else program_memory(
                    assignment, from_proto, name=proto.name, program_id=proto.program_id, host=proto.host,
                    runs_per_step=rps)
            except UnwritableShape:
                p = None
            if p is None:
                module = _parsed(proto, label, warnings)
        if p is None:
            p = program_memory(assignment, module, name=proto.name, program_id=proto.program_id,
                               host=proto.host, runs_per_step=rps)
        if p.error:
            warnings.append(f"{label}: {p.error}")
        programs.append(p)
    ordered = _ordered(programs)
    return MemoryReport(origin, ordered, backend, device_kind, None, tuple(missing), tuple(warnings),
                        kv_cache=kv_cache(ordered))


def _parsed(proto: ModuleProto, label: str, warnings: list[str]) -> HloModule | None:
    """The module printed by XLA and parsed; None (and a warning) where it cannot be."""
    try:
        text = print_modules([(proto.hlo_proto, label, proto.host, proto.path)])[0]
        if isinstance(text, InputError):
            raise text
        return parse_module(text, origin=label)
    except PrinterCrash:
        raise
    except (InputError, ValueError) as exc:
        warnings.append(f"{label}: HLO not parsed ({exc}); buffers are named without shapes or lines")
        return None


def read_memory(path: str | Path, *, runs: Mapping[ProgramKey, float] | None = None,
                modules: Sequence[HloModule] = (), only: Collection[str] = (), describe: str = "all") -> MemoryReport:
    """The memory of every program of a capture: a run directory, a log directory or an ``.xplane.pb``.

    Reads only the metadata plane of each host file. ``runs`` (:func:`runs_per_step`) says which
    programs ran in the capture's steps; ``only`` and ``describe`` (:func:`memory_from_protos`) read
    fewer programs or describe fewer buffers (what a view shows). Raises :class:`InputError` for a
    trace JSON (no buffer assignments) and for a path holding no xplane, and, with ``only``, when
    no program is named so.
    """
    from hlo_doctor.trace.read import read_module_protos

    p = Path(path)
    if p.is_file() and is_trace_json(p):
        raise InputError(f"{p}: {NO_ASSIGNMENTS}", "run 'hlo-doctor memory' on the run directory or .xplane.pb")
    xplanes = find_xplanes(p)
    protos: list[ModuleProto] = []
    for x in xplanes:
        protos.extend(read_module_protos(x))
    report = memory_from_protos(protos, origin=str(p), modules=modules, runs=runs, only=only, describe=describe)
    if only and not report.programs and not report.missing:
        known = ", ".join(sorted({x.name for x in protos})[:8])
        raise InputError(f"{p}: no program named {', '.join(sorted(only))}", f"name one of: {known}")
    if not report.programs and not report.missing:
        raise InputError(f"{p}: the trace's metadata plane holds no HLO modules",
                         "capture with jax.profiler (the xplane keeps each program's HLO and buffer assignment)")
    kind, size, source = device_memory(xplanes)
    return replace(report, backend=report.backend or ("cpu" if not kind else "gpu" if "tpu" not in kind.lower()
                                                      else "tpu"),
                   device_kind=kind, device_memory_bytes=size, device_memory_source=source)


def memory_of_compiled(compiled: Any, *, name: str = "") -> ProgramMemory:
    """The memory of a compiled jax program (``jax.jit(f).lower(...).compile()``), read from the
    buffer assignment XLA gives with ``memory_analysis()``; no run needed."""
    stats = compiled.memory_analysis()
    data = getattr(stats, "serialized_buffer_assignment_proto", None)
    module = parse_module(compiled.as_text(), origin=name or "compiled")
    names: dict[int, str] = {}
    try:
        hlo_modules = compiled.runtime_executable().hlo_modules()
        names = instruction_names(hlo_modules[0].as_serialized_hlo_module_proto())
    except (AttributeError, IndexError, RuntimeError):
        pass  # the heap events still name their instructions; arguments stay unnamed
    if not data:
        raise InputError(f"{name or module.name}: this jaxlib gives no buffer assignment with memory_analysis()",
                         "install jaxlib 0.4.36 or later")
    assignment = assignment_from_bytes(bytes(data), names, module_name=module.name, origin=name or module.name)
    return program_memory(assignment, module, name=name or module.name)
