"""How many findings do the HLO-only rules make on HLO nobody here wrote?

Runs every bundled rule that needs only HLO (``requires == ("hlo",)``) over each module of a corpus
directory of ``*.hlo`` files (one module per file, e.g. XLA's own test modules as XLA re-prints
them; see ``benchmarks/hlo_corpus.py`` for how such a corpus is built) and counts findings per rule
(merged per file as ``diagnose`` merges them: one per cause),
and per rule and stage (optimized or as lowered, :mod:`hlo_doctor.lint.stage`). Modules the parser
refuses are counted apart. ``--json OUT`` writes every finding (file, rule, op, severity, message),
which is what one reads to judge a sample of them by hand.

Usage::

    python benchmarks/rules_corpus.py CORPUS_DIR [--limit N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _stage(module: Any, origin: str) -> str:
    """``optimized``/``unoptimized`` where the tree tells it; ``?`` for a tree without stages."""
    try:
        from hlo_doctor.lint.stage import stage_of
    except ImportError:
        return "?"
    return stage_of(module, origin).name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from hlo_doctor.hlo import parse_modules
    from hlo_doctor.lint import Context, load_rulebook, run_rule
    from hlo_doctor.lint.merge import merge_recompiled, merge_same_line

    rules = [r for r in load_rulebook().select((), ()) if tuple(r.rule.requires) == ("hlo",)]
    files = sorted(args.corpus.rglob("*.hlo"))[: args.limit or None]
    per_rule: Counter[str] = Counter()
    per_stage: Counter[tuple[str, str]] = Counter()
    modules_by_stage: Counter[str] = Counter()
    refused = 0
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for path in files:
        try:
            modules = parse_modules(path.read_text(), origin=str(path))
        except Exception:  # noqa: BLE001 - a refused module is counted, not fatal
            refused += 1
            continue
        for m in modules:
            modules_by_stage[_stage(m, str(path))] += 1
        ctx = Context(modules=tuple(modules), origin=str(path), kind="hlo")
        # Merged as diagnose merges them: what a person reads (one finding per cause).
        found = merge_same_line(merge_recompiled(f for r in rules for f in run_rule(r, ctx)))
        for f in found:
            stage = next((_stage(m, str(path)) for m in modules if m.name == f.module), "?")
            per_rule[f.code] += 1
            per_stage[(f.code, stage)] += 1
            rows.append({"file": path.name, "code": f.code, "module": f.module, "op": f.op,
                         "severity": str(f.severity), "stage": stage, "message": f.message})
    elapsed = time.perf_counter() - t0
    print(f"{len(files)} files, {refused} refused by the parser, modules by stage: "
          f"{dict(sorted(modules_by_stage.items()))}; rules: {', '.join(r.code for r in rules)}; {elapsed:.0f} s")
    print(f"{sum(per_rule.values())} findings")
    for code in sorted(per_rule):
        stages = ", ".join(f"{s} {n}" for (c, s), n in sorted(per_stage.items()) if c == code)
        print(f"  {code}: {per_rule[code]} ({stages})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
