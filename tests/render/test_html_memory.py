"""The report's memory section: each program's peak, the heap over program order with the peak
marked, and the buffers live at the peak; every figure equal to ``hlo-doctor memory --format json``
on the same capture (the page built by ``report`` itself), in the page model and in headless
Chromium where there is one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.cli.report import build_page
from hlo_doctor.render.html.memory import HEAP_CHARTS, program_label

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "sample_traces" / "engine_b64_original_a"


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.fixture(scope="module")
def memory_doc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("memory")
    _run("memory", str(CAPTURE), "--format", "json", "-o", str(tmp / "memory.json"))
    return tmp / "memory.json", json.loads((tmp / "memory.json").read_text())


def _drawn(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["programs"] if p["runs_per_step"]][:HEAP_CHARTS]


def _expected(doc: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """table id -> the figures each of its rows must hold, from the memory JSON."""
    out: dict[str, list[list[Any]]] = {"table-memory-programs": [
        [program_label(p), p["peak_bytes"], p["argument_bytes"], p["output_bytes"], p["alias_bytes"],
         p["temporary_bytes"], p["heap_peak_bytes"]] for p in doc["programs"]]}
    for i, p in enumerate(_drawn(doc)):
        whole = p["peak_bytes"] - p["heap_peak_bytes"]
        if len(p["heap"]) > 1:
            out[f"table-memory-heap-{i}"] = [[k, h, h + whole] for k, h in enumerate(p["heap"])]
        out[f"table-memory-peak-{i}"] = [[b["size_bytes"], b["instruction"]] for b in p["buffers_at_peak"]]
    return out


# Each table's columns to check: by their JSON key, or by position where a column has none.
_KEYS = {"table-memory-programs": (0, "peak_bytes", "argument_bytes", "output_bytes", "alias_bytes",
                                   "temporary_bytes", "heap_peak_bytes"),
         "heap": (0, "heap", "memory_bytes"), "peak": ("size_bytes", "instruction")}


def _columns(table_id: str) -> tuple[Any, ...]:
    return _KEYS.get(table_id) or _KEYS["heap" if "-heap-" in table_id else "peak"]


def test_the_capture_page_and_the_memory_page_hold_the_memory_json(memory_doc: tuple[Path, dict[str, Any]]) -> None:
    path, doc = memory_doc
    expected = _expected(doc)
    assert any("-heap-" in t for t in expected)  # the decode step's heap is drawn
    for page in (build_page(CAPTURE), build_page(path)):
        tables = {t.id: t for t in page.tables}
        for table_id, rows in expected.items():
            t = tables[table_id]
            index = [key if isinstance(key, int) else next(i for i, c in enumerate(t.columns) if c.key == key)
                     for key in _columns(table_id)]
            assert [[row[i].value for i in index] for row in t.rows] == rows, table_id
        charts = {c.id: c for c in page.charts if c.id.startswith("memory-heap-")}
        for i, p in enumerate(_drawn(doc)):
            if f"memory-heap-{i}" not in charts:
                continue
            layers = charts[f"memory-heap-{i}"].spec["layer"]
            line = layers[0]["data"]["values"]
            whole = p["peak_bytes"] - p["heap_peak_bytes"]
            # Every point the chart draws is a row of its table (MiB there, bytes in the table's values).
            assert [v["memory"] * 2**20 for v in line] == [float(h + whole) for h in p["heap"]]
            marker = layers[1]["data"]["values"][0]
            assert marker["event"] == p["peak_position"] and marker["memory"] * 2**20 == p["peak_bytes"]
            assert max(v["memory"] for v in line) * 2**20 == p["peak_bytes"]


def test_the_page_in_a_browser_shows_the_memory_json(browser: Any, memory_doc: tuple[Path, dict[str, Any]],
                                                     tmp_path: Path) -> None:
    from test_html_browser import _CHARTS_JS, _TABLES_JS

    _, doc = memory_doc
    page = tmp_path / "capture.html"
    _run("report", str(CAPTURE), "-o", str(page))
    tab = browser.open(page)
    try:
        assert tab.log.errors == [], tab.log.errors
        tables = json.loads(tab.evaluate(_TABLES_JS))
        drawn = {c["id"]: c for c in tab.evaluate(_CHARTS_JS)}
    finally:
        tab.close()
    for table_id, rows in _expected(doc).items():
        t = tables[table_id]
        index = [key if isinstance(key, int) else t["keys"].index(key) for key in _columns(table_id)]
        # A number's cell carries its value; a text cell is its text.
        got = [[row[i][1] if row[i][0] is None else row[i][0] for i in index] for row in t["rows"]]
        want = [[str(v) for v in row] for row in rows]
        assert got == want, table_id
    heaps = [k for k in drawn if k.startswith("memory-heap-")]
    assert heaps and all(drawn[k]["drawn"] == "true" and drawn[k]["marks"] > 0 for k in heaps)


def test_a_damaged_memory_json_is_one_line_exit_2(memory_doc: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, doc = memory_doc
    step = next(i for i, p in enumerate(doc["programs"]) if len(p["heap"]) > 1)
    for where, value in (("peak_bytes", "big"), ("heap", ["x", 1]), ("buffers_at_peak", {"a": 1})):
        bad = json.loads(json.dumps(doc))
        bad["programs"][step][where] = value
        path = tmp_path / "memory.json"
        path.write_text(json.dumps(bad))
        result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "page.html")])
        assert result.exit_code == 2, (where, result.output)
        assert "Traceback" not in result.output and str(path) in result.output, where
