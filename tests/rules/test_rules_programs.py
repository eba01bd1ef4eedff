"""HD009 and HD010 on small JAX decode loops, run through ``profile`` and ``diagnose`` on XLA:CPU.

The programs are in ``programs/``: a ``while`` loop over a KV-cache state without and with
donation, and a loop that copies its carried cache on every iteration, without and with the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from profiled_rules import line_of, profile_and_diagnose

from hlo_doctor.capture import resolve_target

PROGRAMS = Path(__file__).parent / "programs"


def _profile_and_diagnose(target: str, out: Path) -> dict:  # type: ignore[type-arg]
    file, function = target.rsplit(":", 1)
    return profile_and_diagnose(PROGRAMS / file, function, out)


def _line(program: str, text: str) -> int:
    """The line of ``program`` holding ``text``."""
    return line_of(PROGRAMS / program, text)


def _codes(doc: dict, code: str) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in doc["findings"] if f["code"] == code]


def test_target_file_with_a_dataclass_under_future_annotations(tmp_path: Path) -> None:
    # A string ``ClassVar`` annotation makes dataclasses look the module up in sys.modules.
    target = tmp_path / "config_step.py"
    target.write_text(
        "from __future__ import annotations\n\nimport dataclasses\nimport typing\n\n\n"
        "@dataclasses.dataclass\nclass Config:\n    width: int = 4\n"
        "    names: typing.ClassVar[tuple[str, ...]] = ()\n\n\n"
        "def step() -> int:\n    return Config().width\n")
    assert resolve_target(f"{target}:step")() == 4


def test_hd009_loop_state_not_donated(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("decode_no_donation.py:step", tmp_path / "run")
    found = _codes(doc, "HD009")
    # Two layers, a K and a V cache each: four copies of the state before the while, all from the
    # one line that runs the loop: one cause, one finding listing the four (the position, a scalar,
    # is below the size floor).
    assert len(found) == 1, [f["op"] for f in found]
    f = found[0]
    assert f["extra"]["same_line_ops"] == 4
    copies = f["extra"]["ops"]
    assert len(copies) == 4 and all(op.startswith("copy") for op in copies)
    assert f["module"] == "jit__loop" and f["shape"] == "f32[64,4,32]{2,1,0}"
    assert f["time_per_step_us"] > 0 and f["recoverable_us"] == pytest.approx(f["time_per_step_us"])
    assert f["source"].endswith(f"decode_no_donation.py:{_line('decode_no_donation.py', 'while_loop(')}")
    assert "not donated" in f["message"] and "4 ops of this program from one line" in f["message"]
    assert not _codes(doc, "HD002") and not _codes(doc, "HD010")


def test_hd009_gone_with_donation(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("decode_no_donation.py:step_donated", tmp_path / "run")
    assert not _codes(doc, "HD009")


def test_hd010_loop_carried_copy(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("carried_copy.py:step", tmp_path / "run")
    found = _codes(doc, "HD010")
    assert {f["op"] for f in found} >= {"copy.5"}
    for f in found:
        assert f["module"] == "jit_decode" and f["extra"]["tuple_index"] == 1
        assert f["extra"]["iterations_per_step"] == pytest.approx(16)
        assert "16 iterations per step" in f["message"] and "us per iteration" in f["message"]
        assert f["time_per_step_us"] > 0
    # The entry also copies the undonated cache before the loop.
    assert [f["op"] for f in _codes(doc, "HD009")] == ["copy.10"]


def test_hd010_gone_when_the_body_only_writes(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("carried_copy.py:step_fixed", tmp_path / "run")
    assert not _codes(doc, "HD010")
