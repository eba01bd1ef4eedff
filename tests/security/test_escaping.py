"""Threat: a name in a capture (an op, a module, a source path) shapes what CI and people read.

One hostile name (``hostile.NAME``: a GitHub workflow command after LF and CR, ANSI and OSC 8 escape
sequences, bidi overrides, U+2028, raw HTML and a script, backticks and pipes, a spreadsheet formula, C0
and C1 controls, a Markdown heading) goes through every output format of ``diagnose``, ``gate``,
``stats`` and ``report``. Each output is judged by what reads it, not by this project's code: GitHub's
documented workflow-command syntax on every line of stdout and stderr, a CommonMark/GFM parser
(markdown-it-py) against the same document rendered from clean names, Python's ``xml.dom.minidom``,
Python's ``csv`` reader, and headless Chromium with the page's console.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path
from xml.dom import minidom

import pytest
from click.testing import CliRunner
from hostile import NAME, hostile_exports, hostile_hlo
from markdown_it import MarkdownIt

from hlo_doctor.cli import main

BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
WORKFLOW = re.compile(r"^::(error|warning|notice|debug|group|endgroup|add-mask|stop-commands|set-output|echo)\b")
OURS = re.compile(r"^::(error|warning|notice)( (file|line|title)=[^,:]*(,(file|line|title)=[^,:]*)*)?::[^\n\r]*$")


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def assert_no_hazards(text: str) -> None:
    """Nothing a reader receives holds a bidi control, a C0/C1 control (LF and tab aside) or U+2028."""
    assert not BIDI.search(text), BIDI.search(text)
    assert not CONTROLS.search(text), repr(CONTROLS.search(text))


def assert_github_lines(out: str, err: str, expected: int | None = None) -> None:
    """Every line a runner reads (stdout and stderr alike) that is a workflow command is one this tool
    wrote: a known command, property values without a raw ``:`` or ``,``, one line of data."""
    commands = [line for line in (out + "\n" + err).split("\n") for line in line.split("\r")
                if WORKFLOW.match(line)]
    for line in commands:
        assert OURS.match(line), line
        assert "::pwned" not in line.split("::", 2)[1]
        title = re.search(r"title=([^,:]*)", line)
        assert title is None or title.group(1).startswith(("HD", "hlo-doctor")), line
    if expected is not None:
        assert len(commands) == expected, commands


@pytest.fixture(scope="module")
def hlo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_hlo(tmp_path_factory.mktemp("hlo"))


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return hostile_exports(tmp_path_factory.mktemp("exports"))


def test_diagnose_one_line_formats_start_no_line(hlo: Path) -> None:
    code, out, err = run("diagnose", str(hlo), "--format", "concise")
    assert code == 0 and "HD002" in out
    assert_github_lines(out, err, expected=0)
    assert_no_hazards(out + err)
    # The path is shown as written: each hazard as its escape, on the finding's one line.
    assert sum("HD002" in line for line in out.splitlines()) == 1 and "::pwned\\" in out  # the HLO reader reads CR as LF
    code, out, err = run("diagnose", str(hlo), "--format", "github")
    assert code == 0
    assert_github_lines(out, err, expected=2)
    assert_no_hazards(out + err)


def test_diagnose_table_off_a_terminal(hlo: Path, tmp_path: Path) -> None:
    code, out, err = run("diagnose", str(hlo))
    assert code == 0 and "HD002" in err
    assert_github_lines(out, err, expected=0)
    assert_no_hazards(out + err)
    code, _, err = run("diagnose", str(hlo), "--format", "table", "-o", str(tmp_path / "t.txt"))
    assert code == 0
    text = (tmp_path / "t.txt").read_text()
    assert_github_lines(text, "", expected=0)
    assert_no_hazards(text)


def test_gate_github_and_table(exports: tuple[Path, Path]) -> None:
    base, cand = exports
    code, out, err = run("gate", str(base), str(cand), "--format", "github", "--strict")
    assert code in (0, 1)
    # The hostile op is within noise under --strict: its annotation is one line, its data escaped.
    assert_github_lines(out, err)
    assert any("pwned" in line for line in out.splitlines() if line.startswith("::warning"))
    assert_no_hazards(out + err)
    code, out, err = run("gate", str(base), str(cand), "--format", "table", "--rows", "50")
    assert_github_lines(out, err, expected=0)
    assert_no_hazards(out + err)


def _blocks(text: str) -> list[str]:
    md = MarkdownIt("commonmark").enable("table")
    return [t.type for t in md.parse(text)]


def _markup(text: str) -> list[tuple[str, str]]:
    """The raw HTML, links and images a document holds (type, content)."""
    md = MarkdownIt("commonmark").enable("table")
    tokens = [c for t in md.parse(text) for c in [t, *(t.children or [])]]
    return [(t.type, t.content) for t in tokens if t.type in ("html_inline", "html_block", "link_open", "image")]


@pytest.mark.parametrize("command", ["diagnose", "gate", "stats"])
def test_markdown_has_the_structure_of_the_clean_document(command: str, tmp_path: Path) -> None:
    """The hostile document parses to the same blocks as the one from clean names: no heading, raw HTML,
    extra table row or split cell comes from a name; inline, no HTML, link or image."""
    docs = []
    for name, sub in ((NAME, "hostile"), ("", "clean")):
        folder = tmp_path / sub
        folder.mkdir()
        if command == "diagnose":
            args = ["diagnose", str(hostile_hlo(folder, name)), "--format", "md"]
        elif command == "gate":
            base, cand = hostile_exports(folder, name)
            args = ["gate", str(base), str(cand), "--format", "md", "--rows", "50"]
        else:
            args = ["stats", str(hostile_exports(folder, name)[0]), "--format", "markdown", "--top", "10"]
        code, out, _ = run(*args)
        assert code in (0, 1), out
        docs.append(out)
    hostile, clean = docs
    assert _blocks(hostile) == _blocks(clean)
    assert _markup(hostile) == _markup(clean)  # the gate's own <sub> and <details>, nothing else
    assert_no_hazards(hostile)


def test_junit_parses_and_names_are_shown(exports: tuple[Path, Path], tmp_path: Path) -> None:
    base, cand = exports
    out = tmp_path / "gate.xml"
    code, _, _ = run("gate", str(base), str(cand), "--format", "junit", "-o", str(out), "--strict")
    assert code in (0, 1)
    doc = minidom.parseString(out.read_bytes())  # the judge: an XML 1.0 parser
    names = [c.getAttribute("name") for c in doc.getElementsByTagName("testcase")]
    assert any("pwned" in n for n in names)
    for node in doc.getElementsByTagName("testcase"):
        assert_no_hazards(node.getAttribute("name") + node.getAttribute("classname") + node.getAttribute("file"))


def test_csv_opens_as_data(exports: tuple[Path, Path]) -> None:
    base, _ = exports
    code, out, _ = run("stats", str(base), "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 1 + len(json.loads(base.read_text())["rows"])
    header = rows[0]
    for row in rows[1:]:
        assert len(row) == len(header)
        for cell in row:
            try:
                float(cell)
            except ValueError:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
        assert_no_hazards(",".join(row))
    assert any(cell.startswith("'=") or "=cmd" in cell for row in rows for cell in row)


def test_csv_formula_names_get_a_quote(tmp_path: Path) -> None:
    base, _ = hostile_exports(tmp_path, "=HYPERLINK(\"https://evil.example\")+", top=3)
    code, out, _ = run("stats", str(base), "--format", "csv")
    assert code == 0
    cells = [c for row in csv.reader(io.StringIO(out)) for c in row if "HYPERLINK" in c]
    assert cells and not any(c.startswith("=") for c in cells) and any(c.startswith("'=") for c in cells)


@pytest.mark.parametrize("how", ["gate", "report"])
def test_html_pages_run_only_their_own_scripts(how: str, exports: tuple[Path, Path], tmp_path: Path,
                                              browser: object) -> None:
    """U+2028 in a name used to make the chart compiler fail (exit 3); the page must draw, show the
    names as text, run no script but its own (the CSP names each by its hash) and log no error."""
    base, cand = exports
    page = tmp_path / "page.html"
    if how == "gate":
        code, _, err = run("gate", str(base), str(cand), "--format", "html", "-o", str(page))
    else:
        code, _, err = run("report", str(base), "-o", str(page))
    assert code in (0, 1), err
    text = html.unescape(page.read_text())
    assert "<img src=x" not in page.read_text() and "<script>alert" not in page.read_text()
    assert "script-src 'sha256-" in text and "'unsafe-inline'" not in text.split("script-src", 1)[1].split(";")[0]
    tab = browser.open(page)  # type: ignore[attr-defined]
    try:
        assert tab.log.errors == [], tab.log.errors
        assert tab.evaluate("document.documentElement.getAttribute('data-errors')") is None
        assert tab.evaluate("document.querySelectorAll('img').length") == 0
        assert tab.evaluate("Array.from(document.scripts).filter(s => !s.type).length") in (1, 2)
        assert [u for u in tab.log.requests if u != page.resolve().as_uri()] == []
        shown = tab.evaluate("document.body.innerText")
        assert "<img src=x onerror=alert(1)>" in shown  # the name as text
        assert_no_hazards(shown.replace("\n", " ").replace("\t", " "))
    finally:
        tab.close()


def test_report_markdown_has_no_markup_from_names(exports: tuple[Path, Path], tmp_path: Path) -> None:
    base, _ = exports
    out = tmp_path / "out" / "rep.md"
    code, _, err = run("report", str(base), "--format", "md", "-o", str(out))
    assert code == 0, err
    text = out.read_text()
    assert [m for m in _markup(text) if m[0] != "image"] == []
    assert_no_hazards(text)
