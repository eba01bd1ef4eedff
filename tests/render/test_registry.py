"""The one renderer registry: every (subject, format) the commands offer, each the subject's own renderer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Group

from hlo_doctor.gate import gate, resolve_policy
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.opstats import load_opstats
from hlo_doctor.render import diagnosis as diagnosis_renderers
from hlo_doctor.render import gate as gate_renderers
from hlo_doctor.render.registry import DIAGNOSIS, GATE, SUBJECTS, RenderOptions, formats

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_every_subject_and_the_formats_its_command_offers() -> None:
    assert {s: formats(s) for s in SUBJECTS} == {
        "diagnosis": ("table", "concise", "github", "json", "md", "sarif"),
        "gate": ("table", "github", "json", "md", "junit", "html"),
        "verify": ("table", "json", "md"),
        "verify-target": ("table", "json", "md"),
        "verify-program": ("table", "json", "md", "junit"),
        "doctor": ("table", "json", "md"),
    }
    with pytest.raises(ValueError, match="unknown subject 'stats'"):
        formats("stats")


def test_diagnosis_formats_are_the_diagnosis_renderers(tmp_path: Path) -> None:
    book = load_rulebook()
    result = diagnose(load_context(SAMPLES / "seed_v5e_b512"), book)
    options = RenderOptions(source_root=tmp_path, rulebook=book, exit_code=1, command_line="hlo-doctor diagnose x")
    for fmt in DIAGNOSIS.names[1:]:
        assert DIAGNOSIS.text(fmt, result, options) == diagnosis_renderers.to_text(
            result, fmt, book, source_root=tmp_path, exit_code=1, command_line="hlo-doctor diagnose x"), fmt
    assert isinstance(DIAGNOSIS.render("table", result), Group)
    with pytest.raises(TypeError, match="terminal view"):
        DIAGNOSIS.text("table", result)
    with pytest.raises(ValueError, match="unknown format 'junit' for a diagnosis"):
        DIAGNOSIS.render("junit", result)


def test_gate_formats_are_the_gate_renderers(tmp_path: Path) -> None:
    result = gate(load_opstats(SAMPLES / "engine_b64_fixed"), load_opstats(SAMPLES / "engine_b64_original_a"),
                  resolve_policy(None, {}, cwd=tmp_path))
    options = RenderOptions(source_root=tmp_path, rows=3)
    assert GATE.text("table", result, options) == gate_renderers.to_text(result, max_rows=3)
    assert GATE.text("github", result, options) == gate_renderers.to_github(result, source_root=tmp_path)
    assert GATE.text("md", result, options) == gate_renderers.to_markdown(result)
    assert GATE.text("json", result, options) == gate_renderers.to_json(result)
    assert json.loads(GATE.text("json", result))["verdict"] == "regression"
    # JUnit carries the time it was written: same suites and failures, not the same bytes.
    assert GATE.text("junit", result, options).count("<failure") == gate_renderers.to_junit(
        result, source_root=tmp_path).count("<failure") > 0
