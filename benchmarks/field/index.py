"""Print OUTROOT's README: the field captures under OUTROOT (one row per run) and the HLO excerpts.

    python benchmarks/field/index.py OUTROOT > OUTROOT/README.md

Reads OUTROOT/stats/NAME.env (the loop file and its FIELD_* settings, written by capture.sh),
OUTROOT/runs/NAME/opstats.json (mean step wall time) and OUTROOT/whatif/NAME.json when present.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

LIBRARY = {
    "kerashub_gemma.py": "keras-hub 0.32.0 (keras 3.15.1) GemmaCausalLM.generate",
    "transformers_flax.py": "transformers 4.57.6 (flax 0.12.8) Flax generate",
    "recurrentgemma_sampler.py": "recurrentgemma 1.0.1 Sampler",
}


def rows(root: Path) -> list[str]:
    """One markdown row per capture that has an env file and a run directory."""
    out = []
    for env in sorted((root / "stats").glob("*.env")):
        name = env.stem
        run = root / "runs" / name / "opstats.json"
        if not run.exists():
            continue
        target, *settings = env.read_text().split()
        loop = Path(target.split(":")[0]).name
        step_ms = json.loads(run.read_text())["step_time_us"] / 1e3
        hlo = root / "hlo" / name
        whatif = root / "whatif" / f"{name}.json"
        out.append(f"| {name} | {LIBRARY.get(loop, loop)} | `{loop}` {' '.join(settings)} | "
                   f"{step_ms:,.1f} | runs/{name}, hlo/{name} | "
                   f"{'whatif/' + whatif.name if whatif.exists() else ''} |")
        assert hlo.exists(), hlo
    return out


HEADER = """# Field captures: real greedy decode loops from public JAX libraries (XLA:CPU, random weights)

Written by `benchmarks/field/index.py` (in the hlo-doctor repository); `benchmarks/field/README.md`
there says how to rebuild the venv and rerun everything, and `docs/field.md` holds the hand list
of wastes and the what-if figures.

Per capture NAME:
- run dir (trace, opstats.json):  runs/NAME   (3 traced steps after 1 warm-up)
- optimized HLO (--xla_dump_to):  hlo/NAME/*.cpu_after_optimizations.txt (HLO text only)
- op-stats table (top 30) / csv:  stats/NAME.txt, stats/NAME.csv; settings: stats/NAME.env
- hlo-doctor diagnose, before:    diagnose-before/NAME.{txt,json} (hlo-doctor at d12bc0c);
  diagnose-<commit>/ the same at a later commit, diagnose-worktree/ at capture time
- op-stats top 10, before:        stats-before/NAME.txt
- what-if figures:                whatif/NAME.json (latest run); whatif-*/ earlier runs
- real compiles by program:       compiles.txt (benchmarks/field/compiles.py)
- variant captures:               variant-runs/ (a what-if variant profiled: FILE.py:variant_step)

Recapture one: `benchmarks/field/capture.sh NAME LOOPFILE:step OUTROOT VAR=VALUE ...`
"""


def main() -> None:
    """Command line: see the module docstring."""
    root = Path(sys.argv[1])
    print(HEADER)
    print("## Captures\n")
    print("| NAME | library | loop file, config | step ms (profile mean, 3 steps) | "
          "run dir, HLO dump | what-if |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows(root)))
    index = root / "excerpts" / "INDEX.md"
    if index.exists():
        print("\n## HLO excerpts (excerpts/)\n")
        print(index.read_text())


if __name__ == "__main__":
    main()
