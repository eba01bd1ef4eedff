"""Threat: a link planted while a command writes (after its folder check), by a thread racing the writer.

A second thread swaps the folder the writer is about to use for a symbolic link to an ``outside``
folder, again and again, while the writer writes: nothing ever lands outside; each write either lands
in the real folder or is an input error (exit 2) naming the link. Through the CLI, ``report --format md``
has its chart folder swapped for a link as soon as it appears.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from threats import REPO, cli

from hlo_doctor.core.atomic import write_atomically
from hlo_doctor.core.errors import InputError

RUN = REPO / "sample_traces" / "engine_b64_original_a"


def _swapper(folder: Path, outside: Path, stop: threading.Event) -> threading.Thread:
    """A thread that keeps turning ``folder`` into a link to ``outside`` and back into a folder."""
    aside = folder.with_name(folder.name + ".aside")

    def recover() -> None:
        # The writer makes a missing folder again: where it did so between the move aside and the
        # link, the folder set aside goes back in place of the writer's (else every later move fails
        # and the race stops).
        if aside.is_dir():
            if folder.is_symlink():
                os.unlink(folder)
            elif folder.is_dir():
                shutil.rmtree(folder)
            os.rename(aside, folder)

    def swap() -> None:
        while not stop.is_set():
            try:
                recover()
                os.rename(folder, aside)
                os.symlink(outside, folder)
                time.sleep(0.0005)
                os.unlink(folder)
                os.rename(aside, folder)
            except OSError:
                time.sleep(0.0001)
    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    return thread


def test_a_folder_swapped_for_a_link_during_writes_is_never_followed(tmp_path: Path) -> None:
    folder, outside = tmp_path / "charts", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    stop = threading.Event()
    thread = _swapper(folder, outside, stop)
    written = refused = i = 0
    deadline = time.monotonic() + 30
    try:
        # Until the race has gone both ways (the swapper thread shares the interpreter with the
        # writer, so on a loaded machine it may take many writes), 400 writes at least.
        while i < 400 or (not (written and refused) and time.monotonic() < deadline):
            i += 1
            try:
                write_atomically(folder / f"chart{i % 7}.svg", b"<svg/>", folder_no_link=True)
                written += 1
            except InputError as exc:
                assert "symbolic link" in exc.what or "cannot write" in exc.what, exc.what
                refused += 1
    finally:
        stop.set()
        thread.join()
    assert list(outside.iterdir()) == []  # nothing ever written through the link
    assert written and refused, (written, refused)  # the race was real both ways


def test_a_link_at_the_final_name_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.svg"
    outside.write_bytes(b"victim")
    target = tmp_path / "out" / "chart.svg"
    target.parent.mkdir()
    target.symlink_to(outside)
    write_atomically(target, b"<svg/>", folder_no_link=True)
    assert outside.read_bytes() == b"victim" and not target.is_symlink() and target.read_bytes() == b"<svg/>"


def test_report_md_with_its_chart_folder_swapped_mid_run(tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    run = work / "run"
    shutil.copytree(RUN, run)
    charts = work / "rep-charts"
    stop = threading.Event()

    def plant() -> None:  # as soon as the command makes its chart folder, make it a link
        while not stop.is_set():
            if charts.is_dir() and not charts.is_symlink():
                try:
                    shutil.rmtree(charts)
                    charts.symlink_to(outside)
                except OSError:
                    continue
                return
            time.sleep(0.0005)

    thread = threading.Thread(target=plant, daemon=True)
    thread.start()
    try:
        r = cli("report", str(run), "--format", "md", "-o", str(work / "rep.md"), timeout=300)
    finally:
        stop.set()
        thread.join()
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert list(outside.iterdir()) == []
    if r.returncode == 2:  # the link seen by the folder check or by the write: one line naming the folder
        lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and str(charts) in lines[0], r.stderr[-2000:]
