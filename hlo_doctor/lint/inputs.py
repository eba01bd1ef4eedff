"""Reading an input into a :class:`~hlo_doctor.lint.context.Context`.

Accepted: a run directory written by ``profile`` or any folder holding an ``.xplane.pb``; a bare
``.xplane.pb``; a trace JSON (``.trace.json.gz``, ``perfetto_trace.json.gz``); a folder with
``opstats.json`` and ``*.hlo.txt`` modules (sample traces); an ``--xla_dump_to`` folder
(``*after_optimizations.txt``; no times); one HLO text file; a rule's :class:`~hlo_doctor.lint.rule.Example`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.regular import read_regular_bytes
from hlo_doctor.hlo import HloModule, parse_modules
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.dispatch import read_host_dispatch
from hlo_doctor.lint.rule import Example
from hlo_doctor.trace import CompileEvent, find_xplanes
from hlo_doctor.trace.host_threads import host_dispatch_json
from hlo_doctor.trace.locate import CaptureLocation, display_path, locate_capture
from hlo_doctor.trace.trace_json import is_trace_json

if TYPE_CHECKING:
    import pandas as pd

    from hlo_doctor.memory import MemoryReport
    from hlo_doctor.opstats import OpStats
    from hlo_doctor.trace import HostDispatch

_PROGRAM_ID_IN_NAME = re.compile(r"\((\d+)\)")
_HLO_TEXT_SUFFIXES = (".hlo.txt", "after_optimizations.txt", ".hlo")


class CaptureReader(Protocol):
    """Reads a capture's op stats and host dispatch spans; by default one process reads every host
    file (``hlo_doctor.hosts.CaptureReader`` spreads them over workers)."""

    def opstats(self, path: Path) -> OpStats:
        """The op stats of a run directory, log directory or xplane."""
        ...

    def host_dispatch(self, path: Path) -> tuple[HostDispatch, ...]:
        """Dispatch spans per program of the same capture."""
        ...


def load_context(path: Path, *, source_root: Path | None = None, reader: CaptureReader | None = None) -> Context:
    """Read an input into a :class:`Context`; :class:`InputError` (one line) when it is unusable.

    Accepted: a run directory written by ``profile`` or any folder holding an ``.xplane.pb``; a bare
    ``.xplane.pb``; a trace JSON (no HLO modules: rules that read them are skipped); a folder with
    ``opstats.json`` and ``*.hlo.txt`` modules (sample traces); an ``--xla_dump_to`` folder
    (``*after_optimizations.txt``; no times); one HLO text file. ``reader`` reads the captures
    (run directories, xplanes).
    """
    path = Path(path)
    if source_root is not None and not Path(source_root).is_dir():
        raise InputError(f"--source {source_root} is not a folder", "pass the root of the source tree")
    if not path.exists():
        raise InputError(f"{path} does not exist",
                         "pass a run directory, an .xplane.pb, an XLA dump folder or an HLO text file")
    from hlo_doctor.lint.trace_capture import prime
    from hlo_doctor.trace.read import observing_traces

    # The op intervals the host-time estimates need are kept from the op-stats stage's read of the
    # capture (lint.trace_capture), not read from the files a second time.
    with observing_traces(prime):
        if path.is_file():
            return replace(_from_file(path, source_root, reader), capture=(display_path(path),))
        where = locate_capture(path)  # a doctor/verify folder: its baseline; several captures: refused
        ctx = _from_folder(where, source_root, reader)
    return replace(ctx, capture=where.read_files(), capture_via=where.via)


def _from_file(path: Path, source_root: Path | None, reader: CaptureReader | None) -> Context:
    if path.name.endswith(".xplane.pb"):
        return _from_opstats_loader(path, "xplane", source_root, reader)
    if is_trace_json(path):
        return _from_opstats_loader(path, "trace-json", source_root)
    if path.suffix == ".json":
        return _from_opstats_json(path.parent, source_root, path)
    return _from_hlo_files([path], path, "hlo", source_root)


def _from_folder(where: CaptureLocation, source_root: Path | None, reader: CaptureReader | None) -> Context:
    folder = where.path
    if where.kind == "export":
        return _from_opstats_json(folder, source_root)
    if where.kind == "run":
        return _from_opstats_loader(folder, "run", source_root, reader)
    dumps = [p for p in where.files if p.name.endswith("after_optimizations.txt")]
    if dumps:
        return _from_hlo_files(dumps, folder, "xla-dump", source_root)
    return _from_hlo_files(list(where.files), folder, "hlo", source_root)


def _read_text(path: Path) -> str:
    try:
        return read_regular_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file", "pass optimized HLO text or an .xplane.pb") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", "check the path and permissions") from exc


def _read_hlo_file(path: Path) -> list[HloModule]:
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{path}: empty file", "pass optimized HLO text (compiled.as_text())")
    modules = parse_modules(text, origin=str(path))
    if not modules:
        raise InputError(f"{path}: no 'HloModule' header", "pass optimized HLO text (compiled.as_text())")
    m = _PROGRAM_ID_IN_NAME.search(path.name)
    if m and len(modules) == 1:
        modules = [_with_program_id(modules[0], int(m.group(1)))]
    return modules


def _with_program_id(module: HloModule, program_id: int | None) -> HloModule:
    # replace() keeps every other field (is_scheduled, header attributes): the stage reads them.
    return replace(module, program_id=program_id)


def _from_hlo_files(files: list[Path], origin: Path, kind: str, source_root: Path | None) -> Context:
    modules: list[HloModule] = []
    for f in files:
        modules.extend(_read_hlo_file(f))
    return Context(modules=tuple(modules), origin=str(origin), kind=kind, source_root=source_root)


def _from_opstats_json(folder: Path, source_root: Path | None, export: Path | None = None) -> Context:
    """A folder with an ``opstats.json`` export and the run's modules as ``*.hlo.txt`` files.

    A module file may carry its program id in its name (``jit_sample(12).hlo.txt``); otherwise the
    id is taken from the table when the module name has exactly one.
    """
    from hlo_doctor.opstats import load_opstats

    stats = load_opstats(export or folder / "opstats.json")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_HLO_TEXT_SUFFIXES))
    modules: list[HloModule] = []
    for f in files:
        modules.extend(_read_hlo_file(f))
    modules = [_program_id_from_table(m, stats.table) for m in modules]
    return _context_from_stats(stats, tuple(modules), folder, "opstats", source_root)


def executed_modules(modules: Sequence[HloModule], table: pd.DataFrame | None) -> tuple[HloModule, ...]:
    """The modules that ran in the traced window (have op-stats rows).

    A trace's metadata plane also keeps modules compiled before the window (set-up, warm-up,
    initialisation); rules look only at what ran. When no module matches the table at all (names
    spelled differently), all are kept.
    """
    if table is None or not len(table):
        return tuple(modules)
    pairs = {(str(m), None if _isna(p) else int(p)) for m, p in zip(table["module"], table["program_id"],
                                                                          strict=False)}
    names = {m for m, _ in pairs}
    kept = tuple(m for m in modules
                 if (m.name, m.program_id) in pairs or (m.name in names and
                                                        (m.program_id is None or (m.name, None) in pairs)))
    return kept if kept else tuple(modules)


def _isna(v: Any) -> bool:
    try:
        return bool(v is None or v != v or str(v) == "<NA>")
    except (TypeError, ValueError):
        return False


def _context_from_stats(stats: Any, modules: tuple[HloModule, ...], origin: Path, kind: str,
                        source_root: Path | None) -> Context:
    from hlo_doctor.opstats.step_times import StepTimes  # (here: importing opstats loads pandas)

    return Context(
        modules=executed_modules(modules, stats.table), table=stats.table, step_time_us=float(stats.step_time_us or 0) or None,
        step_times_us=StepTimes(getattr(stats, "step_times_us", ()) or ()),
        num_steps=int(stats.num_steps or 0),
        compile_events=tuple(_compile_event(e) for e in stats.compile_events or ()),
        breakdown=getattr(stats, "breakdown", None), per_step_data=getattr(stats, "per_step_data", None),
        source_root=source_root, backend=str(stats.backend or ""), origin=str(origin), kind=kind,
        device_kind=str(getattr(stats, "device_kind", "") or ""),
        versions=tuple((str(k), str(v)) for k, v in dict(getattr(stats, "versions", ()) or ()).items()),
    )


def _program_id_from_table(module: HloModule, table: pd.DataFrame) -> HloModule:
    if module.program_id is not None or not len(table):
        return module
    ids = table.loc[table["module"] == module.name, "program_id"].dropna().unique()
    return _with_program_id(module, int(ids[0])) if len(ids) == 1 else module


def _compile_event(e: Any) -> CompileEvent:
    if isinstance(e, CompileEvent):
        return e
    if isinstance(e, dict):
        # The fields that say where the event ran and what it built pass through as they are.
        more = {k: e[k] for k in ("thread", "function", "frames", "program_id", "step") if k in e}
        return CompileEvent(str(e.get("name", "")), float(e.get("start_us", 0) or 0),
                            float(e.get("duration_us", 0) or 0), str(e.get("module", "") or ""),
                            str(e.get("detail", "") or ""), **more)
    return CompileEvent(str(getattr(e, "name", "")), float(getattr(e, "start_us", 0) or 0),
                        float(getattr(e, "duration_us", 0) or 0), str(getattr(e, "module", "") or ""),
                        str(getattr(e, "detail", "") or ""))


def table_from_records(records: Sequence[Any], *, origin: str = "") -> pd.DataFrame:
    """The op-stats table from row dicts, with every column of the spec (missing ones filled).

    Columns: those of :data:`hlo_doctor.opstats.COLUMNS`, in that order.
    """
    import pandas as pd

    from hlo_doctor.opstats import COLUMNS

    if not all(isinstance(r, dict) for r in records):
        raise InputError(f"{origin or 'op stats'}: rows must be objects", "re-create it with 'hlo-doctor profile'")
    df = pd.DataFrame(list(records))
    for col in ("module", "op"):
        if len(df) and col not in df:
            raise InputError(f"{origin or 'op stats'}: rows lack the '{col}' column",
                             "re-create it with 'hlo-doctor profile'")
    defaults = {"int64": 0, "Int64": pd.NA, "float64": math.nan, "string": ""}
    for c in COLUMNS:
        if c.name not in df:
            df[c.name] = defaults.get(c.dtype, pd.NA)
    df = df[[c.name for c in COLUMNS] + [c for c in df.columns if c not in {x.name for x in COLUMNS}]]
    for c in COLUMNS:
        try:
            df[c.name] = df[c.name].astype(c.dtype)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{origin or 'op stats'}: column '{c.name}' is not {c.dtype} ({exc})",
                             "re-create it with 'hlo-doctor profile'") from exc
    return df


def _from_opstats_loader(path: Path, kind: str, source_root: Path | None,
                         reader: CaptureReader | None = None) -> Context:
    """Run directories, xplanes and trace JSON go through the op-stats stage (modules come from the
    trace; a trace JSON has none)."""
    from hlo_doctor.opstats import load_opstats

    stats = reader.opstats(path) if reader is not None and kind != "trace-json" else load_opstats(path)
    ctx = _context_from_stats(stats, tuple(stats.modules), path, kind, source_root)
    if kind == "trace-json":
        return replace(ctx, host_dispatch=host_dispatch_json([path]))
    dispatch = reader.host_dispatch(path) if reader is not None else read_host_dispatch(find_xplanes(path))
    return replace(ctx, host_dispatch=dispatch, memory=_memory(path, stats))


def _memory(path: Path, stats: OpStats) -> MemoryReport | None:
    """The capture's buffer assignments (its metadata planes read again: the op-stats stage keeps
    the modules it parsed, not their protos); None when it holds none."""
    from hlo_doctor.memory import read_memory, runs_per_step

    try:
        report = read_memory(path, runs=runs_per_step(stats.table, int(stats.num_steps or 0)),
                             modules=stats.modules)
    except InputError:
        return None
    return replace(report, backend=str(stats.backend or ""), device_kind=str(stats.device_kind or ""))


def context_from_example(example: Example, *, source_root: Path | None = None) -> Context:
    """The :class:`Context` a rule example describes (used by the generated tests and ``rules explain``)."""
    modules: list[HloModule] = []
    for text in example.hlo:
        modules.extend(parse_modules(text, origin="example"))
    table = table_from_records([dict(r) for r in example.opstats], origin="example") if example.opstats else None
    if table is not None:
        modules = [_program_id_from_table(m, table) for m in modules]
    return Context(
        modules=tuple(modules), table=table, step_time_us=example.step_time_us, num_steps=example.num_steps,
        compile_events=tuple(_compile_event(dict(e)) for e in example.compile_events),
        breakdown=_breakdown(example.breakdown), memory=_example_memory(example.memory),
        source_root=source_root, origin="example", kind="example",
    )


def _example_memory(doc: Any) -> Any:
    """A rule example's memory (its JSON form) as a :class:`~hlo_doctor.memory.MemoryReport`."""
    from hlo_doctor.memory import MemoryReport

    return MemoryReport.from_dict(dict(doc)) if doc else None


def _breakdown(doc: Any) -> Any:
    """A rule example's step breakdown (its JSON form) as a :class:`~hlo_doctor.opstats.breakdown.StepBreakdown`."""
    from hlo_doctor.opstats.breakdown import breakdown_from_dict

    return breakdown_from_dict(doc) if doc else None
