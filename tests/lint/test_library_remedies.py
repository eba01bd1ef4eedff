"""Remedies by library (hlo_doctor.lint.remedies): which finding gets which library's own setting.

The stacks are real: recorded by ``benchmarks/field/remedy_frames.py`` from ``hlo-doctor diagnose``
of captures of the field loops (keras-hub 0.32.0, transformers 4.57.6 Flax, recurrentgemma 1.0.1,
XLA:CPU; ``data/field_stacks.json``). What each should get was read from the libraries' code by
hand (docs/field.md, "Remedies by library"), not from the table under test.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from rich.console import Console

from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.lint.remedies import LIBRARY_REMEDIES, library_remedy, with_library_remedy
from hlo_doctor.lint.runner import Diagnosis
from hlo_doctor.render.diagnosis import to_json, to_markdown, to_sarif, to_terminal
from hlo_doctor.render.diagnosis.lines import to_concise, to_github
from hlo_doctor.render.html.document import to_html
from hlo_doctor.render.html.model import Page, Section
from hlo_doctor.render.html.ops import findings_table

DATA = json.loads((Path(__file__).resolve().parent / "data" / "field_stacks.json").read_text())["findings"]

# (capture, code, op) -> (library, kind, a word of the remedy) or None: no library remedy.
EXPECTED = {
    ("kh-gemma-v32k-s32", "HD011", "ynn_fusion.1"): ("keras-hub", "code", "GreedySampler subclass"),
    ("kh-gemma-v32k-s32", "HD013", "bitcast_concatenate_fusion"): ("keras-hub", "code", "ops.slice_update"),
    ("kh-gemma-v32k-s32", "HD014", "copy_bitcast_fusion"): None,  # compiler-inserted: no stack
    ("kh-gemma-eager-v32k-s32", "HD005", ""): ("keras-hub", "setting", "run_eagerly=False"),
    ("tf-gpt2-jit", "HD014", "transpose_copy_fusion.4"): ("transformers", "code", "FlaxConv1D"),
    ("tf-gpt2-jit", "HD012", "ynn_fusion"): ("transformers", "code", "hidden_states[:, -1:]"),
    ("tf-gpt2-eager", "HD005", ""): ("transformers", "setting", "jax.jit"),
    ("tf-gpt2-eager", "HD014", "broadcast_multiply_fusion"): ("transformers", "setting", "init_cache"),
    ("tf-gpt2-eager", "HD009", "copy.61"): None,  # no entry for HD009
    ("tf-gpt2-eager", "HD016", "select_dynamic-update-slice_fusion"): None,
    ("rg-v32k-bf16", "HD014", "wrapped_copy.7"): ("recurrentgemma", "setting", "param_dtype=jnp.float32"),
    ("rg-v32k-bf16", "HD014", "wrapped_convert.23"): ("recurrentgemma", "setting", "param_dtype=jnp.float32"),
    ("rg-v32k-bf16", "HD011", "iota_reduce_fusion"): ("recurrentgemma", "setting", "logits_soft_cap=None"),
    ("rg-v32k-bf16", "HD010", "copy.82"): None,
    ("kh-p768", "HD022", "broadcast_select_fusion"): ("keras-hub", "code", "_build_cache"),
    # The weight relayout XLA:CPU inserts in keras-hub's loop: no keras-hub setting was measured for it.
    ("kh-p768", "HD014", "copy_bitcast_fusion.4"): None,
}


def _finding(rec: dict) -> Finding:  # type: ignore[type-arg]
    stack = tuple((f, line, fn) for f, line, fn in rec["stack"])
    source = rec.get("source") or (f"{stack[0][0]}:{stack[0][1]}" if stack else "")
    return Finding(code=rec["code"], name="x", severity=Severity.HIGH, message="m", module=rec["module"],
                   op=rec["op"], source=source, stack=stack)


@pytest.mark.parametrize("key", sorted(EXPECTED, key=str))
def test_real_stacks_get_their_library_remedy(key: tuple[str, str, str]) -> None:
    recs = [r for r in DATA if (r["capture"], r["code"], r["op"]) == key]
    assert recs, f"{key} is not in the recorded stacks"
    want = EXPECTED[key]
    for rec in recs:
        got = with_library_remedy(_finding(rec)).remedy
        if want is None:
            assert got == ""
        else:
            library, kind, word = want
            assert got.startswith(f"{library} ({kind}): ") and word in got and "[what-if: " in got


def test_every_entry_is_reached_by_a_real_capture() -> None:
    shown = {with_library_remedy(_finding(r)).remedy for r in DATA}
    for entry in LIBRARY_REMEDIES:
        assert "%" in entry.measured and entry.kind in ("setting", "code")
        assert entry.text() in shown, f"no recorded finding reaches {entry.library} {entry.rules}"


def test_frameworks_and_own_code_get_none() -> None:
    # The line is in one's own file, or inside keras itself: no library's setting applies.
    assert library_remedy("HD011", (("model.py", 12, "step"),)) is None
    keras_only = (("/venv/lib/python3.11/site-packages/keras/src/ops/nn.py", 986, "softmax"),)
    assert library_remedy("HD011", keras_only) is None
    # A path from another machine (no site-packages folder) still names its library by its folders.
    other = (("/srv/pkgs/keras_hub/src/samplers/sampler.py", 139, "Sampler.compute_probabilities"),)
    got = library_remedy("HD011", other)
    assert got is not None and got.library == "keras-hub"


HOSTILE = "keras-hub (code): <script>x</script> | `a` *b*\n::error::c \x1b[31m"


def _diagnosis() -> Diagnosis:
    f = Finding(code="HD011", name="selection.monotone-map", severity=Severity.HIGH, message="softmax then argmax",
                module="m", op="ynn_fusion.1", source="keras_hub/src/samplers/sampler.py:139", remedy=HOSTILE)
    return Diagnosis(findings=(f,), step_time_us=None, recoverable_us=None, num_steps=0, origin="o", kind="hlo",
                     backend="cpu", rules_run=("HD011",))


def test_every_view_shows_the_remedy_escaped() -> None:
    d = _diagnosis()
    console = Console(record=True, width=400, color_system=None)
    console.print(to_terminal(d))
    term = console.export_text()
    assert "remedy: keras-hub (code): <script>x</script>" in term and "\x1b" not in term
    concise = to_concise(d)
    assert "[remedy: keras-hub (code)" in concise and len(concise.strip().splitlines()) == 2
    gh = to_github(d)
    assert "Remedy: keras-hub" in gh and "\n::error::c" not in gh
    assert json.loads(to_json(d))["findings"][0]["remedy"] == HOSTILE
    md = to_markdown(d)
    line = next(ln for ln in md.splitlines() if ln.startswith("Remedy: "))
    assert "\\<script\\>" in line and "\\|" in line and "\\*b\\*" in line and "\n" not in line
    sarif = json.loads(to_sarif(d, None))
    res = sarif["runs"][0]["results"][0]
    assert res["properties"]["remedy"] == HOSTILE and "Remedy: keras-hub" in res["message"]["text"]
    doc = json.loads(to_json(d))
    html = to_html(Page("diagnosis", "t", sections=(Section("f", "Findings", (findings_table(doc["findings"]),)),)),
                   charts=False)
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x</script>" not in html


def test_end_to_end_on_keras_hub(tmp_path: Path) -> None:
    """The keras-hub loop profiled and diagnosed: its softmax finding carries keras-hub's remedy."""
    if importlib.util.find_spec("keras_hub") is None:
        pytest.skip("keras-hub is not installed (the field venv has it: benchmarks/field/README.md)")
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "FIELD_VOCAB": "32000", "FIELD_SEQ": "32", "FIELD_PROMPT": "16", "KERAS_BACKEND": "jax"}
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "hlo_doctor.cli"]
    subprocess.run([*cli, "profile", str(repo / "benchmarks/field/kerashub_gemma.py:step"), "--steps", "1",
                    "--warmup", "1", "--out", str(run)], check=True, env=env, capture_output=True)
    out = subprocess.run([*cli, "diagnose", str(run), "--no-what-if", "--format", "json"], env=env,
                         capture_output=True, text=True)
    doc = json.loads(out.stdout)
    hd011 = [f for f in doc["findings"] if f["code"] == "HD011"]
    assert hd011 and all(f["remedy"].startswith("keras-hub (code): ") for f in hd011)
