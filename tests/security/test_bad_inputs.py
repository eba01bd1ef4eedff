"""Threat: input the tool cannot use ends in a traceback (exit 3) or, worse, in "no findings" (exit 0).

A truncated HLO file, HLO or JSON nested past the interpreter's stack, an engine tree that raises
while it is imported, a user rule whose results are not findings: each is exit 2 with one line naming
the file, or (a rule's bad result) an HD000 error finding while the other rules still run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from threats import copy_engine

from hlo_doctor.cli import main

REPO = Path(__file__).resolve().parents[2]
SEED_HLO = REPO / "sample_traces" / "seed_v5e_b512" / "jit_sample(23).hlo.txt"


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_every_truncation_of_an_hlo_file_is_an_input_error(tmp_path: Path) -> None:
    """Cut the seed module at every line end and every 97th byte: never "no findings", never a traceback."""
    text = SEED_HLO.read_text().rstrip("\n")
    cuts = sorted({i for i, c in enumerate(text) if c == "\n"} | set(range(1, len(text), 97)))
    path = tmp_path / "cut.hlo.txt"
    for cut in cuts:
        path.write_text(text[:cut])
        code, _, err = run("diagnose", str(path))
        assert code == 2 and "cut.hlo.txt" in err and "Traceback" not in err, (cut, err)
    path.write_text(text)
    assert run("diagnose", str(path))[0] == 0


@pytest.mark.parametrize("depth", [100, 5000])
def test_deeply_nested_hlo_tuples_are_an_input_error(tmp_path: Path, depth: int) -> None:
    shape = "f32[2]"
    for _ in range(depth):
        shape = f"({shape})"
    path = tmp_path / "deep.hlo.txt"
    path.write_text(f"HloModule deep\n\nENTRY %main (p: {shape}) -> f32[2] {{\n  %p = {shape} parameter(0)\n"
                    "  ROOT %c = f32[2]{0} constant({1, 2})\n}\n")
    code, _, err = run("diagnose", str(path))
    assert code == 2 and "deep.hlo.txt" in err and "Traceback" not in err


def test_unbalanced_brackets_nested_deeply_are_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "parens.hlo.txt"
    path.write_text("HloModule m\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(" + "(" * 100_000 + ")\n}\n")
    assert run("diagnose", str(path))[0] == 2


@pytest.mark.parametrize("body", ["raise RuntimeError('boom at import')", "import sys; sys.exit(0)",
                                  "raise KeyError('x')"])
def test_an_engine_tree_that_raises_at_import(tmp_path: Path, body: str) -> None:
    tree = copy_engine(tmp_path / "engine")
    with (tree / "runner.py").open("a") as f:
        f.write(f"\n{body}\n")
    code, _, err = run("engine", "run", "--engine", str(tree), "--format", "json")
    assert code == 2 and "on import" in err and str(tree) in err, err
    code, _, err = run("profile", "--engine", str(tree), "--out", str(tmp_path / "run"))
    assert code == 2 and str(tree) in err


BAD_RULE = '''
from hlo_doctor.core.model import Severity
from hlo_doctor.lint import Rule

class Bad(Rule):
    """Yields what is not a finding.

    What it flags:
        Nothing real.
    Why it costs:
        Nothing.
    Example:
        None.
    Fix:
        None.
    """
    code = "XX200"
    name = "test.bad-results"
    severity = Severity.INFO
    requires = ("hlo",)
    VALID = ()
    INVALID = ()

    def check(self, ctx):
        m = ctx.modules[0]
        i = m.entry.instructions[-1]
        yield "a string"
        yield None
        yield ctx.finding(self, m, i, "a real finding", recoverable_fraction=0.0)
        import dataclasses
        yield dataclasses.replace(ctx.finding(self, m, i, "negative", recoverable_fraction=0.0),
                                  recoverable_us=-1e9)
        yield dataclasses.replace(ctx.finding(self, m, i, "nan", recoverable_fraction=0.0),
                                  time_per_step_us=float("nan"))
'''


def test_a_user_rule_yielding_non_findings_becomes_hd000_and_the_diagnosis_goes_on(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "xx200_bad.py").write_text(BAD_RULE)
    code, stdout, err = run("diagnose", str(SEED_HLO), "--rules", str(rules), "--format", "json")
    assert code == 0, err
    doc = json.loads(stdout)
    by_code: dict[str, list[str]] = {}
    for f in doc["findings"]:
        by_code.setdefault(f["code"], []).append(f["message"])
    assert "HD002" in by_code  # the bundled rules still ran
    assert by_code["XX200"] == ["a real finding"]
    assert sorted(by_code["HD000"]) == sorted([
        "rule XX200 yielded a str, not a Finding", "rule XX200 yielded a NoneType, not a Finding",
        "rule XX200 yielded a Finding with recoverable_us=-1000000000.0 (must be a finite number >= 0 or None)",
        "rule XX200 yielded a Finding with time_per_step_us=nan (must be a finite number >= 0 or None)",
    ])
    assert all(f["severity"] == "error" for f in doc["findings"] if f["code"] == "HD000")
    assert "-" not in str(doc["recoverable_us"] or 0)
