"""Tests generated from every rule's VALID and INVALID examples, plus the empty-input test."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlo_doctor.lint import DOC_SECTIONS, Context, Example, LoadedRule, load_rulebook, run_rule
from hlo_doctor.lint.testing import case_id, example_cases, run_example

BOOK = load_rulebook()


def test_bundled_rules_load_cleanly() -> None:
    assert not BOOK.errors, BOOK.errors
    codes = [r.code for r in BOOK.rules]
    assert {"HD001", "HD002", "HD003", "HD004", "HD005", "HD006"} <= set(codes)
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("rule", BOOK.rules, ids=lambda r: r.code)
def test_rule_is_documented_and_has_examples(rule: LoadedRule) -> None:
    sections = rule.rule.doc_sections()
    assert list(sections) == list(DOC_SECTIONS), sections.keys()
    assert all(sections.values())
    assert rule.rule.VALID and rule.rule.INVALID
    assert rule.path.name.startswith(rule.code.lower() + "_")


@pytest.mark.parametrize("rule", BOOK.rules, ids=lambda r: r.code)
def test_rule_on_empty_input(rule: LoadedRule) -> None:
    assert run_rule(rule, Context()) == []


@pytest.mark.parametrize("case", example_cases(BOOK, "VALID"), ids=case_id)
def test_valid_example_has_no_finding(case: tuple[LoadedRule, Example], tmp_path: Path) -> None:
    rule, example = case
    assert run_example(rule, example, tmp_path) == set()


@pytest.mark.parametrize("case", example_cases(BOOK, "INVALID"), ids=case_id)
def test_invalid_example_has_expected_findings(case: tuple[LoadedRule, Example], tmp_path: Path) -> None:
    rule, example = case
    assert example.expect, "an INVALID example must say what it expects"
    got = run_example(rule, example, tmp_path)
    for want in example.expect:
        assert want in got, f"missing {want}; got {sorted(got)}"
    # Exactly the expected findings: as many findings as expectations.
    ctx_findings = {g for g in got if "@" not in g}
    assert len(ctx_findings) == len({e.split("@")[0] for e in example.expect}), sorted(got)


def test_the_user_rule_in_the_docs_works(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "xx100_copy_of_copy.py").write_text(code)
    book = load_rulebook([tmp_path])
    assert not book.errors, book.errors
    rule = book.get("XX100")
    assert rule is not None and not rule.bundled
    for example in rule.rule.INVALID:
        assert run_example(rule, example, tmp_path) >= set(example.expect)
