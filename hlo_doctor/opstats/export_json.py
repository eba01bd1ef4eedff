"""Op stats as the JSON export holds them, and ``RunInfo`` as a dict: the codec that the loader
(:mod:`hlo_doctor.opstats.io`) and the Parquet export (:mod:`hlo_doctor.opstats.parquet`) share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.format import json_safe
from hlo_doctor.core.lazy import pd
from hlo_doctor.core.model import RunInfo
from hlo_doctor.opstats.breakdown import StepBreakdown, breakdown_from_dict
from hlo_doctor.opstats.schema import (
    COLUMNS,
    JSON_SCHEMA,
    PER_STEP_COLUMNS,
    OpStats,
    program_id_or_none,
    table_from_rows,
)
from hlo_doctor.opstats.step_times import float_list
from hlo_doctor.opstats.validate import check_export, check_opstats
from hlo_doctor.trace import CompileEvent
from hlo_doctor.trace.peaks import DevicePeaks


def run_info_to_dict(run: RunInfo) -> dict[str, Any]:
    """``RunInfo`` as the plain dict written to run.json / opstats.json."""
    d = asdict(run)
    d["versions"] = dict(run.versions)
    d["config"] = dict(run.config)
    return d


def run_info_from_dict(d: dict[str, Any]) -> RunInfo:
    """Read a ``RunInfo`` back from :func:`run_info_to_dict`'s dict (unknown keys ignored)."""
    return RunInfo(
        target=str(d.get("target", "")), backend=str(d.get("backend", "")),
        device_kind=str(d.get("device_kind", "")), steps=int(d.get("steps", 0) or 0),
        warmup=int(d.get("warmup", 0) or 0), created=str(d.get("created", "")),
        versions=tuple(sorted((str(k), str(v)) for k, v in dict(d.get("versions", {})).items())),
        config=tuple(sorted((str(k), v) for k, v in dict(d.get("config", {})).items())),
    )


def to_json(stats: OpStats, *, per_step: bool = True, compact: bool = False,
            compiles: Mapping[str, Any] | None = None) -> str:
    """The whole OpStats as JSON (everything but the parsed modules), for gate and for people.

    ``per_step``: with what the export holds per step (each step's wall time, each op's time in
    each step, the breakdown's slice of each device and step): the bulk of a long capture's export,
    and what the gate's statistics and the breakdown's rules read back. Without it the export is the
    table and the summaries, its size set by the ops, not the steps. ``compact``: on one line.
    ``compiles``: the compile counts the table's header prints (``compiles`` beside the raw
    ``compile_events``; counted by the layer that sorts compiles, :mod:`hlo_doctor.lint.compiles`).
    """
    rows = [{k: json_safe(v) for k, v in rec.items()} for rec in stats.records()]
    breakdown = json_safe(stats.breakdown.to_dict(steps=per_step)) if stats.breakdown is not None else None
    doc = {
        "schema": JSON_SCHEMA,
        "source_path": stats.source_path,
        **({"capture": list(stats.capture)} if stats.capture else {}),
        "backend": stats.backend,
        "device_kind": stats.device_kind,
        "step_source": stats.step_source,
        "num_steps": stats.num_steps,
        "num_devices": stats.num_devices,
        "step_time_us": stats.step_time_us,
        **({"step_times_us": float_list(stats.step_times_us)} if per_step else {}),
        "pct_of_step_definition": "time_per_step_us / mean step wall time x 100; op times may overlap "
                                  "(XLA:CPU runs independent ops concurrently), so the column may sum "
                                  "to more than 100",
        "peaks": asdict(stats.peaks) if stats.peaks is not None else None,
        "breakdown": breakdown,
        "columns": [asdict(c) for c in COLUMNS],
        "rows": rows,
        **({"compiles": json_safe(dict(compiles))} if compiles is not None else {}),
        "compile_events": [asdict(c) for c in stats.compile_events],
        "modules": [{"name": m.name, "program_id": m.program_id} for m in stats.modules],
        "run": run_info_to_dict(stats.run) if stats.run is not None else None,
        "versions": dict(stats.versions),
        "warnings": list(stats.warnings),
        "hosts_left_out": [{"path": path, "reason": why} for path, why in stats.hosts_left_out],
        "per_step_written": per_step,
    }
    if per_step:
        doc["per_step"] = {
            "columns": list(PER_STEP_COLUMNS),
            "rows": [[json_safe(v) for v in rec] for rec in stats.per_step.itertuples(index=False)],
        }
    if compact:
        return json.dumps(doc, separators=(",", ":")) + "\n"
    return json.dumps(doc, indent=1) + "\n"


def from_json(text: str, *, origin: str = "opstats.json") -> OpStats:
    """Read an OpStats back from :func:`to_json`'s output (``modules`` is empty)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: not JSON ({exc.msg} at line {exc.lineno})",
                         "pass an opstats.json written by hlo-doctor") from exc
    except RecursionError:
        # Nesting deeper than the interpreter's stack: no export this tool writes is nested so.
        raise InputError(f"{origin}: JSON nested too deeply", "pass an opstats.json written by hlo-doctor") from None
    # Exports written before every JSON output carried ``schema`` tag themselves with ``format``.
    if not isinstance(doc, dict) or JSON_SCHEMA not in (doc.get("schema"), doc.get("format")):
        raise InputError(f"{origin}: not an hlo-doctor opstats export (schema != {JSON_SCHEMA})",
                         "pass an opstats.json written by 'hlo-doctor profile' or 'stats'")
    check_export(doc, origin)
    try:
        return check_opstats(_from_doc(doc, origin), origin)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # A hand-edited or foreign export (a null in an integer column, a missing field) is bad
        # input, not a bug: name the file and the field.
        raise InputError(f"{origin}: malformed opstats export ({type(exc).__name__}: {exc})",
                         "re-export it with 'hlo-doctor stats RUN --format json'") from exc


def _from_doc(doc: dict[str, Any], origin: str) -> OpStats:
    rows = doc.get("rows", [])
    num_steps = max(int(doc.get("num_steps", 0) or 0), 1)
    for row in rows:
        if "runs_per_step" not in row:
            # An export from before the column: the same definition from the columns it has.
            row["runs_per_step"] = float(row["occurrences"]) / num_steps / max(int(row.get("devices") or 1), 1)
    table = table_from_rows(rows)
    ps = doc.get("per_step", {})
    per_step = pd.DataFrame(ps.get("rows", []), columns=list(PER_STEP_COLUMNS))
    per_step = per_step.astype({"step": "int64", "module": "string", "op": "string",
                                "canonical_key": "string", "time_us": "float64"})
    # From the JSON rows themselves: the frame's own column may have gone through float64.
    pid_at = PER_STEP_COLUMNS.index("program_id")
    per_step["program_id"] = pd.Series([program_id_or_none(r[pid_at]) for r in ps.get("rows", [])],
                                       dtype=object, index=per_step.index)
    run = run_info_from_dict(doc["run"]) if doc.get("run") else None
    return OpStats(
        table_data=table, step_time_us=float(doc.get("step_time_us", 0.0)),
        step_times_us=tuple(float(t) for t in doc.get("step_times_us", [])),
        num_steps=int(doc.get("num_steps", 0)), step_source=str(doc.get("step_source", "")),
        per_step_data=per_step, modules=(),
        compile_events=tuple(CompileEvent(**c) for c in doc.get("compile_events", [])),
        backend=str(doc.get("backend", "")), run=run, source_path=str(doc.get("source_path", origin)),
        device_kind=str(doc.get("device_kind", "")), warnings=tuple(doc.get("warnings", [])),
        versions=tuple(sorted(dict(doc.get("versions", {})).items())),
        num_devices=int(doc.get("num_devices", 0) or 0), peaks=_peaks(doc.get("peaks")),
        breakdown=_breakdown(doc.get("breakdown")),
        hosts_left_out=tuple((str(h["path"]), str(h["reason"])) for h in doc.get("hosts_left_out") or []),
        capture=tuple(str(c) for c in doc.get("capture") or () if isinstance(c, str)),
    )


def _breakdown(value: Any) -> StepBreakdown | None:
    """The breakdown of an export; None before it existed, and without its per-step slices (an export
    written without ``per_step``: its summary alone is no breakdown to read back)."""
    if not isinstance(value, dict) or "steps" not in value:
        return None
    return breakdown_from_dict(value)


def _peaks(value: Any) -> DevicePeaks | None:
    """The ``peaks`` object of an export (null, or absent before the roofline columns)."""
    if not isinstance(value, dict):
        return None
    tflops, gbps = value.get("tflops"), value.get("hbm_gbps")
    for rate in (tflops, gbps):
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0):
            raise ValueError(f"peaks: {value!r} is not a pair of positive rates")
    return DevicePeaks(None if tflops is None else float(tflops), None if gbps is None else float(gbps),
                       str(value.get("source", "")))
