"""Whole stacks in machine formats (JSON, SARIF 2.1.0 ``stacks``) and package-relative lines for people,
on the bundled engine's capture (its HLO holds jax's stack-frame tables)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from hlo_doctor.core.format import fmt_path
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.hlo.frames import framework_of
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.lint.runner import Diagnosis
from hlo_doctor.render.diagnosis import to_json, to_markdown, to_sarif, to_terminal, to_text

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "sample_traces" / "engine_b64_original_a"
SCHEMA = Path(__file__).resolve().parent / "sarif-schema-2.1.0.json"
BOOK = load_rulebook()


@pytest.fixture(scope="module")
def engine() -> Diagnosis:
    return diagnose(load_context(ENGINE), BOOK)


def _validate(log: dict) -> None:  # type: ignore[type-arg]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)


def test_json_has_every_frame_innermost_first(engine: Diagnosis) -> None:
    doc = json.loads(to_json(engine))
    hd004 = next(f for f in doc["findings"] if f["code"] == "HD004")
    stack = hd004["stack"]
    # The file as jax recorded it where the capture was made (an absolute path of that checkout).
    assert stack[0]["file"].endswith("/hlo_doctor/engine/sampling.py")
    assert (stack[0]["line"], stack[0]["function"]) == (105, "sample")
    # Out to the entry point: the engine's warm-up, this tool's capture and CLI, click, the script.
    functions = [fr["function"] for fr in stack]
    assert "capture_run" in functions and functions.index("sample") < functions.index("capture_run")
    assert hd004["source"] == f"{stack[0]['file']}:{stack[0]['line']}"
    # The copy XLA inserted has no line and no stack (never another op's).
    hd002 = next(f for f in doc["findings"] if f["code"] == "HD002")
    assert hd002["source"] == "" and hd002["stack"] == []


def test_sarif_stacks_validate_and_mark_frameworks(engine: Diagnosis) -> None:
    log = json.loads(to_sarif(engine, BOOK, source_root=REPO))
    _validate(log)
    results = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    frames = results["HD004"]["stacks"][0]["frames"]
    finding = next(f for f in engine.findings if f.code == "HD004")
    assert len(frames) == len(finding.stack)
    first = frames[0]
    assert first["location"]["physicalLocation"]["artifactLocation"]["uri"] == "hlo_doctor/engine/sampling.py"
    assert first["location"]["physicalLocation"]["region"]["startLine"] == 105
    assert first["location"]["logicalLocations"] == [{"name": "sample", "kind": "function"}]
    assert first["module"] == "hlo_doctor.engine.sampling" and "framework" not in first["properties"]
    marked = {fr["properties"].get("framework") for fr in frames}
    assert {"hlo_doctor.cli", "click", "python"} <= marked
    assert "stacks" not in results["HD002"]  # no stack to give


def test_sarif_frame_outside_the_checkout_is_named_not_linked(engine: Diagnosis, tmp_path: Path) -> None:
    log = json.loads(to_sarif(engine, BOOK, source_root=tmp_path))
    _validate(log)
    frames = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "HD004")["stacks"][0]["frames"]
    assert all("physicalLocation" not in fr["location"] for fr in frames)
    assert frames[0]["location"]["message"]["text"] == "hlo_doctor/engine/sampling.py:105"


SITE = "/usr/local/lib/python3.12/site-packages"


def _library_finding() -> Finding:
    """A finding whose line is in a model library installed on another machine, called through keras."""
    stack = ((f"{SITE}/keras/src/backend/jax/nn.py", 120, "softmax"),
             (f"{SITE}/keras_hub/src/samplers/sampler.py", 180, "compute_probabilities"),
             ("/home/me/serve.py", 12, "main"))
    return Finding(code="HD001", name="convert.widening-before-argmax", severity=Severity.MEDIUM, message="m",
                   module="jit_generate", op="fusion.1", source=f"{stack[1][0]}:{stack[1][1]}", stack=stack)


def test_people_see_paths_relative_to_the_package_root(engine: Diagnosis, tmp_path: Path) -> None:
    f = _library_finding()
    assert framework_of(f.stack[0][0]) == "keras" and framework_of(f.stack[1][0]) == ""
    d = replace(engine, findings=(f,))
    where = "keras_hub/src/samplers/sampler.py:180"
    assert to_text(d, "concise", source_root=tmp_path).startswith(f"{where}: HD001")
    assert f"`{where}`" in to_markdown(d)
    console = Console(width=200, record=True)
    console.print(to_terminal(d))
    shown = console.export_text()
    assert where in shown and "sampler.py:180" not in shown.replace(where, "")
    # GitHub annotations link files of the checkout only.
    assert "file=" not in to_text(d, "github", source_root=tmp_path)
    assert fmt_path("/home/me/serve.py") == "/home/me/serve.py"  # outside the working folder: as given
