"""The report pages in a real browser: headless Chromium opens each kind of page from file:// and the
tests look at what it did and drew.

For every page: no console error, no uncaught exception, no request but the page's own file (the
page's Content-Security-Policy would also refuse one, and say so in the console); every chart drawn
(an SVG with marks, and pixels that are not all background); the tables' numbers equal the JSON the
page was built from (``stats``/``diagnose``/``gate`` JSON, ``verify.json``). Pages are made by the
commands themselves (``report``, ``gate --format html``) from the sample traces and a real doctor
folder's JSON (``data/doctor_b8``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from html_browser import Browser, Tab, png_pixels

from hlo_doctor.cli import main
from hlo_doctor.render.html.step import breakdown_steps

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
DATA = Path(__file__).resolve().parent / "data" / "doctor_b8"


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.output


def old_verify_json(doc: dict[str, Any]) -> dict[str, Any]:
    """``verify.json`` as the first release wrote it (no schema tag; removed ops with a ``removed``
    flag and no treatment time), from a current one."""
    old = {k: v for k, v in doc.items() if k != "schema"}
    old["removed_ops"] = [{"code": o["code"], "op": o["op"], "module": o["module"], "shape": o["shape"],
                           "time_per_step_us": o["time_per_step_us"], "removed": o["status"] == "gone"}
                          for o in doc["removed_ops"]]
    return old


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """kind -> (page, the JSON its numbers come from)."""
    tmp = tmp_path_factory.mktemp("pages")
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, run in (("capture-cpu", SAMPLES / "engine_b64_original_a"), ("capture-gpu", SAMPLES / "gpu_h200_original")):
        _run("stats", str(run), "--format", "json", "--per-step", "-o", str(tmp / f"{name}.json"))
        _run("report", str(run), "-o", str(tmp / f"{name}.html"))
        out[name] = (tmp / f"{name}.html", json.loads((tmp / f"{name}.json").read_text()))
    _run("diagnose", str(SAMPLES / "engine_b64_original_a"), "--format", "json", "-o", str(tmp / "diagnosis.json"))
    _run("report", str(tmp / "diagnosis.json"), "-o", str(tmp / "diagnosis.html"))
    out["diagnosis"] = (tmp / "diagnosis.html", json.loads((tmp / "diagnosis.json").read_text()))
    verify = json.loads((DATA / "verify.json").read_text())
    for name, doc in (("verify", verify), ("verify-old", old_verify_json(verify))):
        folder = tmp / name
        folder.mkdir()
        (folder / "verify.json").write_text(json.dumps(doc))
        _run("report", str(folder), "-o", str(tmp / f"{name}.html"))
        out[name] = (tmp / f"{name}.html", doc)
    target = json.loads((DATA.parent / "verify_target_0_24_0" / "verify.json").read_text())
    _run("report", str(DATA.parent / "verify_target_0_24_0" / "verify.json"), "-o", str(tmp / "verify-target.html"))
    out["verify-target"] = (tmp / "verify-target.html", target)
    doctor = tmp / "doctor"
    shutil.copytree(DATA, doctor)
    _run("report", str(doctor), "-o", str(tmp / "doctor.html"))
    out["doctor"] = (tmp / "doctor.html", verify)
    _run("gate", str(SAMPLES / "engine_b64_fixed"), str(SAMPLES / "engine_b64_original_a"), "--format", "html",
         "-o", str(tmp / "gate.html"), "--json", str(tmp / "gate.json"))
    out["gate"] = (tmp / "gate.html", json.loads((tmp / "gate.json").read_text()))
    return out


_TABLES_JS = """JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll('table')).map(t => [t.id, {
  keys: Array.from(t.tHead.rows[0].cells).map(c => c.getAttribute('data-key') || c.textContent.trim()),
  rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c =>
    [c.getAttribute('data-value'), c.textContent.trim()]))}])))"""

_CHARTS_JS = """Array.from(document.querySelectorAll('.chart')).map(el => {
  const r = el.getBoundingClientRect(), svg = el.querySelector('svg');
  return {id: el.id, drawn: el.getAttribute('data-drawn'), error: el.getAttribute('data-error'),
          label: el.getAttribute('aria-label'), title: el.closest('figure').querySelector('h3').textContent,
          marks: svg ? svg.querySelectorAll('g.mark-rect path, g.mark-symbol path, g.mark-rule line, '
                                            + 'g.mark-rect rect').length : 0,
          x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height};
})"""


def _tables(tab: Tab) -> dict[str, Any]:
    return dict(json.loads(tab.evaluate(_TABLES_JS)))


def _column(table: dict[str, Any], key: str) -> list[float | None]:
    i = table["keys"].index(key)
    return [None if row[i][0] in (None, "") else float(row[i][0]) for row in table["rows"]]


def _same(page: list[float | None], doc: list[Any]) -> bool:
    return len(page) == len(doc) and all(
        (a is None and (b is None or (isinstance(b, float) and math.isnan(b)))) or (a is not None and b is not None
                                                                                    and a == float(b))
        for a, b in zip(page, doc, strict=True))


@pytest.mark.parametrize("kind", ["capture-cpu", "capture-gpu", "diagnosis", "verify", "verify-old", "verify-target",
                                  "doctor", "gate"])
def test_page_runs_clean_offline_and_draws_every_chart(browser: Browser, pages: dict[str, Any], kind: str) -> None:
    path, _ = pages[kind]
    tab = browser.open(path)
    try:
        assert tab.log.errors == [], tab.log.errors
        assert tab.evaluate("document.documentElement.getAttribute('data-errors')") is None
        # The page's own document is the only request: no script, style, font or data fetched.
        assert [u for u in tab.log.requests if u != path.resolve().as_uri()] == []
        charts = tab.evaluate(_CHARTS_JS)
        assert charts or kind == "diagnosis"
        for c in charts:
            assert c["drawn"] == "true" and c["error"] is None, c
            assert c["marks"] > 0, f"{c['id']}: no marks drawn"
            assert c["title"] and len(c["label"]) > 40, c["id"]
            # Half scale: the pixels are decoded in Python, and a chart's marks survive it.
            png = tab.screenshot({"x": c["x"], "y": c["y"], "width": c["width"], "height": c["height"]}, scale=0.5)
            _, _, px = png_pixels(png)
            background = max(set(px[:50]), key=px[:50].count)
            drawn = sum(1 for p in px if p != background) / len(px)
            assert drawn > 0.02 and len(set(px)) > 8, f"{c['id']}: {drawn:.1%} of its pixels drawn"
        whole = png_pixels(tab.screenshot(scale=0.25))[2]
        assert len(set(whole)) > 20, "the page's screenshot is blank"
    finally:
        tab.close()


def test_capture_pages_numbers_equal_the_stats_json(browser: Browser, pages: dict[str, Any]) -> None:
    for kind in ("capture-cpu", "capture-gpu"):
        path, doc = pages[kind]
        tab = browser.open(path)
        tables = _tables(tab)
        tab.close()
        rows = doc["rows"][:100]
        for key in ("rank", "time_per_step_us", "pct_of_step", "bytes_accessed", "memory_bw_gibps", "pct_of_peak_bw"):
            assert _same(_column(tables["table-ops"], key), [r[key] for r in rows]), (kind, key)
        top = tables["table-top-ops"]
        assert _same(_column(top, "time_per_step_us"), [r["time_per_step_us"] for r in doc["rows"][:20]])
        # The text people read is the value, rounded as the column says.
        i = tables["table-ops"]["keys"].index("time_per_step_us")
        for row, r in zip(tables["table-ops"]["rows"], rows, strict=True):
            assert row[i][1] == f"{r['time_per_step_us']:,.1f}"
        walls = _column(tables["table-step-by-category"], "step_times_us")
        assert _same(walls, doc["step_times_us"])
    # The H200 capture has the roofline's peak and the step breakdown.
    path, doc = pages["capture-gpu"]
    tab = browser.open(path)
    tables = _tables(tab)
    tab.close()
    assert "table-bandwidth" in tables
    steps = breakdown_steps(doc["breakdown"])  # either layout of the export
    assert _same(_column(tables["table-step-breakdown"], "busy_us"), [s["busy_us"] for s in steps])
    assert _same(_column(tables["table-step-breakdown"], "idle_by_kind.dispatch"),
                 [s["idle_by_kind"]["dispatch"] for s in steps])


def test_diagnosis_and_gate_numbers_equal_their_json(browser: Browser, pages: dict[str, Any]) -> None:
    path, doc = pages["diagnosis"]
    tab = browser.open(path)
    tables = _tables(tab)
    tab.close()
    for key in ("time_per_step_us", "recoverable_us", "pct_of_step"):
        assert _same(_column(tables["table-findings"], key), [f[key] for f in doc["findings"]]), key
    path, doc = pages["gate"]
    tab = browser.open(path)
    tables = _tables(tab)
    tab.close()
    moved = sorted((o for o in doc["ops"] if o["status"] in ("new", "vanished")),
                   key=lambda o: -(o["candidate_us"] or o["baseline_us"] or 0))
    assert _same(_column(tables["table-gate-new-gone"], "candidate_us"), [o["candidate_us"] for o in moved])
    ratios = _column(tables["table-gate-change"], "comparison.ratio")
    judged = {o["comparison"]["ratio"] for o in doc["ops"] if o["comparison"]}
    assert ratios and all(r in judged for r in ratios)
    assert _same(_column(tables["table-gate-step"], "step_time_us"),
                 [doc["baseline"]["step_time_us"], doc["candidate"]["step_time_us"]])


def test_verify_page_numbers_equal_verify_json(browser: Browser, pages: dict[str, Any]) -> None:
    path, doc = pages["verify"]
    tab = browser.open(path)
    tables = _tables(tab)
    tab.close()
    rounds = sorted(doc["baseline"]["rounds"] + doc["treatment"]["rounds"], key=lambda r: r["order"])
    assert _same(_column(tables["table-verify-rounds"], "throughput_tok_s"), [r["throughput_tok_s"] for r in rounds])
    assert _same(_column(tables["table-verify-rounds"], "batch_ttft_ms"), [r["batch_ttft_ms"] for r in rounds])
    comps = [doc["throughput"], doc["step_time"], doc["batch_ttft"]]
    for key in ("ratio", "ci_low", "ci_high", "min_effect", "baseline_median", "candidate_median"):
        assert _same(_column(tables["table-verify-ratios"], key), [c[key] for c in comps]), key
    assert _same(_column(tables["table-verify-removed"], "treatment_time_per_step_us"),
                 [o["treatment_time_per_step_us"] for o in doc["removed_ops"]])


def test_verify_target_page_draws_the_program_level(browser: Browser, pages: dict[str, Any]) -> None:
    path, doc = pages["verify-target"]
    tab = browser.open(path)
    tables = _tables(tab)
    tab.close()
    level = doc["levels"][0]
    comps = [level["throughput"], level["figures"]["step_time"]]
    for key in ("ratio", "ci_low", "ci_high", "baseline_median", "candidate_median"):
        assert _same(_column(tables["table-verify-ratios"], key), [c[key] for c in comps]), key
    rounds = level["figures"]["rounds"]
    steady = sorted(t for r in rounds["baseline"] for t in r["step_times_ms"][1:])
    assert tables["table-verify-step_times"]["rows"][0][1][0] == str(len(steady))


def test_older_verify_folder_says_which_charts_it_cannot_draw(browser: Browser, pages: dict[str, Any]) -> None:
    tab = browser.open(pages["verify-old"][0])
    missing = tab.evaluate("Array.from(document.querySelectorAll('ul.missing li')).map(li => li.textContent)")
    drawn = tab.evaluate("Array.from(document.querySelectorAll('.chart[data-drawn]')).map(el => el.id)")
    tab.close()
    assert any(m.startswith("removed ops before/after") and "older hlo-doctor" in m for m in missing), missing
    assert "verify-removed" not in drawn and {"verify-throughput", "verify-step_times", "verify-ratios"} <= set(drawn)


def test_dark_scheme_print_and_sorting(browser: Browser, pages: dict[str, Any]) -> None:
    path, _ = pages["gate"]
    tab = browser.open(path, dark=True)
    colours = tab.evaluate("[getComputedStyle(document.body).backgroundColor,"
                           " getComputedStyle(document.querySelector('.chart svg text')).fill]")
    assert colours[0] == "rgb(13, 17, 23)" and colours[1] == "rgb(230, 237, 243)", colours
    browser.call("Emulation.setEmulatedMedia", {"media": "print"}, session=tab.session)
    printed = tab.evaluate("[getComputedStyle(document.body).backgroundColor,"
                           " getComputedStyle(document.querySelector('.chart svg text')).fill]")
    assert printed == ["rgb(255, 255, 255)", "rgb(0, 0, 0)"], printed
    # A click on a numeric header sorts the rows by the unrounded values, then the other way round.
    order = tab.evaluate("""(() => { const t = document.getElementById('table-gate-change');
      const i = Array.from(t.tHead.rows[0].cells).findIndex(c => c.getAttribute('data-key') === 'comparison.ratio');
      const col = () => Array.from(t.tBodies[0].rows).map(r => Number(r.cells[i].getAttribute('data-value')));
      t.tHead.rows[0].cells[i].querySelector('button').click(); const up = col();
      t.tHead.rows[0].cells[i].querySelector('button').click(); return [up, col()]; })()""")
    tab.close()
    assert order[0] == sorted(order[0]) and order[1] == sorted(order[1], reverse=True) and len(order[0]) > 3


def test_the_checks_catch_a_page_that_fetches_or_fails(browser: Browser, pages: dict[str, Any],
                                                       tmp_path: Path) -> None:
    """The same checks on a page spoiled on purpose: a script from a CDN and a broken chart spec."""
    text = pages["gate"][0].read_text()
    spoiled = tmp_path / "spoiled.html"
    spoiled.write_text(text.replace("<title>", '<script src="https://cdn.example.org/vega.js"></script><title>', 1)
                       .replace('"marks":[', '"marks":[{"type":"nonsense"},', 1))
    tab = browser.open(spoiled)
    errors, requests = tab.log.errors, tab.log.requests
    recorded = tab.evaluate("document.documentElement.getAttribute('data-errors')")
    tab.close()
    assert "https://cdn.example.org/vega.js" in requests
    assert any("cdn.example.org" in e and "Content Security Policy" in e for e in errors), errors  # refused
    assert any("TypeError" in e for e in errors), errors  # Vega's own error on the broken spec
    assert recorded is not None and int(recorded) >= 1  # and the page noted it in its DOM
