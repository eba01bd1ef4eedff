"""The JSON documents ``report`` reads, checked by kind before a page is built from them.

A document is an artifact from elsewhere (a diagnosis from another machine, a verdict attached to a
pull request): every field a page reads must have the type the writer gives it, numbers finite and
non-negative where they are times. A wrong one is an input error naming the file, the kind of document
and the field (``findings[0].time_per_step_us: 'fast' is not a number``), never an exception in a page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlo_doctor.core.errors import InputError

__all__ = ["check_document"]

# Field -> expected: "text", "int", "bool", "time" (a finite number >= 0), "number" (finite), "object",
# "list" (any items), or a dict: a list of objects whose fields are checked. A trailing "?" allows null.
# Fields a document may lack (older releases) are only checked when present.
_FINDING = {"code": "text", "name": "text?", "severity": "text?", "message": "text?", "module": "text?",
            "op": "text?", "shape": "text?", "time_per_step_us": "time?", "pct_of_step": "time?",
            "recoverable_us": "time?", "bytes_accessed": "time?", "source": "text?", "evidence": "list?",
            "fix": "text?", "remedy": "text?", "extra": "object?", "stack": "list?"}
_SPECS: dict[str, dict[str, Any]] = {
    "diagnosis": {"input": "text?", "backend": "text?", "step_time_us": "time?", "num_steps": "int?",
                  "recoverable_us": "time?", "recoverable_pct": "time?", "summary": "text?", "rules_run": "list?",
                  "rules_skipped": {"code": "text", "reason": "text?"}, "modules": "list?", "compiles": "list?",
                  "fixes": {"fix": "text", "findings": "int?", "recoverable_us": "number?"}, "findings": _FINDING},
    "gate": {"verdict": "text", "exit_code": "int?", "strict": "bool?", "baseline": "object", "candidate": "object",
             "policy": "object?", "step": "object?", "summary": "object?", "speed": "object?",
             "capture_noise": "number?", "violations": "list?", "within_noise": "list?", "notes": "list?",
             "ops": {"key": "text", "module": "text?", "opcode": "text?", "shape": "text?", "ops": "text?",
                     "status": "text?", "baseline_us": "time?", "candidate_us": "time?", "source": "text?",
                     "judgement": "text?", "delta_us": "number?", "comparison": "object?"}},
    "verify": {"passed": "bool?", "verdict": "text?", "checks": {"number": "int", "name": "text", "passed": "bool",
                                                                  "figure": "text?", "detail": "text?"},
               "throughput": "object?", "step_time": "object?", "removed_ops": {"code": "text?", "op": "text?",
                                                                              "module": "text?", "shape": "text?",
                                                                              "time_per_step_us": "time?",
                                                                              "status": "text?"},
               "baseline": "object?", "treatment": "object?", "settings": "object?", "notes": "list?",
               "elapsed_s": "time?"},
}
_SPECS["memory"] = {"origin": "text?", "backend": "text?", "device_memory_bytes": "int?", "warnings": "list?",
                    "programs": {"module": "text", "program_id": "int?", "peak_bytes": "int", "heap_peak_bytes": "int?",
                                 "argument_bytes": "int?", "output_bytes": "int?", "alias_bytes": "int?",
                                 "temporary_bytes": "int?", "peak_position": "int?", "peak_instruction": "text?",
                                 "runs_per_step": "number?", "heap": "list?", "heap_instructions": "list?",
                                 "buffers_at_peak": {"size_bytes": "int", "category": "text?", "instruction": "text?",
                                                     "shape": "text?", "source": "text?"}}}
_SPECS["verify-target"] = {k: v for k, v in _SPECS["verify"].items() if k in ("passed", "verdict", "notes")}


def _type_error(origin: str, kind: str, where: str, value: Any, want: str) -> InputError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return InputError(f"{origin}: a {kind} JSON whose {where} is {shown}, not {want}",
                      f"pass a {kind} JSON as hlo-doctor writes it (regenerate it)")


def _check(value: Any, want: Any, where: str, origin: str, kind: str) -> None:
    if isinstance(want, dict):
        if not isinstance(value, list):
            raise _type_error(origin, kind, where, value, "a list of objects")
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise _type_error(origin, kind, f"{where}[{i}]", item, "an object")
            for key, sub in want.items():
                if key in item:
                    _check(item[key], sub, f"{where}[{i}].{key}", origin, kind)
        return
    base, nullable = want.rstrip("?"), want.endswith("?")
    if value is None:
        if not nullable:
            raise _type_error(origin, kind, where, value, f"a {base}")
        return
    ok = {
        "text": isinstance(value, str),
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "object": isinstance(value, Mapping),
        "list": isinstance(value, list),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
        "time": isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and value >= 0,
    }[base]
    if not ok:
        what = {"time": "a finite number >= 0", "int": "a whole number >= 0", "number": "a finite number",
                "text": "text", "bool": "true or false", "object": "an object", "list": "a list"}[base]
        raise _type_error(origin, kind, where, value, what)


def check_document(doc: Mapping[str, Any], kind: str, origin: str) -> None:
    """Check the fields of ``doc`` (an hlo-doctor JSON of ``kind``) that a page reads.

    Raises:
        InputError: naming ``origin``, the kind and the first field of the wrong type or value.
    """
    for key, want in _SPECS.get(kind, {}).items():
        if key in doc:
            _check(doc[key], want, key, origin, kind)
        elif isinstance(want, str) and not want.endswith("?"):
            raise InputError(f"{origin}: a {kind} JSON without '{key}'",
                             f"pass a {kind} JSON as hlo-doctor writes it (regenerate it)")
