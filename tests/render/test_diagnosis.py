"""Renderers: JSON, Markdown, SARIF 2.1.0 and the rich terminal report, on the seed fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from hlo_doctor.core.format import fmt_pct, fmt_us, split_source
from hlo_doctor.lint import Context, diagnose, load_context, load_rulebook
from hlo_doctor.render.diagnosis import to_json as render_json
from hlo_doctor.render.diagnosis import to_markdown as render_markdown
from hlo_doctor.render.diagnosis import to_sarif as render_sarif
from hlo_doctor.render.diagnosis import to_terminal as render_terminal
from hlo_doctor.render.diagnosis import to_text as render_text
from hlo_doctor.render.locations import map_source

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
    assert doc["schema"] == "hlo-doctor.diagnosis/1"
    assert doc["step_time_us"] == 26500.0 and round(doc["recoverable_us"]) == 3142
    assert [f["op"] for f in doc["findings"]][:3] == ["copy.2", "convert_element_type.1", "fusion.3"]
    assert doc["findings"][0]["extra"]["parameter"] == 1


def test_markdown(seed, empty) -> None:  # type: ignore[no-untyped-def]
    md = render_markdown(seed)
    assert md.startswith("## hlo-doctor diagnose")
    assert f"**{seed.summary_line()}**" in md and "~3.1 ms of ~26.5 ms per step (~12%) is recoverable" in md
    table = [ln for ln in md.splitlines() if ln.startswith("| HD")]
    assert len(table) == len(seed.findings) >= 3
    copy = next(f for f in seed.findings if f.code == "HD002")
    assert f"| HD002 | high | jit_sample | `copy.2` | `{copy.shape}` | 1,562 us | 5.9% | 1,562 us |" in md
    assert "hlo-doctor apply-fix bf16-greedy-sampler" in md
    assert "**no findings**" in render_markdown(empty)


SCHEMA = Path(__file__).resolve().parent / "sarif-schema-2.1.0.json"


def _validate(log: dict) -> None:  # type: ignore[type-arg]
    """Against the official SARIF 2.1.0 schema (OASIS, vendored next to this file)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator(schema).validate(log)


def _checkout(tmp_path: Path) -> Path:
    """A checkout that holds the library the seed trace's sources come from."""
    (tmp_path / ".git").mkdir(parents=True)
    for rel in ("tpu_inference/layers/jax/sample/sampling.py", "tpu_inference/runner/tpu_runner.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# stand-in\n")
    return tmp_path


def test_sarif_structure(seed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = _checkout(tmp_path)
    log = json.loads(render_sarif(seed, BOOK, source_root=root, exit_code=1, command_line="hlo-doctor diagnose x"))
    _validate(log)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    # Every rule of the book, not only those that fired, each with help and a link to its docs.
    assert [r["id"] for r in rules] == [r.code for r in sorted(BOOK.rules, key=lambda r: r.code)]
    assert all(r["shortDescription"]["text"] and r["help"]["text"] and r["help"]["markdown"] for r in rules)
    assert rules[1]["helpUri"].endswith("docs/rules.md#hd002-copyaliasing-input")
    assert run["invocations"] == [{"executionSuccessful": True, "exitCode": 1, "commandLine": "hlo-doctor diagnose x"}]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == root.resolve().as_uri() + "/"
    assert len(run["results"]) == len(seed.findings)
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note")
        assert res["message"]["text"]
        loc = res["locations"][0]
        assert loc["logicalLocations"][0]["fullyQualifiedName"].startswith("jit_")
        assert len(res["partialFingerprints"]["hloDoctorFinding/v2"]) == 32
        if "source" not in res.get("properties", {}):
            assert "physicalLocation" not in loc
            continue
        art = loc["physicalLocation"]["artifactLocation"]
        assert art["uriBaseId"] == "SRCROOT" and not art["uri"].startswith(("/", "file:"))
        assert loc["physicalLocation"]["region"]["startLine"] >= 1
    sampled = [r for r in run["results"] if r.get("properties", {}).get("source", "").endswith("sampling.py:125")]
    assert sampled
    # Captured in /usr/local/lib/python3.12/site-packages: mapped onto the checkout by its trailing part.
    for res in sampled:
        assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
            "tpu_inference/layers/jax/sample/sampling.py"
    copy = next(r for r in run["results"] if r["ruleId"] == "HD002")
    assert copy["level"] == "error" and copy["properties"]["time_per_step_us"] == 1562.0


def test_sarif_outside_the_checkout(seed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A source found nowhere under the root: a logical location, no file URI; same fingerprints."""
    log = json.loads(render_sarif(seed, BOOK, source_root=tmp_path))
    _validate(log)
    inside = json.loads(render_sarif(seed, BOOK, source_root=_checkout(tmp_path / "co")))
    for res, res_inside in zip(log["runs"][0]["results"], inside["runs"][0]["results"], strict=True):
        loc = res["locations"][0]
        assert "physicalLocation" not in loc
        assert res["partialFingerprints"] == res_inside["partialFingerprints"]
        if "source" in res.get("properties", {}):
            assert [x["kind"] for x in loc["logicalLocations"]] == ["function", "module"]
            assert loc["logicalLocations"][1]["fullyQualifiedName"].startswith("/usr/local/lib/python3.12/")
    assert "file://" not in json.dumps(log["runs"][0]["results"])


def test_map_source(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    assert map_source(str(tmp_path / "pkg" / "mod.py"), tmp_path) == "pkg/mod.py"
    assert map_source("/elsewhere/site-packages/pkg/mod.py", tmp_path) == "pkg/mod.py"
    assert map_source("/elsewhere/mod.py", tmp_path) is None  # one part alone could be any file
    assert map_source("rel/x.py", tmp_path) == "rel/x.py"


def test_sarif_without_findings(empty) -> None:  # type: ignore[no-untyped-def]
    log = json.loads(render_text(empty, "sarif", BOOK))
    _validate(log)
    assert log["runs"][0]["results"] == [] and len(log["runs"][0]["tool"]["driver"]["rules"]) == len(BOOK.rules)


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
