"""Promise vs measured over the rules' own programs: diagnose's promise against a direct A/B.

For each program of :mod:`promise_programs` at each of its three sizes, on this machine's XLA:CPU:

1. **profile** the step as written, as a file target (``promise_programs.source``: ``FILE.py:step``,
   as ``hlo-doctor profile FILE.py:step`` does it; ``--warmup`` untraced, ``--steps`` traced);
2. **promise**: diagnose the capture (what-if runs on) and take the findings of the rules the hand
   fix answers; the model's figure (what they recover less what a what-if says the fix costs),
   the replay's (``lint.replay``: the capture's own programs compiled here with and without the
   change, alternated; the saving as a share of those programs here, applied to their time in the
   capture, and the saving here itself), and the program A/B's (``verify.program.promise``: the
   file fix diagnose offers applied to a copy of the file, both timed by verify's rounds, as
   ``diagnose`` measures it for a ``FILE.py:FUNC`` capture);
3. **direct A/B** in this process: the step as written and the hand-fixed step, warmed, then timed
   in alternation (AB BA ..., each sample a few calls), the median of the pairs' differences and
   its sign-test interval (``lint.replay.timing``).

The judge is the direct A/B, which is no part of the promise. ``--write-docs`` puts the table in
docs/rules.md between its markers. Used by ``bench_estimate.py --programs``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "rules.md"
BEGIN = "<!-- promise-table {tag}: begin (python benchmarks/bench_estimate.py --programs all --write-docs) -->"
END = "<!-- promise-table {tag}: end -->"


def direct_ab(case: Any, seconds: float = 3.0, min_pairs: int = 16) -> dict[str, Any]:
    """Interleaved timing of ``case.step`` and ``case.fixed`` in this process (us per step)."""
    import jax

    from hlo_doctor.lint.replay import PairedTiming

    def timed(f: Any, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            jax.block_until_ready(f())
        return (time.perf_counter() - t0) * 1e6 / n

    for f in (case.step, case.fixed, case.step, case.fixed):
        timed(f, 2)
    repeats = max(1, min(200, int(2000.0 / max(timed(case.step, 1), 1.0))))
    a: list[float] = []
    b: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(a) < min_pairs or (time.perf_counter() < deadline and len(a) < 400):
        order = ((case.step, a), (case.fixed, b)) if len(a) % 2 == 0 else ((case.fixed, b), (case.step, a))
        for f, out in order:
            out.append(timed(f, repeats))
    t = PairedTiming(tuple(a), tuple(b))
    return {"a_us": t.a_median_us, "b_us": t.b_median_us, "saving_us": t.saving_us,
            "interval_us": list(t.interval_us), "pairs": t.pairs, "repeats": repeats}


def program_ab(run: Path, root: Path, codes: tuple[str, ...], findings: list[Any]) -> dict[str, Any]:
    """The program A/B's promise of the file fix the findings of ``codes`` are offered (as diagnose
    measures it): its figure, or why none."""
    from hlo_doctor.fixes.source.applicable import with_applicable_fixes
    from hlo_doctor.lint.promise import fix_promises
    from hlo_doctor.lint.store import MeasurementStore
    from hlo_doctor.verify.program.promise import with_program_ab

    applicable = with_applicable_fixes(findings, root)
    fixes = sorted({f.fix for f in applicable if f.code in codes and f.fix})
    if not fixes:
        return {"program_ab": None, "program_unmeasured": "no file fix offered for " + ", ".join(codes)}
    mine = [p for p in with_program_ab(run, fix_promises(applicable), applicable, MeasurementStore(run))
            if p.fix in fixes]
    got = next((p for p in mine if p.program is not None), mine[0] if mine else None)
    if got is None or got.program is None:
        return {"program_ab": None, "program_fix": fixes[0],
                "program_unmeasured": got.program_unmeasured if got is not None else "no promise"}
    return {"program_ab": got.program.to_dict(), "program_fix": got.fix}


def promise(run: Path, codes: tuple[str, ...]) -> dict[str, Any]:
    """Diagnose ``run``: the model's and the replay's promise for the findings of ``codes``."""
    from hlo_doctor.lint import diagnose, load_context, load_rulebook, total_recoverable
    from hlo_doctor.lint.promise import fix_cost
    from hlo_doctor.lint.replay import measure_fix

    ctx = replace(load_context(run), what_if=True)
    d = diagnose(ctx, load_rulebook())
    mine = [f for f in d.findings if f.code in codes]
    out: dict[str, Any] = {"step_us": d.step_time_us, "findings": [f"{f.code} {f.module}/{f.op}" for f in mine],
                           "model_us": total_recoverable(mine) - fix_cost(mine) if mine else None}
    m = measure_fix(ctx, "hand fix", mine) if mine else "no finding of " + ", ".join(codes)
    if isinstance(m, str):
        out["replay"] = None
        out["unmeasured"] = m
    else:
        out["replay"] = m.to_dict()
    out.update(program_ab(run, run.parent, codes, list(d.findings)))
    return out


def measure(name: str, size: tuple[int, ...], out: Path, steps: int, warmup: int, seconds: float) -> dict[str, Any]:
    """One program at one size: profile, promise, direct A/B."""
    from promise_programs import make, source

    from hlo_doctor.capture import capture_callable, resolve_target

    case = make(name, size)
    tag = f"{name}-{'x'.join(str(s) for s in size)}"
    folder = out / tag
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prog.py").write_text(source(name, size), encoding="utf-8")
    spec = f"{folder.resolve() / 'prog.py'}:step"
    run = capture_callable(resolve_target(spec), steps=steps, warmup=warmup, out_dir=folder / "run", target=spec)
    row = {"program": name, "size": list(size), "codes": list(case.codes), **promise(run, case.codes)}
    row["direct"] = direct_ab(case, seconds)
    return row


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.3f}"


def _verdict(promised: float | None, lo_hi: tuple[float, float] | None, direct: dict[str, Any]) -> str:
    """``0.93 ok``: promise / direct saving, and whether it holds (within 30%, or its interval
    holds the direct saving; never a saving promised where the direct A/B measured slower)."""
    if promised is None:
        return "-"
    d, (dlo, dhi) = direct["saving_us"], direct["interval_us"]
    ratio = f"{promised / d:.2f}" if abs(d) > 1e-9 else "-"
    if dhi < 0 and promised > 0:
        return f"{ratio} **promised a saving, measured slower**"
    holds = (d != 0 and abs(promised / d - 1.0) <= 0.3) or (lo_hi is not None and lo_hi[0] <= d <= lo_hi[1]) \
        or (dlo <= 0 <= dhi and promised <= 0)
    return f"{ratio} {'holds' if holds else 'misses'}"


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table (ms per step)."""
    out = ["| program | size | rules | step (profiled) | model promise | replay promise [interval] "
           "| replay saving here [interval] | direct A/B base -> fixed | direct saving [95% CI] "
           "| program A/B promise [interval] | model / direct | replay / direct | replay here / direct | program A/B / direct |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        d = r["direct"]
        rp = r.get("replay")
        if rp:
            lo, hi = rp["promise_interval_us"]
            hlo, hhi = rp["here_interval_us"]
            replay = f"{_ms(rp['promise_us'])} [{_ms(lo)}, {_ms(hi)}]"
            here = f"{_ms(rp['here_saving_us'])} [{_ms(hlo)}, {_ms(hhi)}]"
            v_replay = _verdict(rp["promise_us"], (lo, hi), d)
            v_here = _verdict(rp["here_saving_us"], (hlo, hhi), d)
        else:
            replay = f"- ({r.get('unmeasured', '')[:60]})"
            here, v_replay, v_here = "-", "-", "-"
        ab = r.get("program_ab")
        if ab:
            prog = f"{_ms(ab['saving_us'])} [{_ms(ab['interval_us'][0])}, {_ms(ab['interval_us'][1])}]"
            v_prog = _verdict(ab["saving_us"], tuple(ab["interval_us"]), d)  # type: ignore[arg-type]
        else:
            prog, v_prog = f"- ({str(r.get('program_unmeasured', ''))[:60]})", "-"
        out.append(
            f"| {r['program']} | {'x'.join(str(s) for s in r['size'])} | {', '.join(r['codes'])} | {_ms(r['step_us'])} "
            f"| {_ms(r['model_us'])} | {replay} | {here} | {_ms(d['a_us'])} -> {_ms(d['b_us'])} "
            f"| {_ms(d['saving_us'])} [{_ms(d['interval_us'][0])}, {_ms(d['interval_us'][1])}] "
            f"| {prog} | {_verdict(r['model_us'], None, d)} | {v_replay} | {v_here} | {v_prog} |")
    return "\n".join(out)


def write_docs(text: str, tag: str, path: Path = DOCS) -> None:
    """Replace what is between ``tag``'s markers in docs/rules.md (one block per jaxlib; appended
    with its markers when absent)."""
    doc = path.read_text(encoding="utf-8")
    begin, end = BEGIN.format(tag=tag), END.format(tag=tag)
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc, encoding="utf-8")


def run(programs: list[str], out: Path, steps: int, warmup: int, seconds: float, docs: bool) -> str:
    """Measure every program at its sizes; write ``OUT/promises.json``; the table (and docs)."""
    import os
    import sys

    import jax
    import jaxlib

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from promise_programs import SIZES

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name in programs:
        for size in SIZES[name]:
            print(f"{name} {size}: profile, diagnose (replay), direct A/B ...", file=sys.stderr, flush=True)
            rows.append(measure(name, size, out, steps, warmup, seconds))
            (out / "promises.json").write_text(json.dumps({"rows": rows}, indent=1, default=str))
    load = os.getloadavg()
    head = (f"jax {jax.__version__} / jaxlib {jaxlib.__version__}, XLA:CPU, {os.cpu_count()} cores, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; ms per step")
    text = f"{head}\n\n{table(rows)}"
    (out / "promises.json").write_text(json.dumps({"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                                                   "load": load, "rows": rows}, indent=1, default=str))
    if docs:
        write_docs(text, f"jaxlib {jaxlib.__version__}")
    return text
