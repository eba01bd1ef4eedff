"""The gate says why a change is within noise in every view, and a row's change is of the row's figures.

Two real captures of the bundled engine (``sample_traces/engine_b64_original_a`` and ``_b``, 3 traced
steps each): every op is undecided for want of samples (3 and 3; 5 needed each). That reason must be
in the terminal table, Markdown, JUnit, GitHub annotations, JSON and HTML, not only the JSON; each row's
change must be its own means' (candidate over baseline times the machine-speed factor), the median
the judgement tested being named as such beside it.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
BASE, CAND = SAMPLES / "engine_b64_original_a", SAMPLES / "engine_b64_original_b"
REASON = "too few samples to test (3 baseline, 3 candidate; need 5 each)"


def _gate(fmt: str, out: Path) -> str:
    result = CliRunner().invoke(main, ["gate", str(BASE), str(CAND), "--format", fmt, "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out.read_text()


@pytest.fixture(scope="module")
def verdict(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return json.loads(_gate("json", tmp_path_factory.mktemp("gate") / "gate.json"))


def test_the_json_names_why_each_undecided_change_is_undecided(verdict: dict) -> None:
    within = [o for o in verdict["ops"] if o["key"] in verdict["within_noise"]]
    assert within
    for o in within:
        assert o["why"].endswith(REASON) and o["why"].startswith("medians ")


@pytest.mark.parametrize("fmt", ["table", "md", "junit", "github", "html"])
def test_every_view_says_why(fmt: str, verdict: dict, tmp_path: Path) -> None:
    text = html.unescape(_gate(fmt, tmp_path / f"gate.{fmt}")).replace("%2C", ",").replace("%3A", ":")
    within = [o for o in verdict["ops"] if o["key"] in verdict["within_noise"]]
    if fmt == "github":  # one annotation per change within noise, its reason in it
        for o in within:
            (line,) = [x for x in text.splitlines() if x.startswith("::notice") and o["key"] in x]
            assert REASON in line
        return
    # Each undecided change a view shows carries its reason (a view may show only the largest rows).
    shown = [o for o in within if f"{o['judgement']} ({o['why']})" in text]
    assert shown, text
    # (the headline counts them: "4 change(s) within noise")
    assert not re.search(r"(?<!change\(s\) )within noise\s*(\||<|$)", text, re.M), "a within noise without why"


def test_a_rows_change_is_of_its_own_figures(verdict: dict, tmp_path: Path) -> None:
    speed = verdict["speed"]["factor"]
    by_name = {(o["ops"].split(", ")[0] or o["opcode"], o["module"]): o for o in verdict["ops"]
               if o["status"] == "matched"}
    rows = 0
    for line in _gate("table", tmp_path / "gate.txt").splitlines():
        m = re.match(r"(\S+)\s+.*?\s+(jit_\S+)\s+([\d,.]+)\s+([\d,.]+)\s+([+-][\d.]+)%", line)
        if not m or (m.group(1), m.group(2)) not in by_name:
            continue
        o = by_name[(m.group(1), m.group(2))]
        assert float(m.group(3).replace(",", "")) == pytest.approx(o["baseline_us"], abs=0.05)
        assert float(m.group(5)) == pytest.approx((o["candidate_us"] / (o["baseline_us"] * speed) - 1) * 100, abs=0.05)
        rows += 1
    assert rows >= 10
