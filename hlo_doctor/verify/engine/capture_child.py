"""``doctor``'s capture of the baseline engine in a process of its own, so that the process that then
measures (verify's rounds) has never run the profiler.

Found on a TPU v5e (jax 0.10.2, the bundled engine at batch 64, vocab 256,000): in a process that
had captured the engine, verify's rounds ran in slow episodes, whole rounds or the first 5-9 decode
steps of a round at 3.0-4.2 ms against 2.0-2.2 ms (``benchmarks/device/verify_history.py``); a
process that had only warmed up and stepped the engine, or a fresh one, showed none. ``doctor``
measured 1.43 ms of the decode step there, while the fix saves about 0.5 ms (fresh ``verify``: x0.759
[0.701, 0.823] of 2.21 ms; diagnose's engine A/B, a child of its own: 0.5 ms [0.3, 0.6]).

``python -m hlo_doctor.verify.engine.capture_child JOB.json OUT.json``: the job names the engine tree
(None: the bundled one), its configuration's fields, the target's name, the run directory and the
steps; the answer is ``{"ok": true, "run": PATH}`` or ``{"ok": false, "reason": ...}``. Progress goes
to stderr as one line per report (:data:`PROGRESS`), which the parent passes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import ProgressFn
from hlo_doctor.verify.child import child_main

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROGRESS = "hlo-doctor-progress "
"""The prefix of a progress line on the child's stderr: ``PROGRESS {"stage": ..., "done": ..., "total": ...}``."""
TIMEOUT_S = 1800.0
"""The capture's whole run (imports, the engine's warm-up and precompile, the traced steps)."""


def capture_apart(engine: Path | None, config: DataclassInstance, *, name: str, out_dir: Path, steps: int,
                  progress: ProgressFn | None = None, timeout_s: float = TIMEOUT_S) -> Path:
    """Capture ``steps`` decode steps of the engine tree ``engine`` (None: the bundled engine) at
    ``config`` (its ``EngineConfig``) into the run directory ``out_dir``, in a child process; the run
    directory.

    Raises:
        InputError: the capture failed (its one-line reason) or ran past ``timeout_s``.
    """
    fields = dataclasses.asdict(config)
    with tempfile.TemporaryDirectory(prefix="hlo-doctor-capture-") as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job.write_text(json.dumps({"engine": None if engine is None else str(engine), "config": fields,
                                   "name": name, "out_dir": str(out_dir), "steps": steps}), encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-m", "hlo_doctor.verify.engine.capture_child", str(job), str(out)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
        expired = threading.Event()

        def kill() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
            except ProcessLookupError:
                pass

        def stop() -> None:
            expired.set()
            kill()

        timer = threading.Timer(timeout_s, stop)
        timer.start()
        tail: list[str] = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith(PROGRESS):
                    try:
                        report = json.loads(line[len(PROGRESS):])
                        if progress is not None:
                            progress(str(report["stage"]), int(report["done"]), int(report["total"]))
                    except (ValueError, KeyError, TypeError):
                        pass
                elif line.strip():
                    tail = [*tail[-19:], line.rstrip()]
            proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM: the child (a session of its own) goes too
            kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
            # A child stopped while it wrote leaves its staging folder beside out_dir (named by its
            # pid: capture.staged_run_dir): removed here, as the child would have on an error.
            for partial in Path(out_dir).absolute().parent.glob(f".{Path(out_dir).name}.partial-{proc.pid}-*"):
                shutil.rmtree(partial, ignore_errors=True)
        if expired.is_set():
            raise InputError(f"the engine's capture ran past {timeout_s:.0f} s and was stopped",
                             "make the engine smaller (--vocab, --batch) or check that it runs: hlo-doctor engine run")
        if not out.exists():
            raise InputError(f"the engine's capture stopped (exit {proc.returncode})"
                             + (f": {tail[-1][:200]}" if tail else ""), "run hlo-doctor profile on the engine to see why")
        doc = json.loads(out.read_text(encoding="utf-8"))
    if not doc.get("ok"):
        raise InputError(f"the engine's capture failed: {str(doc.get('reason', 'no reason given'))[:300]}",
                         "run hlo-doctor profile on the engine to see why")
    return Path(doc["run"])


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Load the engine at the job's configuration and capture it; the answer the parent reads."""
    from hlo_doctor.engines import load_engine
    from hlo_doctor.engines.session import capture_engine, engine_config

    def report(stage: str, done: int, total: int) -> None:
        print(PROGRESS + json.dumps({"stage": stage, "done": done, "total": total}), file=sys.__stderr__, flush=True)

    module = load_engine(None if job["engine"] is None else Path(job["engine"]))
    config = engine_config(module, job["config"], strict=True)
    path = capture_engine(module, config, name=str(job["name"]), out_dir=Path(job["out_dir"]), steps=int(job["steps"]),
                          progress=report)
    return {"ok": True, "run": str(path)}


def main(argv: list[str]) -> int:
    return child_main(run, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
