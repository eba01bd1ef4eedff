"""``report`` reads a diagnosis JSON by its content, whatever its name, and a file it cannot read gets
one line that names every input it takes (a diagnosis JSON among them)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main

FIXED = Path(__file__).resolve().parents[2] / "sample_traces" / "engine_b64_fixed"


def test_a_diagnosis_json_under_any_name_is_read_by_content(tmp_path: Path) -> None:
    findings = tmp_path / "findings.out"
    assert CliRunner().invoke(main, ["diagnose", str(FIXED), "--format", "json", "-o", str(findings)]).exit_code == 0
    page = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["report", str(findings), "-o", str(page)])
    assert result.exit_code == 0, result.output
    assert 'data-kind="diagnosis"' in page.read_text() and "diagnosis page" in result.stderr


def test_an_unreadable_file_names_the_inputs_report_takes(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a capture\n")
    result = CliRunner().invoke(main, ["report", str(notes), "-o", str(tmp_path / "page.html")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(notes) in lines[0] and "a diagnosis JSON (diagnose --format json)" in lines[0]
