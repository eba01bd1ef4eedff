"""The switch interval while a capture is read by several threads (core/handoff.py): set inside the
blocks, nested blocks and threads keep it until the last one leaves, then it is what it was."""

from __future__ import annotations

import sys
import threading

from hlo_doctor.core.handoff import HANDOFF_S, quick_handoffs


def test_set_inside_and_put_back() -> None:
    before = sys.getswitchinterval()
    with quick_handoffs():
        assert sys.getswitchinterval() == min(before, HANDOFF_S)
        with quick_handoffs():
            assert sys.getswitchinterval() == min(before, HANDOFF_S)
        assert sys.getswitchinterval() == min(before, HANDOFF_S)
    assert sys.getswitchinterval() == before


def test_threads_leave_it_set_until_the_last_one_leaves() -> None:
    before = sys.getswitchinterval()
    entered, leave = threading.Barrier(3), threading.Event()
    seen: list[float] = []

    def reader() -> None:
        with quick_handoffs():
            entered.wait()
            leave.wait()
            seen.append(sys.getswitchinterval())

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    entered.wait()
    assert sys.getswitchinterval() == min(before, HANDOFF_S)
    leave.set()
    for t in threads:
        t.join(10)
    assert seen == [min(before, HANDOFF_S)] * 2
    assert sys.getswitchinterval() == before


def test_a_shorter_interval_set_before_is_kept() -> None:
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(HANDOFF_S / 4)
        with quick_handoffs():
            assert sys.getswitchinterval() == HANDOFF_S / 4
    finally:
        sys.setswitchinterval(before)
