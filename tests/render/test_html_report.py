"""``hlo-doctor report`` without a browser: what it accepts and refuses, the Markdown with its chart
images, the missing extra, and the size of a page over many steps and devices."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.render.html import capture_page, to_html, verify_page
from hlo_doctor.render.html.step import MAX_BARS

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "doctor_b8"
needs_charts = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import vl_convert"], capture_output=True).returncode != 0,
    reason="vl-convert-python is not installed: pip install -e '.[test]'")


def test_a_folder_with_none_of_the_inputs_is_exit_2_naming_what_was_expected(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing hlo-doctor wrote")
    result = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert len(line.splitlines()) == 1
    for expected in ("run directory", "diagnosis JSON", "verify --out", "doctor --out", "gate JSON"):
        assert expected in line, expected
    assert not (tmp_path / "r.html").exists()


def test_a_json_hlo_doctor_did_not_write_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    result = CliRunner().invoke(main, ["report", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "not a JSON document hlo-doctor wrote" in result.output


def test_without_the_report_extra_report_says_which_extra_in_one_line(tmp_path: Path) -> None:
    # vl_convert made unimportable the way Python documents it: a None entry in sys.modules.
    code = ("import sys; sys.modules['vl_convert'] = None; from hlo_doctor.cli import main; "
            f"main(['report', {str(DATA)!r}, '-o', {str(tmp_path / 'r.html')!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    # A plain install writes the page with its tables and says, in one line, what draws the charts.
    assert done.returncode == 0, done.stderr
    said = [x for x in done.stderr.splitlines() if "pip install 'hlo-doctor[report]'" in x]
    assert len(said) == 1 and said[0].startswith("charts not drawn (tables only)"), done.stderr
    page = (tmp_path / "r.html").read_text()
    assert page.count("<table") >= 1 and "chart not drawn: pip install 'hlo-doctor[report]'" in html.unescape(page)


def test_without_the_extra_a_folder_page_keeps_its_tables_and_names_the_extra() -> None:
    page = verify_page(json.loads((DATA / "verify.json").read_text()))
    text = html.unescape(to_html(page, charts=False))
    assert "<script>window" not in text and "vegaEmbed" in text  # the page's script only, no runtime
    assert text.count("chart not drawn: pip install 'hlo-doctor[report]'") == len(page.charts) == 4
    assert text.count("<table") == len(page.tables)


@needs_charts
def test_markdown_links_every_chart_as_an_image_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "doctor.md"
    result = CliRunner().invoke(main, ["report", str(DATA), "--format", "md", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    links = re.findall(r"!\[[^\]]+\]\((doctor-charts/[\w-]+\.svg)\)", text)
    assert len(links) == 8
    for link in links:
        svg = (out.parent / link).read_text()
        assert svg.startswith("<svg") and "<path" in svg and "#ffffff" in svg
    # Every charted number is in a table under its image: the rounds' throughputs, for one.
    verify = json.loads((DATA / "verify.json").read_text())
    for r in verify["baseline"]["rounds"]:
        assert f"{r['throughput_tok_s']:,.2f}" in text
    png = CliRunner().invoke(main, ["report", str(DATA / "verify.json"), "--format", "md", "--images", "png",
                                    "-o", str(tmp_path / "v.md")])
    assert png.exit_code == 0, png.output
    assert (tmp_path / "v-charts" / "verify-ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_charts
def test_many_steps_and_devices_keep_a_page_small() -> None:
    """A capture of 5,000 steps on 8 devices: at most MAX_BARS bars per step chart, one breakdown
    row per device, and a page far under 2 MB (measured on the 200 MB trace in docs/ci.md)."""
    doc = json.loads((DATA / "profile" / "opstats.json").read_text())
    steps = 5000
    cols = doc["per_step"]["columns"]
    base = [r for r in doc["per_step"]["rows"] if r[cols.index("step")] == 0]
    doc["per_step"]["rows"] = [[s if c == "step" else v for c, v in zip(cols, r, strict=True)]
                               for s in range(steps) for r in base]
    doc["step_times_us"] = [doc["step_time_us"]] * steps
    one = doc["breakdown"]["steps"][0]
    doc["breakdown"]["steps"] = [{**one, "device": f"/device:TPU:{d}", "step": s} for d in range(8) for s in range(steps)]
    page = capture_page(doc)
    step_chart = next(c for c in page.charts if c.id == "step-by-category")
    assert len(step_chart.table.rows) == MAX_BARS  # runs of 84 steps: 5,000 = 59 x 84 + 44
    assert [step_chart.table.rows[i][0].text for i in (0, -1)] == ["0-83", "4956-4999"]
    breakdown = next(c for c in page.charts if c.id == "step-breakdown")
    assert len(breakdown.table.rows) == 8
    assert len(to_html(page).encode()) < 2 * 2**20
