"""``stats --format json`` carries the compile counts the table's header prints ("4 compiles in the
traced window (+ 2 eager ops)"), beside the raw compile-work events they are counted from (several
per compile: lowering, the backend compile, the compiler's own event).

Judge: jax's own count of backend compiles (``jax.monitoring``'s ``backend_compile_duration`` events)
over the same calls of the same program, in a process of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main

PROGRAM = Path(__file__).resolve().parents[1] / "profile_programs" / "recompiles.py"

JAX_COUNT = f"""
import importlib.util, jax
spec = importlib.util.spec_from_file_location("recompiles", {str(PROGRAM)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
n = [0]
def seen(name, secs, **kw):
    n[0] += name == "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_duration_secs_listener(seen)
jax.block_until_ready(m.step())  # the warm-up call, as profile --warmup 1
n[0] = 0
for _ in range(2):
    jax.block_until_ready(m.step())
print(n[0])
"""


def test_stats_json_counts_the_compiles_the_table_prints(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # A process of its own, as the judge's: in this one, programs other tests compiled (jax's caches
    # are per process) would not compile again inside the window, and the counts would differ.
    profiled = subprocess.run([sys.executable, "-m", "hlo_doctor", "profile", f"{PROGRAM}:step", "--steps", "2",
                               "--warmup", "1", "--out", str(run)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"})
    output = profiled.stdout + profiled.stderr
    assert profiled.returncode == 0, output
    header = re.search(r"(\d+) compiles? in the traced window(?: \(\+ (\d+) eager ops?\))?", output)
    assert header, output
    out = tmp_path / "stats.json"
    assert CliRunner().invoke(main, ["stats", str(run), "--format", "json", "-o", str(out)]).exit_code == 0
    doc = json.loads(out.read_text())
    compiles = doc["compiles"]
    assert (compiles["programs"], compiles["eager_ops"]) == (int(header[1]), int(header[2] or 0))
    assert compiles["line"] == header[0] and compiles["events"] == len(doc["compile_events"])
    assert compiles["events"] > compiles["programs"] + compiles["eager_ops"]  # raw events are not compiles
    jax_count = subprocess.run([sys.executable, "-c", JAX_COUNT], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert jax_count.returncode == 0, jax_count.stderr
    assert compiles["programs"] + compiles["eager_ops"] == int(jax_count.stdout.split()[-1])
    # The export still reads back (the counts are output, not part of the table).
    assert CliRunner().invoke(main, ["stats", str(out)]).exit_code == 0
