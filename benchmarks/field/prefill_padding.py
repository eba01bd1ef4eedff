"""The padded prefill by hand: which ops of a capture work over padded positions, and what share.

    hlo-doctor stats RUN --format csv > OPS.csv
    python benchmarks/field/prefill_padding.py OPS.csv --seq 1024 --batch 4 \
        [--module jit_compiled_generate_function]

A model of what a rule could read from a capture, judged against the prefill-prompt-only what-if
(docs/field.md, "Prefill over padded positions"). keras-hub's ``generate()`` runs its prefill
(``_build_cache``) on all ``--seq`` positions of the padded input, then a ``while`` that writes one
position per iteration from the first padded one to the end. So, in the op table:

- K, the loop's iterations per step: the most common ``runs_per_step`` of the program's ops run
  more than once per step (the body's ops; the condition runs once more);
- the valid prompt length P = S - K, when the loop runs to the end (no stop token met; with an
  early stop K is smaller and P is overestimated, so the waste is underestimated);
- the prefill's ops: the program's ops run once per step whose shape has a dimension S (or B x S,
  positions flattened with the batch); an op with one such dimension does K / S of its work on
  padding, one with two (attention scores, [.., S, S]) 1 - (P / S)^2.

Printed: each such op (time per step, dimensions, wasted ms), their sum, and its share of the step
(the op table's step: time_per_step_us / pct_of_step). What the trace cannot show: the valid length
itself (it is a runtime value: the padding mask's contents); an early exit; ragged prompts in one
batch (the loop starts at the shortest one).
"""
from __future__ import annotations

import argparse
import csv
import re
from collections import Counter


def dims(shape: str) -> list[int]:
    m = re.match(r"^\w+\[([\d,]*)\]", shape)
    return [int(x) for x in m.group(1).split(",") if x] if m else []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--seq", type=int, required=True, help="S: the padded length (the cache's)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--module", default="jit_compiled_generate_function")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    rows = [r for r in csv.DictReader(open(a.csv)) if r["module"] == a.module]
    if not rows:
        raise SystemExit(f"prefill_padding: no op of {a.module} in {a.csv}")
    step_us = next(float(r["time_per_step_us"]) / float(r["pct_of_step"]) * 100
                   for r in rows if float(r["pct_of_step"] or 0) > 0)
    runs = Counter(round(float(r["runs_per_step"])) for r in rows if float(r["runs_per_step"]) > 1.5)
    k = runs.most_common(1)[0][0] if runs else 0
    s = a.seq
    p = s - k
    print(f"K = {k} iterations per step, S = {s}, P = S - K = {p}; step {step_us / 1000:,.1f} ms (op table)")
    out = []
    for r in rows:
        if float(r["runs_per_step"]) > 1.5:
            continue
        d = dims(r["shape"])
        n = sum(1 for x in d if x in (s, s * a.batch))
        if not n:
            continue
        frac = k / s if n == 1 else 1 - (p / s) ** 2
        t = float(r["time_per_step_us"])
        out.append((t * frac, t, n, r))
    out.sort(key=lambda x: -x[0])
    for w, t, n, r in out[: a.top]:
        src = r["source"].split("site-packages/")[-1]
        print(f"  {r['op']:32s} {r['shape'].split('{')[0]:28s} {t / 1000:9.2f} ms  x{n} S-dims  waste {w / 1000:8.2f} ms  {src}")
    waste = sum(w for w, *_ in out)
    total = sum(t for _, t, *_ in out)
    print(f"{len(out)} ops with an S dimension, run once per step: {total / 1000:,.1f} ms; "
          f"on padding: {waste / 1000:,.1f} ms = {100 * waste / step_us:.1f}% of the step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
