"""The five kinds of page, each built from the JSON documents hlo-doctor writes:

- a capture (``opstats`` JSON, the diagnosis of it when there is one, and its programs' memory when
  it holds buffer assignments);
- a capture's memory (``memory --format json``);
- a diagnosis (``diagnose --format json``; with its capture's op stats when they are at hand);
- a verify report (``verify.json`` of ``verify --out``);
- a doctor folder (``doctor.json`` with the folder's ``diagnose.json``, ``profile/opstats.json`` and
  ``verify.json``);
- a gate verdict (``gate --format json``).

Pages are built from the documents, not from the in-memory results, so a page and the JSON beside it
always say the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hlo_doctor.core.format import fmt_us
from hlo_doctor.render.html.gate import gate_sections
from hlo_doctor.render.html.memory import memory_section
from hlo_doctor.render.html.model import Note, Page, Section
from hlo_doctor.render.html.ops import ops_section
from hlo_doctor.render.html.step import step_section
from hlo_doctor.render.html.verify import verify_sections

__all__ = ["capture_page", "diagnosis_page", "doctor_page", "gate_page", "memory_page", "verify_page"]

Doc = Mapping[str, Any]


def _capture_facts(stats: Doc | None, diagnosis: Doc | None) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    if stats is not None:
        facts += [("capture", str(stats.get("source_path", ""))),
                  ("backend", f"{stats.get('backend', '')} ({stats.get('device_kind', '')})"),
                  ("steps", f"{stats.get('num_steps')} from {stats.get('step_source', '')}"),
                  ("mean step wall time", fmt_us(stats.get("step_time_us"))),
                  ("devices", str(stats.get("num_devices", ""))), ("ops", str(len(stats.get("rows") or [])))]
        facts += [("warning", str(w)) for w in stats.get("warnings") or []]
    if diagnosis is not None:
        if stats is None:
            facts += [("input", str(diagnosis.get("input", ""))), ("backend", str(diagnosis.get("backend", ""))),
                      ("mean step wall time", fmt_us(diagnosis.get("step_time_us")))]
        facts.append(("rules run", ", ".join(diagnosis.get("rules_run") or [])))
        skipped = "; ".join(f"{s.get('code')} ({s.get('reason')})" for s in diagnosis.get("rules_skipped") or []
                            if isinstance(s, Mapping))
        if skipped:
            facts.append(("rules skipped", skipped))
    return facts


def _diagnosis_verdict(diagnosis: Doc | None) -> tuple[str, str]:
    if diagnosis is None:
        return "", ""
    return str(diagnosis.get("summary", "")), ("warn" if diagnosis.get("findings") else "pass")


def capture_page(stats: Doc, diagnosis: Doc | None = None, memory: Doc | None = None) -> Page:
    """A capture: where the step goes, the top ops (with findings), the op table, and the programs'
    device memory when the capture holds their buffer assignments."""
    verdict, tone = _diagnosis_verdict(diagnosis)
    sections: tuple[Section, ...] = (step_section(stats), ops_section(stats, diagnosis))
    if memory is not None:
        sections += (memory_section(memory),)
    return Page("capture", f"hlo-doctor: {stats.get('source_path', 'capture')}", verdict, tone,
                tuple(_capture_facts(stats, diagnosis)), sections)


def memory_page(doc: Doc) -> Page:
    """A capture's memory (``memory --format json``): each program's peak, the step's heaps and the
    buffers at their peaks."""
    programs = doc.get("programs") or []
    ran = [p for p in programs if isinstance(p, Mapping) and p.get("runs_per_step")]
    facts = [("capture", str(doc.get("origin", ""))), ("backend", str(doc.get("backend", ""))),
             ("programs", f"{len(programs)} ({len(ran)} ran in the steps)")]
    return Page("memory", f"hlo-doctor memory: {doc.get('origin', '')}", "", "", tuple(facts),
                (memory_section(doc),))


def diagnosis_page(diagnosis: Doc, stats: Doc | None = None, why_no_stats: str = "") -> Page:
    """A diagnosis: its findings over the top ops when its capture's op stats are at hand."""
    verdict, tone = _diagnosis_verdict(diagnosis)
    sections: list[Section] = []
    if stats is not None:
        sections.append(step_section(stats))
    ops = ops_section(stats, diagnosis)
    if stats is None and why_no_stats:
        ops = Section(ops.id, ops.title, ops.items, (*ops.missing, f"the step charts: {why_no_stats}"))
    sections.append(ops)
    return Page("diagnosis", f"hlo-doctor diagnose: {diagnosis.get('input', '')}", verdict, tone,
                tuple(_capture_facts(stats, diagnosis)), tuple(sections))


def _verify_facts(doc: Doc) -> list[tuple[str, str]]:
    settings = doc.get("settings") or {}
    facts = [("baseline", str((doc.get("baseline") or {}).get("source", doc.get("baseline", ""))
                              if isinstance(doc.get("baseline"), Mapping) else doc.get("baseline", ""))),
             ("treatment", str((doc.get("treatment") or {}).get("source", "")
                               if isinstance(doc.get("treatment"), Mapping) else doc.get("treatment", "")))]
    for key in ("fix", "variant", "rounds", "batch", "max_tokens", "vocab", "min_effect"):
        if settings.get(key) is not None:
            facts.append((key.replace("_", " "), str(settings[key])))
    if doc.get("backend"):
        facts.append(("backend", str(doc["backend"])))
    return facts


def _verify_verdict(doc: Doc) -> tuple[str, str]:
    passed = bool(doc.get("passed"))
    why = str(doc.get("verdict", "")).removeprefix("FAIL: ")
    return f"verify: {'PASS' if passed else 'FAIL'} ({why})", "pass" if passed else "fail"


def verify_page(doc: Doc) -> Page:
    """A verify report: the two distributions, the ratios, the removed ops, the checks."""
    verdict, tone = _verify_verdict(doc)
    return Page("verify", "hlo-doctor verify", verdict, tone, tuple(_verify_facts(doc)), verify_sections(doc))


def doctor_page(doctor: Doc, diagnosis: Doc | None, stats: Doc | None, verify: Doc | None,
                missing: tuple[str, ...] = ()) -> Page:
    """A doctor folder: what was found (the capture), what the fix changed, what verify measured."""
    exit_code = doctor.get("exit_code")
    tone = "pass" if exit_code == 0 else "fail"
    sections: list[Section] = []
    if stats is not None:
        sections.append(step_section(stats))
    sections.append(ops_section(stats, diagnosis))
    notes: list[Note] = []
    if doctor.get("fix"):
        notes.append(Note(f"fix applied to a copy: {doctor.get('fix')} "
                          f"(treatment tree: {doctor.get('treatment_engine')}); the diff is fix.diff"))
    else:
        notes.append(Note("no bundled fix applies to what was found: nothing was verified"))
    stages = doctor.get("stage_seconds") or {}
    if stages:
        notes.append(Note("stages: " + ", ".join(f"{k} {float(v):.0f} s" for k, v in stages.items())))
    sections.append(Section("fix", "What the fix changed", tuple(notes)))
    if verify is not None:
        sections.extend(verify_sections(verify))
    if missing:
        first = sections[0]
        sections[0] = Section(first.id, first.title, first.items, (*missing, *first.missing))
    facts = [("engine", str(doctor.get("engine", ""))), ("profile run", str(doctor.get("profile_run", "")))]
    facts += [(k, v) for k, v in _capture_facts(stats, diagnosis) if k in ("backend", "steps", "mean step wall time")]
    return Page("doctor", "hlo-doctor doctor", f"doctor: {doctor.get('verdict', '')}", tone, tuple(facts),
                tuple(sections))


def gate_page(doc: Doc) -> Page:
    """A gate verdict: the step, the violations, per-op change in its bands, new and gone ops."""
    verdict = str(doc.get("verdict", ""))
    tone = {"pass": "pass", "regression": "fail"}.get(verdict, "warn")
    summary = doc.get("summary") or {}
    policy = doc.get("policy") or {}
    facts = [("baseline", str((doc.get("baseline") or {}).get("label", ""))),
             ("candidate", str((doc.get("candidate") or {}).get("label", ""))),
             ("ops", f"{summary.get('matched', 0)} matched, {summary.get('new', 0)} new, "
                     f"{summary.get('vanished', 0)} gone; {summary.get('violations', 0)} violation(s)"),
             ("policy", f"op +{policy.get('max_op_regression_pct')}%, step +{policy.get('max_step_regression_pct')}%, "
                        f"noise_z {policy.get('noise_z')} ({policy.get('source', '')})")]
    headline = {"pass": "PASS", "regression": "FAIL: regression", "inconclusive": "INCONCLUSIVE"}.get(verdict, verdict)
    return Page("gate", "hlo-doctor gate", f"gate: {headline}", tone, tuple(facts), gate_sections(doc))
