"""Threat: paths and names that look like rich markup (``[red]``, ``[/x]``) are printed as markup.

The message is mangled (the path the user must act on is not what is shown) or rich raises on an
unmatched closing tag and the command ends in exit 3 after doing its work. Every path, module, op,
source and user rule text is printed as text: what is shown is what is on disk. (apply-fix's output
is covered in ``test_traversal.py``.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from hlo_doctor.cli import main
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.lint.runner import Diagnosis
from hlo_doctor.render.diagnosis.terminal import to_terminal

REPO = Path(__file__).resolve().parents[2]
SEED_HLO = REPO / "sample_traces" / "seed_v5e_b512" / "jit_sample(23).hlo.txt"
EXPORT = REPO / "sample_traces" / "engine_b64_fixed" / "opstats.json"
STEP = f"{REPO / 'tests' / 'profile_programs' / 'sampler_step.py'}:step"
NAME = "[red]x[/x]"  # '[/x]' is also a folder separator: the path goes through a folder named '[red]x['


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stderr


def test_an_input_path_with_markup_is_shown_as_written(tmp_path: Path) -> None:
    hlo = tmp_path / NAME / "m[bold].hlo.txt"
    hlo.parent.mkdir(parents=True)
    shutil.copy(SEED_HLO, hlo)
    code, err = run("diagnose", str(hlo))
    assert code == 0 and "HD002" in err
    code, err = run("diagnose", str(tmp_path / NAME / "missing[red].hlo.txt"))
    assert code == 2 and f"{tmp_path / NAME / 'missing[red].hlo.txt'} does not exist" in err


def test_error_messages_quote_markup_verbatim(tmp_path: Path) -> None:
    truncated = tmp_path / "t[red].hlo.txt"
    truncated.write_text(SEED_HLO.read_text()[:700])
    code, err = run("diagnose", str(truncated))
    assert code == 2 and "t[red].hlo.txt:" in err and "truncated" in err
    code, err = run("gate", str(tmp_path / "base[/x]"), str(EXPORT))
    assert code == 2 and "base[/x] does not exist" in err


def test_module_and_source_names_in_tables_are_text(tmp_path: Path) -> None:
    doc = json.loads(EXPORT.read_text())
    for row in doc["rows"]:
        row["module"] = f"[red]{row['module']}[/x]"
        row["source"] = "[bold]/a/b[/x].py:3"
    for sample in doc["per_step"]["rows"]:
        sample[1] = f"[red]{sample[1]}[/x]"
    path = tmp_path / "marked.json"
    path.write_text(json.dumps(doc))
    code, err = run("stats", str(path), "--top", "3")
    assert code == 0 and "[red]jit_sample[/x]" in err
    code, err = run("gate", str(path), str(path), "--top", "3")
    assert code == 0 and "[red]jit_" in err


def test_the_diagnosis_table_prints_names_as_text() -> None:
    finding = Finding(code="HD002", name="copy.aliasing-input", severity=Severity.HIGH, message="[/x] a copy",
                      module="[red]jit_sample[/x]", op="copy[/]", shape="f32[8]", source="[bold]/s/x.py:3",
                      evidence=("[/red] evidence",))
    diagnosis = Diagnosis(origin="run[/x]", kind="hlo", backend="", step_time_us=None, recoverable_us=None, num_steps=0,
                          findings=(finding,), rules_run=("HD002",), rules_skipped=(), modules=("[red]jit_sample[/x]",))
    console = Console(record=True, width=200, color_system=None)
    console.print(to_terminal(diagnosis, details=True))
    text = console.export_text()
    for shown in ("[red]jit_sample[/x]", "copy[/]", "[/x] a copy", "hlo-doctor diagnose run[/x]"):
        assert shown in text


def test_profile_out_with_markup_is_reported_as_written(tmp_path: Path) -> None:
    out = tmp_path / "run[red]"
    code, err = run("profile", STEP, "--steps", "1", "--warmup", "0", "--out", str(out))
    assert code == 0 and f"wrote {out}" in err


def test_a_user_rules_folder_with_markup(tmp_path: Path) -> None:
    rules = tmp_path / "rules[red]"
    rules.mkdir()
    (rules / "xx100_broken.py").write_text("this is not python [/x]\n")
    code, err = run("rules", "--rules", str(rules))
    assert code in (0, 1) and f"{rules / 'xx100_broken.py'}" in err


def test_a_progress_stage_named_with_markup_is_shown_as_written_on_a_terminal() -> None:
    """A measurement's stage names the capture's programs (``measuring F: replaying jit_x(3)``): on a
    terminal (a real pseudo-terminal, where rich draws its bars) a module name with markup is shown as
    written, and the bar does not end the command."""
    import os
    import pty
    import subprocess
    import sys

    stage = f"measuring bf16-greedy-sampler: replaying jit_{NAME}(3)"
    code = ("from hlo_doctor.cli.progress import progress_bars\n"
            "with progress_bars(keep=True) as p:\n"
            f"    p({stage!r}, 0, 1)\n"
            f"    p({stage!r}, 1, 1)\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
                            | {"TERM": "xterm", "COLUMNS": "200"}, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")[-800:]
    os.close(master)
    shown = b"".join(chunks).decode(errors="replace")
    assert f"jit_{NAME}(3)" in shown, shown[-800:]
