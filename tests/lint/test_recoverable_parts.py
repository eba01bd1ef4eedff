"""A recoverable time as its parts: each within what the trace holds for it, the same sum in every view.

The capture is the bundled engine's (``sample_traces/engine_b64_original_a``, XLA:CPU, the Python
tracer on): HD003's eager convert and HD002's copy carry op time, the runtime's idle around them
and host time. The judge is xprof's own trace-viewer JSON of the same xplane, summed here: the op's
event durations per step, the op-free intervals next to its runs, the duration of the eager call's
frames, each step's idle (its span less the union of op events). Every format diagnose writes is
then read back and its parts added up against its total as printed.
"""

from __future__ import annotations

import gzip
import html
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from test_trace_json import xprof_trace_json  # noqa: E402

from hlo_doctor.cli import main  # noqa: E402
from hlo_doctor.core.format import fmt_parts, round_parts  # noqa: E402
from hlo_doctor.trace import find_xplanes  # noqa: E402

ENGINE = Path(__file__).resolve().parents[2] / "sample_traces" / "engine_b64_original_a"
_NUM = r"[\d,]+(?:\.\d+)?"
_SUM = re.compile(rf"recoverable:? ({_NUM}) (ms|us) = ((?:[a-z ]+ {_NUM} (?:ms|us)(?: \+ )?)+)", re.I)


@dataclass(frozen=True)
class Judge:
    """Figures per step from xprof's trace-viewer events alone."""

    events: list[dict]
    steps: list[tuple[float, float]]
    ops: list[tuple[float, float, str, str]]

    @classmethod
    def of(cls, trace: Path) -> Judge:
        events = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if "step_num" in (e.get("args") or {}))
        ops = sorted((e["ts"], e["ts"] + e["dur"], str(e["args"].get("hlo_module", "")), str(e["args"]["hlo_op"]))
                     for e in events if "hlo_op" in (e.get("args") or {}))
        return cls(events, steps, ops)

    def _inside(self, lo: float, hi: float) -> list[tuple[float, float, str, str]]:
        return [o for o in self.ops if lo <= o[0] < hi]

    def op_us(self, module: str, op: str) -> float:
        return sum(e - s for lo, hi in self.steps for s, e, m, n in self._inside(lo, hi)
                   if m == module and n == op) / len(self.steps)

    def idle_us(self) -> float:
        """Each step's span less the union of the op events in it, the mean over the steps."""
        total = 0.0
        for lo, hi in self.steps:
            busy, reach = 0.0, lo
            for s, e, _, _ in self._inside(lo, hi):
                s, e = max(s, reach), min(e, hi)
                if e > s:
                    busy += e - s
                reach = max(reach, e)
            total += (hi - lo) - busy
        return total / len(self.steps)

    def next_to(self, module: str, op: str) -> float:
        """The op-free time just before each run of the ops that opens its program and just after each
        that closes it, whatever the host did meanwhile (runtime_gaps counts the part it waited)."""
        total = 0.0
        for lo, hi in self.steps:
            inside = self._inside(lo, hi)
            for i, (start, _, mod, name) in enumerate(inside):
                if mod != module or (op and name != op):
                    continue
                before = max((o[1] for o in inside[:i]), default=lo)
                reach = max(o[1] for o in inside[: i + 1])
                nxt = inside[i + 1][0] if i + 1 < len(inside) else hi
                if not i or inside[i - 1][2] != module:
                    total += max(0.0, start - before)
                if i + 1 == len(inside) or inside[i + 1][2] != module:
                    total += max(0.0, nxt - reach)
        return total / len(self.steps)

    def frames_us(self, function: str) -> float:
        """Time in the Python tracer's frames of ``function`` inside the steps, per step."""
        return sum(e["dur"] for e in self.events for lo, hi in self.steps
                   if str(e["name"]).startswith("$") and str(e["name"]).endswith(f" {function}")
                   and lo <= e["ts"] < hi) / len(self.steps)


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Judge:
    return Judge.of(xprof_trace_json(find_xplanes(ENGINE)[0], tmp_path_factory.mktemp("xprof")))


def _diagnose(*args: str) -> str:
    result = CliRunner().invoke(main, ["diagnose", str(ENGINE), "--no-what-if", *args], catch_exceptions=False,
                                env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def findings() -> dict[str, dict]:
    doc = json.loads(_diagnose("--format", "json"))
    return {f["code"]: f for f in doc["findings"]}


def test_the_parts_add_up_and_each_is_within_the_trace(findings: dict[str, dict], judge: Judge) -> None:
    step = sum(hi - lo for lo, hi in judge.steps) / len(judge.steps)
    idle = judge.idle_us()
    hd002, hd003 = findings["HD002"], findings["HD003"]
    for f in (hd002, hd003):
        parts = f["parts"]
        assert math.fsum(parts.values()) == pytest.approx(f["recoverable_us"], rel=1e-12)
        assert f["recoverable_us"] <= step
        # The op part: no more than the op's events take per step (xprof writes three decimals).
        assert parts["op"] <= judge.op_us(f["module"], f["op"]) + 0.01
        # The idle parts: no more than the step's idle, and the runtime's no more than the op-free
        # time next to the runs of what the fix removes.
        assert parts.get("runtime_idle", 0.0) + parts.get("host", 0.0) <= idle + 0.01
    assert hd002["parts"]["runtime_idle"] <= judge.next_to(hd002["module"], hd002["op"]) + 0.01
    assert hd003["parts"]["runtime_idle"] <= judge.next_to(hd003["module"], "") + 0.01
    # HD003's host part: device idle inside the eager astype's own frames (the call and its repeat).
    assert 0.0 < hd003["parts"]["host"] <= judge.frames_us("_astype") + 0.01
    # The copy of 25.1 ms "recovering" 67.6 ms: the rest is the runtime's idle after it, said so.
    assert hd002["parts"]["op"] == pytest.approx(hd002["time_per_step_us"])
    assert hd002["recoverable_us"] > hd002["time_per_step_us"] and set(hd002["parts"]) == {"op", "runtime_idle"}


def _sums(text: str) -> Iterator[tuple[float, list[float]]]:
    """(total, parts) of every ``recoverable T = a A + b B`` in ``text``, each in the total's unit."""
    for m in _SUM.finditer(text):
        total = float(m.group(1).replace(",", ""))
        parts = [float(x.replace(",", "")) for x in re.findall(rf"({_NUM}) (?:ms|us)", m.group(3))]
        units = set(re.findall(r" (ms|us)\b", m.group(3)))
        assert units == {m.group(2)}, m.group(0)
        yield total, parts


def _assert_reconciles(text: str, findings: dict[str, dict]) -> None:
    found = list(_sums(text))
    assert len(found) == len([f for f in findings.values() if f["parts"]]), text
    for total, parts in found:
        assert round(sum(parts), 1) == total


@pytest.mark.parametrize("fmt", ["concise", "github", "md", "table"])
def test_every_text_view_prints_the_same_sum(fmt: str, findings: dict[str, dict], tmp_path: Path) -> None:
    if fmt == "table":  # the people's report (rich's table and details), as written to a file
        _diagnose("--format", "table", "-o", str(tmp_path / "table.txt"))
        text = (tmp_path / "table.txt").read_text()
        assert "━" in text or "─" in text  # the rich table, not the one-line view
    else:
        text = _diagnose("--format", fmt).replace("%0A", "\n")
    _assert_reconciles(text, findings)
    for f in findings.values():
        if f["parts"]:
            assert fmt_parts(tuple(f["parts"].items()), f["recoverable_us"]) in text


def test_sarif_carries_the_parts(findings: dict[str, dict]) -> None:
    sarif = json.loads(_diagnose("--format", "sarif"))
    results = sarif["runs"][0]["results"]
    for r in results:
        props = r["properties"]
        if "recoverable_parts_us" in props:
            assert math.fsum(props["recoverable_parts_us"].values()) == pytest.approx(props["recoverable_us"])
            assert props["recoverable_parts_us"] == findings[r["ruleId"]]["parts"]
    _assert_reconciles("\n".join(r["message"]["text"] for r in results), findings)


def test_the_html_report_prints_parts_that_add_up_to_its_column(findings: dict[str, dict], tmp_path: Path) -> None:
    doc = tmp_path / "diagnosis.json"
    doc.write_text(_diagnose("--format", "json"))
    page = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(doc), "-o", str(page)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = html.unescape(page.read_text())
    for f in findings.values():
        if not f["parts"]:
            continue
        shown = round_parts(list(f["parts"].values()), f["recoverable_us"], 1)
        assert sum(float(s.replace(",", "")) for s in shown) == pytest.approx(
            float(f"{f['recoverable_us']:.1f}"), abs=1e-6)
        assert " + ".join(f"{label} {s}" for label, s in zip(
            ("op time", "runtime idle", "host")[: len(shown)], shown, strict=True)) in text
