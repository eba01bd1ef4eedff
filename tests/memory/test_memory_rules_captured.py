"""HD018, HD019 and HD017 on a temporary, on real captures (``profile`` on XLA:CPU): each rule's freed bytes equal jax's
compiled difference (``memory_analysis()``: arguments + outputs + temporaries - aliases) between the
program with the waste and the same program without it, and the capture's own peak difference.

XLA:CPU's ``memory_analysis()`` carries no heap trace (its ``peak_memory_in_bytes`` leaves the
temporaries out), so the rules are read from the captures, whose buffer assignments have one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main

PROGRAMS = Path(__file__).resolve().parents[1] / "rules" / "programs"
RULES = {"prefill": ("HD018", "HD012"), "prefill_argmax": ("HD018", "HD012"), "project": ("HD019", "HD014"), "widen": ("HD019", "HD014"),
         "top_sorted": ("HD017", "HD017")}


def _cases() -> dict[str, Any]:
    sys.path.insert(0, str(PROGRAMS))
    try:
        from memory_waste import CASES
    finally:
        sys.path.pop(0)
    return CASES  # type: ignore[no-any-return]


def _footprint(compiled: Any) -> int:
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes)


def _run(target: str, out: Path, *command: str) -> dict[str, Any]:
    runner = CliRunner()
    result = runner.invoke(main, ["profile", f"{PROGRAMS / 'memory_waste.py'}:{target}", "--steps", "2",
                                  "--warmup", "1", "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, [*command, str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("memory_waste")
    diagnosis = _run("step", base / "waste", "diagnose")
    runner = CliRunner()
    _run("step_fixed", base / "fixed", "memory")
    peaks = {}
    for side in ("waste", "fixed"):
        result = runner.invoke(main, ["memory", str(base / side), "--format", "json"], catch_exceptions=False)
        # A capture taken in a test worker also lists the programs compiled earlier in that process
        # (another test's ``jit_prefill``), with no runs: the step's programs are those that ran.
        ran = [p for p in json.loads(result.stdout)["programs"] if p["runs_per_step"]]
        peaks[side] = {p["module"]: p["peak_bytes"] for p in ran}
        assert len(peaks[side]) == len(ran), sorted(p["module"] for p in ran)
    return {"diagnosis": diagnosis, "peaks": peaks}


@pytest.mark.parametrize("case", list(RULES))
def test_freed_bytes_equal_the_compiled_and_the_captured_difference(case: str, captured: dict[str, Any]) -> None:
    f, args, g, fixed_args = _cases()[case]
    compiled = _footprint(jax.jit(f).lower(*args).compile()) - _footprint(jax.jit(g).lower(*fixed_args).compile())
    code, time_code = RULES[case]
    module = f"jit_{case}"
    found = [x for x in captured["diagnosis"]["findings"] if x["module"] == module
             and code in (x["code"], *(x["extra"].get("memory_codes") or ()))]
    assert len(found) == 1, [(x["code"], x["op"]) for x in found]
    # One waste, one finding: the memory half is folded into the time finding on the same op (a
    # temporary twin has none: XLA:CPU's time of it is no rule's).
    assert found[0]["code"] == time_code
    freed = found[0]["extra"]["freed_bytes"]
    peaks = captured["peaks"]
    assert freed == compiled == peaks["waste"][module] - peaks["fixed"][f"{module}_fixed"] > 0


def test_the_fixed_programs_are_not_flagged(tmp_path: Path) -> None:
    doc = _run("step_fixed", tmp_path / "fixed", "diagnose")
    assert not [x for x in doc["findings"] if x["code"] in ("HD017", "HD018", "HD019")
                or {"HD017", "HD018", "HD019"} & set(x["extra"].get("memory_codes") or ())]
