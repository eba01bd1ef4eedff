"""SARIF 2.1.0 report, for code-scanning tools (GitHub code scanning and others).

A finding with a source line (from the HLO metadata, or the file a source rule read) gets a physical
location; every finding gets a logical location ``module/op``. Levels: error for ERROR and HIGH,
warning for MEDIUM, note for LOW and INFO.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor import __version__
from hlo_doctor.core.format import split_source
from hlo_doctor.core.model import Finding, Severity

if TYPE_CHECKING:
    from hlo_doctor.diagnose import Diagnosis
    from hlo_doctor.rulebook import RuleBook

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/hlo-doctor/hlo-doctor"


def sarif_level(severity: Severity) -> str:
    if severity >= Severity.HIGH:
        return "error"
    if severity >= Severity.MEDIUM:
        return "warning"
    return "note"


def _artifact_uri(path: str, base: Path) -> str:
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            return p.as_uri()
    return p.as_posix()


def _rule_descriptor(code: str, findings: list[Finding], rulebook: RuleBook | None) -> dict[str, Any]:
    loaded = rulebook.get(code) if rulebook is not None else None
    first = findings[0]
    desc: dict[str, Any] = {"id": code, "name": first.name,
                            "defaultConfiguration": {"level": sarif_level(first.severity)}}
    if loaded is not None:
        sections = loaded.rule.doc_sections()
        desc["shortDescription"] = {"text": loaded.rule.summary()}
        desc["fullDescription"] = {"text": sections.get("What it flags", loaded.rule.summary())}
        desc["help"] = {"text": "\n\n".join(f"{k}:\n{v}" for k, v in sections.items())}
        desc["defaultConfiguration"] = {"level": sarif_level(loaded.rule.severity)}
    else:
        desc["shortDescription"] = {"text": first.name}
    return desc


def _result(f: Finding, rule_index: int, base: Path) -> dict[str, Any]:
    res: dict[str, Any] = {
        "ruleId": f.code, "ruleIndex": rule_index, "level": sarif_level(f.severity),
        "message": {"text": f.message},
    }
    path, line = split_source(f.source)
    if path:
        phys: dict[str, Any] = {"artifactLocation": {"uri": _artifact_uri(path, base)}}
        if line:
            phys["region"] = {"startLine": line}
        res["locations"] = [{"physicalLocation": phys}]
    if f.module or f.op:
        res.setdefault("locations", [{}])[0]["logicalLocations"] = [
            {"name": f.op or f.module, "fullyQualifiedName": "/".join(x for x in (f.module, f.op) if x),
             "kind": "function"}]
    key = f"{f.code}|{f.module}|{f.op}|{f.shape}|{f.source}"
    res["partialFingerprints"] = {"hloDoctorFinding/v1": hashlib.sha256(key.encode()).hexdigest()[:32]}
    props = {k: v for k, v in (
        ("shape", f.shape), ("program_id", f.program_id), ("time_per_step_us", f.time_per_step_us),
        ("pct_of_step", f.pct_of_step), ("bytes_accessed", f.bytes_accessed),
        ("recoverable_us", f.recoverable_us), ("fix", f.fix), ("evidence", list(f.evidence)),
    ) if v not in (None, "", [])}
    if props:
        res["properties"] = props
    return res


def to_sarif(diagnosis: Diagnosis, rulebook: RuleBook | None = None, *, base: Path | None = None) -> str:
    """A SARIF 2.1.0 log with one run; paths under ``base`` (default: the working folder) are relative."""
    base = (base or Path.cwd()).resolve()
    by_code: dict[str, list[Finding]] = {}
    for f in diagnosis.findings:
        by_code.setdefault(f.code, []).append(f)
    codes = sorted(by_code)
    rules = [_rule_descriptor(c, by_code[c], rulebook) for c in codes]
    index = {c: i for i, c in enumerate(codes)}
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "hlo-doctor", "version": __version__, "semanticVersion": __version__,
                                "informationUri": INFORMATION_URI, "rules": rules}},
            "results": [_result(f, index[f.code], base) for f in diagnosis.findings],
            "properties": {"summary": diagnosis.summary_line(), "step_time_us": diagnosis.step_time_us,
                           "recoverable_us": diagnosis.recoverable_us, "input": diagnosis.origin},
        }],
    }
    return json.dumps(log, indent=1) + "\n"
