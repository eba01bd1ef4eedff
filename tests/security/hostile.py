"""Hostile inputs the attack-set tests share (helpers, not tests): names that try every output format's
injection, and real captures rewritten to carry them.

Each builder writes into the folder it is given (a test's tmp dir) and returns the path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SEED_HLO = REPO / "sample_traces" / "seed_v5e_b512" / "jit_sample(23).hlo.txt"
EXPORT = REPO / "sample_traces" / "engine_b64_original_a" / "opstats.json"

NAME = ("x\n::error file=a.py,line=1::pwned\r::warning::cr\x1b[31mRED\x1b]8;;https://evil.example\x07L\x1b]8;;\x07"
        "\u202eevil\u2066\u2069\u2028<img src=x onerror=alert(1)><script>alert(2)</script>`|=cmd|' /C calc'!A0"
        "\x01\x0b\x7f\x9b# h\n## heading")
"""One name that tries them all: a GitHub workflow command after LF and after CR, ANSI colour, an OSC 8
link, bidi override and isolates, U+2028, raw HTML and a script, a backtick and a pipe (code span, table
cell), a spreadsheet formula, C0/C1 controls XML 1.0 forbids, a Markdown heading after a newline."""

FORMULA = "=HYPERLINK(\"https://evil.example\",\"x\")"
"""A name that a spreadsheet would run."""


def hostile_hlo(folder: Path, name: str = NAME) -> Path:
    """The seed module with ``name`` in the source file of its aliasing copy (HD002 reports it)."""
    text = SEED_HLO.read_text()
    meta = 'metadata={op_name="jit(sample)/copy" source_file="/s/' + name.replace('"', "'") + '.py" source_line=3}'
    out = folder / "hostile.hlo.txt"
    out.write_text(text.replace("copy(%Arg_1.2)", "copy(%Arg_1.2), " + meta), newline="")
    return out


def _renamed(doc: dict[str, Any], name: str, top: int) -> dict[str, Any]:
    names: dict[tuple[str, str], tuple[str, str, str]] = {}
    for row in doc["rows"][:top]:
        module, op = f"{name}{row['module']}", f"{name}{row['op']}"
        key = row["canonical_key"].replace(row["module"], module, 1)
        names[(row["module"], row["op"])] = (module, op, key)
        row.update(module=module, op=op, canonical_key=key, source=f"/s/{name}.py:3", op_name=name)
    for sample in doc["per_step"]["rows"]:
        if (sample[1], sample[3]) in names:
            sample[1], sample[3], sample[4] = names[(sample[1], sample[3])]
    return doc


def hostile_exports(folder: Path, name: str = NAME, *, slower: float = 3.0, top: int = 5) -> tuple[Path, Path]:
    """(baseline, candidate) op-stats exports whose top ops carry ``name``; the candidate's fourth op
    (about 7% of the op time, too little to move the machine-speed factor) is ``slower`` times slower in
    every step: a regression the gate must fail."""
    base = _renamed(json.loads(EXPORT.read_text()), name, top)
    cand = _renamed(json.loads(EXPORT.read_text()), name, top)
    first = cand["rows"][3]
    extra = first["time_per_step_us"] * (slower - 1)
    for key in ("total_time_us", "self_time_us"):
        first[key] *= slower
    first["avg_time_us"] *= slower
    first["time_per_step_us"] *= slower
    for sample in cand["per_step"]["rows"]:
        if (sample[1], sample[3]) == (first["module"], first["op"]):
            sample[5] *= slower
    cand["step_times_us"] = [t + extra for t in cand["step_times_us"]]
    cand["step_time_us"] += extra
    paths = folder / "base.json", folder / "cand.json"
    for path, doc in zip(paths, (base, cand), strict=True):
        path.write_text(json.dumps(doc))
    return paths
