"""The attack set: every hostile case of ``attack_set.CASES`` through the real CLI, as its own process.

Each case builds its input in a fresh tmp dir; the judge is the same for all (exit 2 with one line, or
a bounded result; never exit 3, a traceback, a signal, a run past the deadline) plus the case's own
check of what it wrote (GitHub's workflow-command syntax, a Markdown parser, ``xml.dom.minidom``,
``csv``, the folder a planted link aimed at).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from attack_cases import MORE_CASES
from attack_set import CASES, SCHEDULER_CASES, Case, common_judge, fake_scheduler, run_case

ALL = CASES + MORE_CASES


@pytest.mark.parametrize("case", ALL, ids=[f"{c.surface}: {c.name}" for c in ALL])
def test_case(case: Case, tmp_path: Path) -> None:
    if case.surface in ("cache", "limits") or "html" in case.name or case.name.startswith("report md"):
        pytest.importorskip("vl_convert")
    if "Parquet" in case.name:
        pytest.importorskip("pyarrow")
    args, check = case.build(tmp_path)
    outcome = run_case(args, cwd=tmp_path, timeout=case.deadline_s, address_space=case.address_space)
    common_judge(outcome)
    check(outcome, tmp_path)


@pytest.mark.parametrize("mode", SCHEDULER_CASES)
def test_scheduler_case(mode: str, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from attack_set import RUN

    with fake_scheduler(mode) as address:
        start = time.monotonic()
        # The deadline as a user sets it (the default's 20 s is the same code, waited longer).
        outcome = run_case(["stats", str(RUN), "--scheduler", address], cwd=tmp_path, timeout=60,
                           env={"HLO_DOCTOR_SCHEDULER_TIMEOUT": "5"})
    took = time.monotonic() - start
    common_judge(outcome)
    # One line, the error naming the address; within the deadline plus the command's start.
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert outcome.rc == 2 and len(lines) == 1 and lines[0].startswith("error:") and address in lines[0], \
        outcome.stderr[-2000:]
    assert took < 5 + 15, took
    if mode == "silent":
        assert "did not answer within 5 s" in lines[0], lines[0]
