"""SARIF 2.1.0 report, for code scanning (GitHub code scanning and other SARIF viewers).

Locations. A finding's source (``file:line`` from the HLO metadata, or the file a source rule read) is
written relative to a source root (``--source-root``; the repository root by default) with
``uriBaseId`` ``SRCROOT``, so that a viewer maps it onto its own checkout. A path captured on another
machine (``/usr/local/lib/python3.12/site-packages/pkg/mod.py``) is mapped by its longest trailing part
that exists under the root (``pkg/mod.py``); a source found nowhere under the root gets a logical
location (its path as a name) rather than a file URI that points nowhere. Every finding also has the
logical location ``module/op``. The op's whole Python stack (``Finding.stack``) is the result's one
``stacks`` entry, innermost frame first as SARIF orders frames: each frame a location (a file URI
under the root where the checkout has the file, else its path relative to its package root as the
location's message), the function as its logical location, the dotted module, and ``framework``
in its properties where the frame is a framework's internals (:mod:`hlo_doctor.hlo.frames`).

Fingerprints hash rule + module + op + shape: the same waste keeps its alert across machines, paths
and program ids. ``tool.driver.rules`` lists every rule of the rule book, with ``helpUri`` into
docs/rules.md and its help text. Levels: error for ERROR and HIGH, warning for MEDIUM, note for LOW and
INFO.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from hlo_doctor import __version__
from hlo_doctor.core.format import fmt_path, recoverable_sum, split_source
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo.frames import framework_of, module_of
from hlo_doctor.render.locations import map_source

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis, RuleBook

__all__ = ["INFORMATION_URI", "RULES_DOC_URI", "SARIF_SCHEMA", "SOURCE_ROOT_ID", "rule_help_uri",
           "sarif_level", "to_sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/hlo-doctor/hlo-doctor"
RULES_DOC_URI = f"{INFORMATION_URI}/blob/main/docs/rules.md"
SOURCE_ROOT_ID = "SRCROOT"
FINGERPRINT = "hloDoctorFinding/v2"


def sarif_level(severity: Severity) -> str:
    """The SARIF level of a severity."""
    if severity >= Severity.HIGH:
        return "error"
    if severity >= Severity.MEDIUM:
        return "warning"
    return "note"


def rule_help_uri(code: str, name: str) -> str:
    """The rule's section of docs/rules.md (GitHub's heading anchor of ``### HD002 `copy.aliasing-input```)."""
    anchor = re.sub(r"[^a-z0-9 -]", "", f"{code} {name}".lower()).replace(" ", "-")
    return f"{RULES_DOC_URI}#{anchor}"


def _rule_descriptor(code: str, name: str, severity: Severity, rulebook: RuleBook | None) -> dict[str, Any]:
    loaded = rulebook.get(code) if rulebook is not None else None
    desc: dict[str, Any] = {"id": code, "name": name, "helpUri": rule_help_uri(code, name)}
    if loaded is None:
        desc["shortDescription"] = {"text": name}
        desc["help"] = {"text": f"{code} {name}: see {desc['helpUri']}"}
        desc["defaultConfiguration"] = {"level": sarif_level(severity)}
        return desc
    rule = loaded.rule
    sections = rule.doc_sections()
    desc["shortDescription"] = {"text": rule.summary()}
    desc["fullDescription"] = {"text": sections.get("What it flags", rule.summary())}
    desc["help"] = {
        "text": "\n\n".join(f"{k}:\n{v}" for k, v in sections.items()) or rule.summary(),
        "markdown": "\n\n".join(f"**{k}**\n\n{v}" for k, v in sections.items()) or rule.summary(),
    }
    desc["defaultConfiguration"] = {"level": sarif_level(rule.severity)}
    props: dict[str, Any] = {"tags": list(rule.requires)}
    if rule.fix:
        props["fix"] = rule.fix
    desc["properties"] = props
    return desc


def fingerprint(f: Finding) -> str:
    """Stable across machines: the rule, the module, the op and its shape (no path, no program id)."""
    key = f"{f.code}|{f.module}|{f.op}|{f.shape}"
    if not (f.module or f.op or f.shape):
        key += f"|{PurePosixPath(split_source(f.source)[0]).name}|{f.message}"  # source rules: file + what
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _result(f: Finding, rule_index: int, root: Path) -> dict[str, Any]:
    res: dict[str, Any] = {
        "ruleId": f.code, "ruleIndex": rule_index, "level": sarif_level(f.severity),
        "message": {"text": f.message + (f" (recoverable {recoverable_sum(f)})" if f.parts else "")
                    + (f" Remedy: {f.remedy}" if f.remedy else "")},
    }
    location: dict[str, Any] = {}
    logical: list[dict[str, Any]] = []
    path, line = split_source(f.source)
    relative = map_source(path, root) if path else None
    if relative is not None:
        phys: dict[str, Any] = {"artifactLocation": {"uri": relative, "uriBaseId": SOURCE_ROOT_ID}}
        if line:
            phys["region"] = {"startLine": line}
        location["physicalLocation"] = phys
    elif path:
        # Not in this checkout (a library installed on the capture machine): named, not linked.
        logical.append({"name": PurePosixPath(path).name, "fullyQualifiedName": f.source, "kind": "module"})
    if f.module or f.op:
        logical.insert(0, {"name": f.op or f.module, "fullyQualifiedName": "/".join(x for x in (f.module, f.op) if x),
                           "kind": "function"})
    if logical:
        location["logicalLocations"] = logical
    if location:
        res["locations"] = [location]
    if f.stack:
        res["stacks"] = [_stack(f, root)]
    res["partialFingerprints"] = {FINGERPRINT: fingerprint(f)}
    props = {k: v for k, v in (
        ("shape", f.shape), ("program_id", f.program_id), ("time_per_step_us", f.time_per_step_us),
        ("pct_of_step", f.pct_of_step), ("bytes_accessed", f.bytes_accessed),
        ("recoverable_us", f.recoverable_us), ("recoverable_parts_us", dict(f.parts)),
        ("recoverable", recoverable_sum(f) if f.parts else ""), ("fix", f.fix), ("remedy", f.remedy), ("source", f.source), ("evidence", list(f.evidence)),
    ) if v not in (None, "", [], {})}
    if props:
        res["properties"] = props
    return res


def _stack(f: Finding, root: Path) -> dict[str, Any]:
    """The op's Python stack as one SARIF ``stack`` (frames innermost first)."""
    frames = []
    for file, line, function in f.stack:
        location: dict[str, Any] = {}
        relative = map_source(file, root) if file else None
        if relative is not None:
            phys: dict[str, Any] = {"artifactLocation": {"uri": relative, "uriBaseId": SOURCE_ROOT_ID}}
            if line >= 1:
                phys["region"] = {"startLine": line}
            location["physicalLocation"] = phys
        elif file:
            location["message"] = {"text": f"{fmt_path(file)}:{line}" if line else fmt_path(file)}
        if function:
            location["logicalLocations"] = [{"name": function, "kind": "function"}]
        frame: dict[str, Any] = {"location": location}
        module = module_of(file) if file else ""
        if module:
            frame["module"] = module
        props: dict[str, Any] = {"file": file, "line": line}
        framework = framework_of(file)
        if framework:
            props["framework"] = framework
        frame["properties"] = props
        frames.append(frame)
    return {"message": {"text": "Python stack of the op when it was traced, innermost frame first"},
            "frames": frames}


def to_sarif(diagnosis: Diagnosis, rulebook: RuleBook | None = None, *, source_root: Path | None = None,
             exit_code: int = 0, command_line: str = "") -> str:
    """A SARIF 2.1.0 log with one run.

    ``source_root`` (default: the working folder) is what locations are relative to; ``exit_code`` and
    ``command_line`` describe the invocation.
    """
    root = (source_root or Path.cwd()).resolve()
    described: dict[str, tuple[str, Severity]] = {}
    for loaded in rulebook.rules if rulebook is not None else ():
        described[loaded.code] = (loaded.rule.name, loaded.rule.severity)
    for f in diagnosis.findings:
        described.setdefault(f.code, (f.name, f.severity))
    codes = sorted(described)
    index = {c: i for i, c in enumerate(codes)}
    invocation: dict[str, Any] = {"executionSuccessful": exit_code in (0, 1), "exitCode": exit_code}
    if command_line:
        invocation["commandLine"] = command_line
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "hlo-doctor", "version": __version__, "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule_descriptor(c, *described[c], rulebook) for c in codes],
            }},
            "invocations": [invocation],
            "originalUriBaseIds": {SOURCE_ROOT_ID: {"uri": root.as_uri() + "/"}},
            "results": [_result(f, index[f.code], root) for f in diagnosis.findings],
            "properties": {"summary": diagnosis.summary_line(), "step_time_us": diagnosis.step_time_us,
                           "recoverable_us": diagnosis.recoverable_us, "input": diagnosis.origin},
        }],
    }
    return json.dumps(log, indent=1) + "\n"
