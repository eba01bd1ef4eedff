"""Judge a diagnosis of the field set against the hand list and the what-if figures.

    python benchmarks/field/judge.py OUTROOT DIAGNOSE_DIR

DIAGNOSE_DIR holds ``NAME.json`` from ``hlo-doctor diagnose RUN --format json`` for the captures
under OUTROOT (``diagnose_all.sh`` writes them). For each hand-listed waste with a what-if: the
findings on its ops (same module and op; for a recompiled loop, HD005 naming the program), their
recoverable time in % of the step, and its ratio to the what-if saving on the CPU clock (the goal:
within 0.7-1.3). Then, per capture, the findings on no listed waste's ops.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wastes import WASTES, Waste, select  # noqa: E402


def whatif_pct(root: Path, w: Waste) -> float | None:
    """The latest what-if's CPU-clock saving in % (None without one)."""
    path = root / "whatif" / f"{w.capture}.json"
    if not w.variant or not path.exists():
        return None
    entry = json.loads(path.read_text())["variants"].get(w.variant)
    return None if entry is None else float(entry["cpu"]["saving_pct"])


def matched(root: Path, w: Waste, diag: dict[str, Any]) -> list[dict[str, Any]]:
    """The diagnosis's findings on the waste's ops."""
    findings = diag.get("findings", [])
    if w.compiles:
        return [f for f in findings if f["code"] == "HD005" and w.compiles in f["message"]]
    steps = json.loads((root / "runs" / w.capture / "opstats.json").read_text())["num_steps"]
    with (root / "stats" / f"{w.capture}.csv").open() as fh:
        keys = {(r["module"], r["op"]) for r in select(list(csv.DictReader(fh)), w, steps)}
    return [f for f in findings if (f.get("module"), f.get("op")) in keys]


def main() -> None:
    """Command line: see the module docstring."""
    root, ddir = Path(sys.argv[1]), Path(sys.argv[2])
    print("| capture | waste | what-if % (CPU) | findings on its ops (rule severity recoverable%) "
          "| found % | found / what-if |")
    print("|---|---|---|---|---|---|")
    used: dict[str, set[int]] = {}
    for w in WASTES:
        path = ddir / f"{w.capture}.json"
        wi = whatif_pct(root, w)
        if not path.exists() or wi is None:
            continue
        diag = json.loads(path.read_text())
        step = diag["step_time_us"]
        found = matched(root, w, diag)
        used.setdefault(w.capture, set()).update(id(f) for f in found)
        pct = sum(f["recoverable_us"] or 0 for f in found) / step * 100
        desc = ", ".join(f"{f['code']} {f['severity']} {100 * (f['recoverable_us'] or 0) / step:.1f}"
                         for f in found) or "none"
        ratio = f"{pct / wi:.2f}" if wi > 0.5 else "-"
        print(f"| {w.capture} | {w.key} | {wi:.1f} | {desc} | {pct:.1f} | {ratio} |")
    print("\nFindings on no listed waste's ops (rule severity recoverable% op):\n")
    for name in dict.fromkeys(w.capture for w in WASTES):
        path = ddir / f"{name}.json"
        if not path.exists():
            continue
        diag = json.loads(path.read_text())
        found_ids: set[int] = set()
        for w in (w for w in WASTES if w.capture == name):
            found_ids.update(id(f) for f in matched(root, w, diag))
        extra = [f for f in diag.get("findings", []) if id(f) not in found_ids]
        step = diag["step_time_us"]
        print(f"- {name}: " + ("; ".join(
            f"{f['code']} {f['severity']} {100 * (f['recoverable_us'] or 0) / step:.2f} "
            f"{f.get('module')}/{f.get('op')}" for f in extra) or "none"))


if __name__ == "__main__":
    main()
