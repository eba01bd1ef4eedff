"""``hlo-doctor verify FILE.py:FUNC``: real small JAX programs written in the test's folder, verified
against a fixed copy of their file (``--fix``) or another target (``--treatment``) on XLA:CPU.

The step-time verdict of sub-millisecond programs on a shared machine is whatever the load makes it;
these tests hold the checks that do not depend on it (compiles, outputs, findings) and that the exit
code follows every check.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.verify.program.outputs import Leaf, first_difference

SHAPES = "BATCH, HIDDEN, VOCAB = 8, 64, 1024\n"

# A decode-like step: a small model's bf16 logits widened eagerly before a jitted greedy sampler
# (HD003 and HD001 on the convert, HD004 on the argmax's read). Its shapes come from a neighbour file.
GREEDY = '''
import jax
import jax.numpy as jnp
import numpy as np

from shapes import BATCH, HIDDEN, VOCAB


@jax.jit
def forward(h, w):
    return (h @ w).astype(jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


RNG = np.random.default_rng(0)  # inputs from numpy: nothing to compile at import
H = jnp.asarray(RNG.standard_normal((BATCH, HIDDEN)), jnp.float32)
W = jnp.asarray(RNG.standard_normal((HIDDEN, VOCAB)), jnp.float32)


def step():
    logits = forward(H, W)
    logits = logits.astype(jnp.float32)
    return sample(logits)
'''

# keras-hub's greedy sampler in one function: argmax(softmax(logits / temperature)) (HD011).
SOFTMAX = '''
import jax
import jax.numpy as jnp
import numpy as np

LOGITS = jnp.asarray(np.random.default_rng(0).standard_normal((8, 1024)), jnp.bfloat16)
TEMPERATURE = jnp.float32(0.7)


@jax.jit
def sample(logits, temperature):
    probabilities = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    return jnp.argmax(probabilities, axis=-1)


def step():
    return sample(LOGITS, TEMPERATURE)
'''

# A decode loop over a cache it does not donate: XLA copies the cache before the loop (HD009).
DONATE = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.jit, static_argnames=("steps",))
def decode(cache, steps):
    def body(i, c):
        return jax.lax.dynamic_update_slice(c, c[i][None] * 0.5 + 1.0, ((i + 1) % 64, 0, 0))

    return jax.lax.fori_loop(0, steps, body, cache)


CACHE = jnp.asarray(np.random.default_rng(0).standard_normal((64, 4, 32)), jnp.float32)


def run(cache):
    cache = decode(cache, 4)
    return cache


def step():
    return run(CACHE + 0.0)
'''

# The softmax program's step with a different output from its 4th call on (round 2's first call with one
# warm-up call and 2 calls per round), or raising there; and a file that writes a marker when imported.
DIFFERENT = SOFTMAX + '''
CALLS = [0]
OTHER = sample(LOGITS, TEMPERATURE).at[3].add(1)  # made here: no compile inside a measured round


def step_differs():
    CALLS[0] += 1
    out = sample(LOGITS, TEMPERATURE)
    return OTHER if CALLS[0] >= 4 else out


def step_raises():
    CALLS[0] += 1
    if CALLS[0] >= 4:
        raise RuntimeError("the cache ran out")
    return sample(LOGITS, TEMPERATURE)
'''
MARKED = SOFTMAX + '''
import pathlib

pathlib.Path(__file__).with_suffix(".imported").write_text("imported")
'''
FAST = ["--rounds", "3", "--steps", "2", "--warmup", "1"]


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    for name, text in (("shapes.py", SHAPES), ("greedy.py", GREEDY), ("softmax_greedy.py", SOFTMAX),
                       ("decode_loop.py", DONATE), ("different.py", DIFFERENT), ("marked.py", MARKED)):
        (tmp_path / name).write_text(text)
    return tmp_path


def _verify(args: list[str], out: Path) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(main, ["verify", *args, *FAST, "--format", "json", "-o", str(out)])
    doc = json.loads(out.read_text()) if out.exists() else {}
    return result.exit_code, doc, result.output


def _checks(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {c["number"]: c for c in doc["checks"]}


def _exit_follows_the_checks(code: int, doc: dict[str, Any]) -> None:
    assert code == (0 if all(c["passed"] for c in doc["checks"]) else 1), doc["checks"]
    verdict = _checks(doc)[4]
    assert verdict["name"] == "step-time verdict" and "CI [" in verdict["figure"]
    assert doc["stopping"]["rounds"] == 3


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# Without --fix-line the fix goes where the baseline's own findings say: (line holding, argument, rule).
# --rules (the decode loop's) narrows the rules check 3 counts, still at the fixed lines.
@pytest.mark.parametrize(("program", "fix", "rules", "gone", "site"), [
    ("greedy.py", "eager-widening", "HD001, HD003, HD004", "jit_convert_element_type",
     ("logits = logits.astype(jnp.float32)", "", "HD00")),
    ("softmax_greedy.py", "argmax-without-softmax", "HD011", "jit_sample", ("jax.nn.softmax(", "", "HD011")),
    ("decode_loop.py", "donate-state", "HD009", "jit_decode", ("jax.lax.fori_loop(", "cache", "HD009")),
])
def test_a_fix_keeps_the_outputs_and_removes_its_findings(programs: Path, program: str, fix: str, rules: str,
                                                          gone: str, site: tuple[str, str, str]) -> None:
    path = programs / program
    before = path.read_bytes()
    narrowed = ["--rules", rules.replace(" ", "")] if fix == "donate-state" else []
    code, doc, output = _verify([f"{path}:step", "--fix", fix, *narrowed, "--out", str(programs / "out")],
                                programs / "verify.json")
    assert doc, output
    holding, argument, rule = site
    assert [(s["line"], s["argument"]) for s in doc["fix_sites"]] == [(_line_of(path, holding), argument)]
    assert doc["fix_sites"][0]["finding"].startswith(rule)
    checks = _checks(doc)
    assert checks[1]["passed"] and checks[1]["figure"] == "treatment 0, baseline 0"
    assert checks[2]["passed"] and checks[2]["figure"] == "bit-identical in 7/7 calls"
    assert checks[3]["passed"], checks[3]
    assert checks[3]["figure"].startswith(f"{rules} at the fixed lines: ") and " -> 0;" in checks[3]["figure"]
    assert " 0 -> 0" not in checks[3]["figure"]  # the baseline had the finding the fix removes
    assert any(o["module"] == gone for o in doc["removed_ops"]) and doc["removed_time_per_step_us"] > 0
    assert doc["fix_diff"].startswith(f"--- a/{program}")
    # The page says where the fix went, as the terminal, Markdown and JSON do.
    page = html.unescape((programs / "out" / "report.html").read_text())
    assert "table-verify-fixed-at" in page and f"{program}:{_line_of(path, holding)}" in page
    assert doc["fix_sites"][0]["finding"] in page
    _exit_follows_the_checks(code, doc)
    # The user's file is only read: same bytes, no transaction folder beside it.
    assert path.read_bytes() == before
    assert not (programs / ".hlo-doctor").exists()


def test_a_treatment_with_other_outputs_fails_naming_the_round_and_the_element(programs: Path) -> None:
    out = programs / "out"
    xml = programs / "verify.xml"
    result = CliRunner().invoke(main, ["verify", f"{programs / 'softmax_greedy.py'}:step", "--treatment",
                                       f"{programs / 'different.py'}:step_differs", *FAST, "--out", str(out),
                                       "--format", "junit", "-o", str(xml)])
    assert result.exit_code == 1, result.output
    doc = json.loads((out / "verify.json").read_text())
    outputs = _checks(doc)[2]
    assert not outputs["passed"] and outputs["figure"] == "differ in round 2, step 1"
    assert "output, index (3,) (1 of 8 elements differ): " in outputs["detail"]
    first, second = outputs["detail"].rsplit(": ", 1)[1].split(" vs ")
    assert int(second) == int(first) + 1
    # First the outputs; a timing-dependent finding (HD015, host-bound) may add check 3 on a loaded machine.
    assert doc["verdict"].startswith("FAIL: outputs identical")
    suite = ET.parse(xml).getroot()
    assert suite.get("failures") != "0"
    assert [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None][0] == "2 outputs identical"
    assert "differ in round 2" in (out / "verify.md").read_text()
    page = (out / "report.html").read_text()  # the verify page, drawn from this verify.json
    assert "verify: FAIL (outputs identical" in page and "Step time (one call of the target)" in page


def test_a_target_that_raises_fails_naming_it(programs: Path) -> None:
    code, doc, output = _verify([f"{programs / 'softmax_greedy.py'}:step", "--treatment",
                                 f"{programs / 'different.py'}:step_raises"], programs / "verify.json")
    assert code == 1, output
    checks = _checks(doc)
    assert checks[2]["figure"] == "treatment raised in round 2, step 1"
    assert "RuntimeError: the cache ran out" in checks[2]["detail"]
    assert checks[3]["figure"].startswith("not run: treatment raised") and not checks[4]["passed"]


def test_too_few_rounds_and_a_fix_that_does_not_apply_are_refused_before_anything_runs(programs: Path) -> None:
    target = f"{programs / 'marked.py'}:step"
    result = CliRunner().invoke(main, ["verify", target, "--fix", "argmax-without-softmax", "--rounds", "2"])
    assert result.exit_code == 2
    assert "--rounds 2: the statistics need at least 3 rounds per side" in result.output
    before = (programs / "marked.py").read_bytes()
    result = CliRunner().invoke(main, ["verify", target, "--fix", "donate-state", "--fix-line", "8", *FAST])
    assert result.exit_code == 2
    assert "--fix donate-state does not apply to" in result.output and "marked.py:8" in result.output
    result = CliRunner().invoke(main, ["verify", target, "--fix", "argmax-without-softmax", "--fix-line", "5", *FAST])
    assert result.exit_code == 2 and "does not apply to" in result.output and "marked.py:5" in result.output
    result = CliRunner().invoke(main, ["verify", target, "--fix", "bf16-greedy-sampler", *FAST])
    assert result.exit_code == 2 and "edits a project, not one file" in result.output
    assert not (programs / "marked.imported").exists()  # nothing imported, nothing run
    assert (programs / "marked.py").read_bytes() == before


def test_a_target_that_raises_on_import_is_bad_input(programs: Path) -> None:
    (programs / "broken.py").write_text("import jax\nraise ValueError('no weights here')\n\ndef step():\n    pass\n")
    result = CliRunner().invoke(main, ["verify", f"{programs / 'softmax_greedy.py'}:step", "--treatment",
                                       f"{programs / 'broken.py'}:step", *FAST])
    assert result.exit_code == 2
    assert "treatment" in result.output and "broken.py raised ValueError on import: no weights here" in result.output


def _leaf(values: list[float], dtype: str = "float32") -> tuple[Leaf, ...]:
    return (Leaf("[0]", np.asarray(values, dtype=dtype)),)


def test_outputs_compare_bit_for_bit_unless_a_tolerance_is_set() -> None:
    nan = float("nan")
    assert first_difference(_leaf([1.0, nan]), _leaf([1.0, nan])) is None
    signed_zero = first_difference(_leaf([1.0, 0.0]), _leaf([1.0, -0.0]))
    assert signed_zero is not None and signed_zero.describe() == "output [0], index (1,) (1 of 2 elements differ): 0.0 vs -0.0"
    close = (_leaf([1.0, 2.0]), _leaf([1.0, 2.0 + 1e-6]))
    assert first_difference(*close) is not None
    assert first_difference(*close, rtol=1e-5) is None
    assert first_difference(_leaf([1, 2], "int32"), _leaf([1, 3], "int32"), atol=5.0) is not None  # ints stay exact
    shape = first_difference(_leaf([1.0]), _leaf([1.0, 2.0]))
    assert shape is not None and shape.describe() == "output [0]: float32[1] vs float32[2]"
