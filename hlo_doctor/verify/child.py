"""The entry of an A/B child process (``diagnose``'s promises): a job file in, an answer file out.

What the measured code prints goes to stderr, never into the answer; any failure is an A/B that
cannot run, answered ``{"ok": false, "reason": ...}`` in one line, so the parent never sees a
traceback.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hlo_doctor.core.errors import HloDoctorError


def child_main(run: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str]) -> int:
    """``run`` on the job at ``argv[0]``; its answer (or why it could not run) written to ``argv[1]``."""
    job_path, out_path = Path(argv[0]), Path(argv[1])
    try:
        with contextlib.redirect_stdout(sys.stderr):
            doc = run(json.loads(job_path.read_text(encoding="utf-8")))
    except HloDoctorError as exc:
        doc = {"ok": False, "reason": exc.what}
    except Exception as exc:  # noqa: BLE001 - any failure here is an A/B that cannot run, said in one line
        doc = {"ok": False, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    out_path.write_text(json.dumps(doc), encoding="utf-8")
    return 0
