"""Record the stacks of real field captures' findings, for the unit test of the library remedies.

    python benchmarks/field/remedy_frames.py NAME=DIAGNOSIS.json ... > tests/lint/data/field_stacks.json

Each DIAGNOSIS.json is ``hlo-doctor diagnose RUN --format json`` of a capture of a loop in this folder
(``capture.sh``). Kept per finding: the capture's name, the rule code, the module and op, its source line, and
the op's whole stack as jax recorded it, innermost first. Paths are written machine-independent: the
part after ``site-packages/`` under ``/venv/lib/python3.11/site-packages/``, a file of this
repository relative to its root, the standard library as it is; the first 16 frames of each stack (the rest
are the capture's and the interpreter's); nothing else is changed. One finding per line.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_FRAMES = 16
"""Frames kept per stack, innermost first (the rest are the capture's and the interpreter's)."""
_REPO = str(Path(__file__).resolve().parents[2]) + "/"
_SITE = re.compile(r"^.*/site-packages/")


def neutral(path: str) -> str:
    """A frame's file without the machine's folders."""
    if _SITE.match(path):
        return _SITE.sub("/venv/lib/python3.11/site-packages/", path)
    if path.startswith(_REPO):
        return path[len(_REPO):]
    # A checkout of this repository elsewhere (a worktree): from the first folder of the repo on.
    m = re.search(r"/((?:benchmarks|hlo_doctor|tests)/.*)$", path)
    return m.group(1) if m else path


def main(args: list[str]) -> int:
    out = []
    for arg in args:
        name, _, path = arg.partition("=")
        doc = json.loads(Path(path).read_text())
        for f in doc["findings"]:
            path, _, line = f["source"].rpartition(":")
            source = f"{neutral(path)}:{line}" if path else ""
            out.append({"capture": name, "code": f["code"], "module": f["module"], "op": f["op"], "source": source,
                        "stack": [[neutral(fr["file"]), fr["line"], fr["function"]] for fr in f["stack"][:_FRAMES]]})
    findings = ",\n ".join(json.dumps(f) for f in out)
    note = json.dumps("recorded by benchmarks/field/remedy_frames.py from hlo-doctor diagnose of captures of "
                      "benchmarks/field loops (keras-hub 0.32.0, transformers 4.57.6, flax 0.12.8, "
                      "recurrentgemma 1.0.1, jax 0.10.2, XLA:CPU); paths made machine-independent, the first "
                      f"{_FRAMES} frames of each stack")
    sys.stdout.write(f'{{"note": {note},\n "findings": [\n {findings}]}}\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
