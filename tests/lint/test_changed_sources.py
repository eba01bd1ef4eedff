"""A diagnosis of a capture whose source files changed since says so: ``profile`` records each file
the ops' lines point into (SHA-256 in run.json) and ``diagnose`` names the files that differ now, with
the lines its findings show (which are the capture's)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main

PROGRAM = '''
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


LOGITS = jnp.asarray(np.random.default_rng(0).standard_normal((8, 1024)), jnp.bfloat16)


def step():
    logits = LOGITS.astype(jnp.float32)
    return sample(logits)
'''


def test_diagnose_names_a_file_changed_since_the_capture(tmp_path: Path) -> None:
    program = tmp_path / "greedy.py"
    program.write_text(PROGRAM)
    run = tmp_path / "run"
    profiled = CliRunner().invoke(main, ["profile", f"{program}:step", "--steps", "2", "--warmup", "1",
                                         "--out", str(run)])
    assert profiled.exit_code == 0, profiled.output
    record = json.loads((run / "run.json").read_text())["source_sha256"]
    assert any(Path(name).name == "greedy.py" for name in record), record
    unchanged = CliRunner().invoke(main, ["diagnose", str(run), "--format", "json", "--no-what-if"])
    assert unchanged.exit_code == 0 and "since the capture" not in unchanged.stderr
    findings = json.loads(unchanged.stdout)["findings"]

    def here(f: dict[str, str]) -> bool:
        # This program's own file: a capture taken in a test worker also lists programs compiled there
        # earlier (another test's softmax_greedy.py, or a greedy.py in another folder).
        return bool(f["source"]) and Path(f["source"].rpartition(":")[0]).resolve() == program.resolve()

    lines = sorted({f["source"].rpartition(":")[2] for f in findings if here(f)})
    assert lines, findings
    program.write_text("# a line added above the code\n" + PROGRAM)
    changed = CliRunner().invoke(main, ["diagnose", str(run), "--format", "json", "--no-what-if"])
    assert changed.exit_code == 0
    notes = [line for line in changed.stderr.splitlines() if "since the capture" in line]
    assert len(notes) == 1 and "greedy.py changed since the capture: line" in notes[0], changed.stderr
    # The note names the lines the findings it stands beside show (a call line read from the source,
    # as HD003's and HD015's are, may fall back to the capture's own line once the file has changed).
    shown = sorted({f["source"].rpartition(":")[2] for f in json.loads(changed.stdout)["findings"] if here(f)},
                   key=int)
    named = notes[0].split("since the capture: line", 1)[1].split("may have moved", 1)[0]
    assert [n.strip() for n in named.lstrip("s").split(",")] == shown, (notes[0], shown, lines)
