"""Every file fix's VALID and INVALID examples, through the real codemod (Fixit style), and the catalog's
promises: ids, rules that exist, safe/unsafe marks that the examples bear out."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.fixes import available_fixes
from hlo_doctor.fixes.catalog import CATALOG, catalog_entry, fixes_for_rule, load_source_fix
from hlo_doctor.fixes.source.base import NotApplicable, Rewritten, SourceExample
from hlo_doctor.lint import load_rulebook

FILE_FIXES = [e.fix_id for e in CATALOG if e.scope == "file"]


def _cases(kind: str) -> list[tuple[str, int, SourceExample]]:
    return [(fix_id, i, example) for fix_id in FILE_FIXES
            for i, example in enumerate(getattr(load_source_fix(fix_id), kind))]


def _id(case: tuple[str, int, SourceExample]) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("case", _cases("VALID"), ids=_id)
def test_valid_example_is_left_alone_with_its_reason(case: tuple[str, int, SourceExample]) -> None:
    fix_id, _, example = case
    outcome = load_source_fix(fix_id).rewrite(example.code, example.line, example.hint)
    assert isinstance(outcome, NotApplicable), f"{example.note}: rewritten to\n{getattr(outcome, 'text', '')}"
    assert outcome.kind == example.kind, outcome
    assert example.reason in outcome.reason, outcome.reason


@pytest.mark.parametrize("case", _cases("INVALID"), ids=_id)
def test_invalid_example_becomes_its_fixed_text(case: tuple[str, int, SourceExample]) -> None:
    fix_id, _, example = case
    fix = load_source_fix(fix_id)
    outcome = fix.rewrite(example.code, example.line, example.hint)
    assert isinstance(outcome, Rewritten), f"{example.note}: {outcome}"
    assert outcome.text == example.fixed
    assert outcome.safe == example.safe, outcome.edits
    ast.parse(outcome.text)
    # A fix applied twice changes nothing more (at the whole file: the line may be gone).
    again = fix.rewrite(outcome.text, None, example.hint)
    assert not isinstance(again, Rewritten) or again.text == outcome.text


def test_every_file_fix_has_both_kinds_of_example_and_its_catalog_entry() -> None:
    for fix_id in FILE_FIXES:
        fix = load_source_fix(fix_id)
        assert fix.fix_id == fix_id and fix.title == catalog_entry(fix_id).title
        assert len(fix.VALID) >= 3 and len(fix.INVALID) >= 3, fix_id
        # An unsafe catalog entry has no safe example; a safe one has at least one.
        if not catalog_entry(fix_id).safe:
            assert not any(e.safe for e in fix.INVALID), fix_id
        else:
            assert any(e.safe for e in fix.INVALID), fix_id


def test_the_catalog_serves_rules_that_exist_and_keeps_the_bundled_fix() -> None:
    codes = {r.code for r in load_rulebook().rules}
    for entry in CATALOG:
        assert set(entry.rules) <= codes, entry
    assert set(available_fixes()) <= {e.fix_id for e in CATALOG}
    assert [e.fix_id for e in fixes_for_rule("HD003")] == ["bf16-greedy-sampler", "eager-widening"]
    assert [e.fix_id for e in fixes_for_rule("HD009")] == ["donate-state"]
    assert fixes_for_rule("HD011")[0].fix_id == "argmax-without-softmax"
    assert fixes_for_rule("HD012")[0].fix_id == "slice-before-matmul"
    assert [e.fix_id for e in fixes_for_rule("HD013")] == ["update-in-place"]
    assert [e.fix_id for e in fixes_for_rule("HD007")] == ["drop-round-trip"]
    assert [e.fix_id for e in fixes_for_rule("HD014")] == ["widen-weights-once", "init-once"]


def test_a_file_that_is_not_python_is_no_pattern(tmp_path: Path) -> None:
    for fix_id in FILE_FIXES:
        outcome = load_source_fix(fix_id).rewrite("def f(:\n", 1, SourceExample("").hint)
        assert isinstance(outcome, NotApplicable) and "not valid Python" in outcome.reason


def test_rules_lists_the_fixes_that_serve_each_rule() -> None:
    rows = {r["code"]: r for r in json.loads(CliRunner().invoke(main, ["rules", "--format", "json"]).stdout)["rules"]}
    assert rows["HD009"]["fixes"] == ["donate-state (safe)"]
    assert rows["HD003"]["fixes"] == ["bf16-greedy-sampler (safe)", "eager-widening (safe)"]
    assert rows["HD011"]["fixes"] == ["argmax-without-softmax (unsafe)"]
    assert rows["HD015"]["fixes"] == []
    assert rows["HD014"]["fixes"] == ["widen-weights-once (safe)", "init-once (unsafe)"]
    assert rows["HD013"]["fixes"] == ["update-in-place (safe)"]
    assert rows["HD007"]["fixes"] == ["drop-round-trip (unsafe)"]
    md = CliRunner().invoke(main, ["rules", "--format", "md"]).stdout
    assert "| slice-before-matmul (unsafe) |" in md
