"""Renderers: JSON, Markdown, SARIF 2.1.0 and the rich terminal report, on the seed fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from hlo_doctor.core.format import fmt_pct, fmt_us, split_source
from hlo_doctor.diagnose import Context, diagnose, load_context
from hlo_doctor.render.diagnosis import to_json as render_json
from hlo_doctor.render.diagnosis import to_markdown as render_markdown
from hlo_doctor.render.diagnosis import to_sarif as render_sarif
from hlo_doctor.render.diagnosis import to_terminal as render_terminal
from hlo_doctor.render.diagnosis import to_text as render_text
from hlo_doctor.rulebook import load_rulebook

SEED = Path(__file__).resolve().parents[2] / "sample_traces" / "seed_v5e_b512"
BOOK = load_rulebook()


@pytest.fixture(scope="module")
def seed():  # type: ignore[no-untyped-def]
    return diagnose(load_context(SEED), BOOK)


@pytest.fixture(scope="module")
def empty():  # type: ignore[no-untyped-def]
    return diagnose(Context(origin="nothing", kind="hlo"), BOOK)


def test_json(seed) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(render_json(seed))
    assert doc["format"] == "hlo-doctor.diagnosis/1"
    assert doc["step_time_us"] == 26500.0 and round(doc["recoverable_us"]) == 3142
    assert [f["op"] for f in doc["findings"]][:3] == ["copy.2", "convert_element_type.1", "fusion.3"]
    assert doc["findings"][0]["extra"]["parameter"] == 1


def test_markdown(seed, empty) -> None:  # type: ignore[no-untyped-def]
    md = render_markdown(seed)
    assert md.startswith("## hlo-doctor diagnose")
    assert "**4 findings: ~3.1 ms of ~26.5 ms per step (~12%) is recoverable**" in md
    table = [ln for ln in md.splitlines() if ln.startswith("| HD")]
    assert len(table) == 4
    assert "| HD002 | high | jit_sample | `copy.2` | `f32[512,256000]{1,0}` | 1,562 us | 5.9% | 1,562 us |" in md
    assert "hlo-doctor apply-fix bf16-greedy-sampler" in md
    assert "**no findings**" in render_markdown(empty)


def test_sarif_structure(seed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = json.loads(render_sarif(seed, BOOK, base=Path("/usr/local/lib/python3.12/site-packages")))
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["HD001", "HD002", "HD003", "HD004"]
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in rules)
    assert len(run["results"]) == 4
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note")
        assert res["message"]["text"]
        loc = res["locations"][0]
        phys = loc["physicalLocation"]
        assert not phys["artifactLocation"]["uri"].startswith("/")
        assert phys["region"]["startLine"] >= 1
        assert loc["logicalLocations"][0]["fullyQualifiedName"].startswith("jit_")
        assert len(res["partialFingerprints"]["hloDoctorFinding/v1"]) == 32
    copy = next(r for r in run["results"] if r["ruleId"] == "HD002")
    assert copy["level"] == "error"
    assert copy["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "tpu_inference/layers/jax/sample/sampling.py"
    assert copy["properties"]["time_per_step_us"] == 1562.0
    # Outside the base folder: an absolute file URI.
    log2 = json.loads(render_sarif(seed, BOOK, base=tmp_path))
    uri = log2["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.startswith("file:///")


def test_sarif_without_findings(empty) -> None:  # type: ignore[no-untyped-def]
    log = json.loads(render_text(empty, "sarif", BOOK))
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


@pytest.mark.parametrize("width", [60, 200])
def test_terminal(seed, empty, width: int) -> None:  # type: ignore[no-untyped-def]
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_terminal(seed))
    text = console.export_text()
    for needle in ("HD002", "copy.2", "convert_element_type.1", "fusion.3", "bf16-greedy-sampler",
                   "recoverable"):
        assert needle in text
    console.print(render_terminal(empty))
    assert "no findings" in console.export_text()


def test_formatters() -> None:
    assert fmt_us(None) == "-" and fmt_us(1562) == "1,562 us" and fmt_us(26500) == "26.5 ms"
    assert fmt_us(2.5) == "2.5 us" and fmt_us(0) == "0 us"
    assert fmt_pct(None) == "-" and fmt_pct(5.894) == "5.9%"
    assert split_source("a/b.py:12") == ("a/b.py", 12) and split_source("b.py") == ("b.py", None)
    with pytest.raises(ValueError):
        render_text(empty_diag(), "xml")


def empty_diag():  # type: ignore[no-untyped-def]
    return diagnose(Context(), BOOK)
