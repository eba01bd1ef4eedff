"""Promises judged on held-out programs: code written as a user would, not the rules' own programs.

Each program below is a step a user might profile (``FILE.py:step``) and the same step fixed by hand.
For each: ``profile`` it (XLA:CPU, this machine), ``diagnose`` it as a user would (the model, the
replay of its programs, the program A/B where a file fix applies), then judge the promise against a
direct interleaved A/B of the written step against the hand-fixed one, **in a fresh process** (the
process that profiled and diagnosed runs an eager step several times slower than a fresh one), with
``promise_table.direct_ab``'s decisive stopping rule. A promise holds where it is within 30% of the
direct saving or its interval holds it, or both say no saving; a saving promised where the direct A/B
measured slower never holds.

    python benchmarks/promise_heldout.py OUT [--first-size] [--judge-cap 30] [--steps 10]
    python benchmarks/promise_heldout.py --from-json OUT/heldout.json     # the table again

Writes ``OUT/heldout.json`` and prints a Markdown table (ms per step) with the machine's load.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# name -> (rules the hand fix answers, the step as written, the step fixed by hand). {b} {v} {h}: sizes.
PROGRAMS: dict[str, tuple[tuple[str, ...], str, str]] = {
    # An eager widening of bf16 logits before a jitted argmax (the fix is slower on some XLA:CPU builds).
    "eager_astype_argmax": (("HD003", "HD004"), """\
import jax
import jax.numpy as jnp

LOGITS = jax.random.normal(jax.random.key(3), ({b}, {v}), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def pick(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    logits = LOGITS.astype(jnp.float32)  # widen for the comparison
    return pick(logits)
""", """\
import jax
import jax.numpy as jnp

LOGITS = jax.random.normal(jax.random.key(3), ({b}, {v}), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def pick(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    return pick(LOGITS)
"""),
    # A projection, log-probabilities, then the top 4 ids (only the order of the logits matters).
    "proj_logsoftmax_topk": (("HD011",), """\
import jax
import jax.numpy as jnp

H = jax.random.normal(jax.random.key(1), ({b}, {h}), jnp.float32)
W = jax.random.normal(jax.random.key(2), ({h}, {v}), jnp.float32) * 0.02


@jax.jit
def top_ids(h, w):
    logprobs = jax.nn.log_softmax(h @ w, axis=-1)
    return jax.lax.top_k(logprobs, 4)[1]


def step():
    return top_ids(H, W)
""", """\
import jax
import jax.numpy as jnp

H = jax.random.normal(jax.random.key(1), ({b}, {h}), jnp.float32)
W = jax.random.normal(jax.random.key(2), ({h}, {v}), jnp.float32) * 0.02


@jax.jit
def top_ids(h, w):
    return jax.lax.top_k(h @ w, 4)[1]


def step():
    return top_ids(H, W)
"""),
    # A final norm, the LM head, probabilities, then the greedy id.
    "norm_softmax_argmax": (("HD011",), """\
import jax
import jax.numpy as jnp

H = jax.random.normal(jax.random.key(4), ({b}, {h}), jnp.float32)
W = jax.random.normal(jax.random.key(5), ({h}, {v}), jnp.float32) * 0.02


@jax.jit
def greedy(h, w):
    h = h / jnp.sqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    probs = jax.nn.softmax(h @ w, axis=-1)
    return jnp.argmax(probs, axis=-1)


def step():
    return greedy(H, W)
""", """\
import jax
import jax.numpy as jnp

H = jax.random.normal(jax.random.key(4), ({b}, {h}), jnp.float32)
W = jax.random.normal(jax.random.key(5), ({h}, {v}), jnp.float32) * 0.02


@jax.jit
def greedy(h, w):
    h = h / jnp.sqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    return jnp.argmax(h @ w, axis=-1)


def step():
    return greedy(H, W)
"""),
    # An eager widening before a jitted row max (a score for early stopping).
    "eager_widen_max": (("HD003", "HD004"), """\
import jax
import jax.numpy as jnp

SCORES = jax.random.normal(jax.random.key(6), ({b}, {v}), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def best(scores):
    return jnp.max(scores, axis=-1)


def step():
    return best(SCORES.astype(jnp.float32))
""", """\
import jax
import jax.numpy as jnp

SCORES = jax.random.normal(jax.random.key(6), ({b}, {v}), jnp.float32).astype(jnp.bfloat16)


@jax.jit
def best(scores):
    return jnp.max(scores, axis=-1).astype(jnp.float32)


def step():
    return best(SCORES)
"""),
    # A step that returns its cache unchanged beside a counter, without donating it.
    "state_passthrough": (("HD002",), """\
import jax
import jax.numpy as jnp

_state = {{"n": jnp.zeros((), jnp.int32), "cache": jnp.ones(({b}, {v}), jnp.float32)}}


@jax.jit
def advance(n, cache):
    return n + 1, cache


def step():
    _state["n"], _state["cache"] = advance(_state["n"], _state["cache"])
    return _state["n"]
""", """\
import jax
import jax.numpy as jnp

_state = {{"n": jnp.zeros((), jnp.int32), "cache": jnp.ones(({b}, {v}), jnp.float32)}}


@jax.jit
def advance(n):
    return n + 1


def step():
    _state["n"] = advance(_state["n"])
    return _state["n"]
"""),
}
SIZES: dict[str, tuple[dict[str, int], ...]] = {
    "eager_astype_argmax": ({"b": 32, "v": 65536}, {"b": 64, "v": 128000}),
    "proj_logsoftmax_topk": ({"b": 8, "h": 512, "v": 32000}, {"b": 16, "h": 512, "v": 64000}),
    "norm_softmax_argmax": ({"b": 8, "h": 256, "v": 32000}, {"b": 16, "h": 256, "v": 64000}),
    "eager_widen_max": ({"b": 16, "v": 128000}, {"b": 32, "v": 256000}),
    "state_passthrough": ({"b": 64, "v": 32000}, {"b": 64, "v": 128000}),
}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(folder: Path, cap_s: float) -> dict[str, Any]:
    """The direct A/B of ``folder``'s prog.py against fixed.py (run in a fresh process by :func:`main`)."""
    from promise_table import direct_ab

    class Case:
        step = _load(folder / "prog.py", "heldout_prog").step
        fixed = _load(folder / "fixed.py", "heldout_fixed").step

    return direct_ab(Case, 3.0, cap_s)


def judge_in_child(folder: Path, cap_s: float) -> dict[str, Any]:
    out = folder / "direct.json"
    subprocess.run([sys.executable, __file__, "--judge", str(folder), "--judge-cap", str(cap_s)], check=True,
                   env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=cap_s + 300)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def measure(name: str, size: dict[str, int], out: Path, steps: int, warmup: int, cap_s: float) -> dict[str, Any]:
    from promise_table import promise

    from hlo_doctor.capture import capture_callable, resolve_target

    codes, written, fixed = PROGRAMS[name]
    folder = out / f"{name}-{'x'.join(str(v) for v in size.values())}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prog.py").write_text(written.format(**size), encoding="utf-8")
    (folder / "fixed.py").write_text(fixed.format(**size), encoding="utf-8")
    spec = f"{folder.resolve() / 'prog.py'}:step"
    run = capture_callable(resolve_target(spec), steps=steps, warmup=warmup, out_dir=folder / "run", target=spec)
    row = {"program": name, "size": size, "codes": list(codes), **promise(run, codes)}
    row["direct"] = judge_in_child(folder, cap_s)
    row["load"] = os.getloadavg()[0]
    return row


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.3f}"


def table(doc: dict[str, Any]) -> str:
    from promise_table import _verdict

    lines = [doc["head"], "",
             "| program | size | direct saving [95% CI] (pairs, stop) | replay promise (pace) "
             "| replay at the capture's pace | program A/B | model | diagnose prints |",
             "|---|---|---|---|---|---|---|---|"]
    held = {"replay": [0, 0], "replay at the capture's pace": [0, 0], "program A/B": [0, 0], "model": [0, 0],
            "printed": [0, 0]}
    for r in doc["rows"]:
        d = r["direct"]
        cells, verdicts = [], {}
        rp = r.get("replay")
        if rp:
            lo, hi = rp["here_interval_us"]
            v = _verdict(rp["promise_us"] if lo > 0 or hi < 0 else 0.0, tuple(rp["promise_interval_us"]), d)
            fresh = rp.get("fresh_pages") or {}
            both = (f"; fresh pages {_ms(fresh.get('promise_us'))}, range [{_ms(rp['promise_interval_us'][0])}, "
                    f"{_ms(rp['promise_interval_us'][1])}]") if fresh else ""
            cells.append(f"{_ms(rp['promise_us'])} ({rp.get('promise_pace', 'the capture')}{both}), {v}")
            verdicts["replay"] = v
            # What the replay promised before it knew the capture's machine: the capture's pace.
            at_capture = rp.get("capture_promise_us", rp["promise_us"])
            v = _verdict(at_capture if lo > 0 or hi < 0 else 0.0, None, d)
            cells.append(f"{_ms(at_capture)}, {v}")
            verdicts["replay at the capture's pace"] = v
        else:
            cells += [f"- ({str(r.get('unmeasured', ''))[:50]})", "-"]
        ab = r.get("program_ab")
        if ab:
            lo, hi = ab["interval_us"]
            v = _verdict(ab["saving_us"] if lo > 0 or hi < 0 else 0.0, (lo, hi), d)
            cells.append(f"{_ms(ab['saving_us'])} [{_ms(ab['interval_us'][0])}, {_ms(ab['interval_us'][1])}], {v}")
            verdicts["program A/B"] = v
        else:
            cells.append(f"- ({str(r.get('program_unmeasured', ''))[:50]})")
        v = _verdict(r["model_us"], None, d) if r.get("model_us") is not None else "-"
        cells.append(f"{_ms(r.get('model_us'))}, {v}")
        verdicts["model"] = v
        verdicts["printed"] = verdicts.get("program A/B") or verdicts.get("replay") or verdicts["model"]
        cells.append(verdicts["printed"])
        for k, v in verdicts.items():
            if v != "-":
                held[k][1] += 1
                held[k][0] += v.endswith("holds")
        size = "x".join(str(x) for x in r["size"].values())
        direct = (f"{_ms(d['saving_us'])} [{_ms(d['interval_us'][0])}, {_ms(d['interval_us'][1])}] "
                  f"({d['pairs']}, {d['stopped']})")
        lines.append(f"| {r['program']} | {size} | {direct} | " + " | ".join(cells) + " |")
    lines += ["", "holds: " + ", ".join(f"{k} {a}/{n}" for k, (a, n) in held.items())]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--first-size", action="store_true", help="each program at its first size only")
    parser.add_argument("--programs", default="all", help="comma-separated names, or all")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--judge-cap", type=float, default=30.0, help="the direct A/B's time cap (s)")
    parser.add_argument("--judge", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--from-json", type=Path)
    args = parser.parse_args()
    if args.judge is not None:
        (args.judge / "direct.json").write_text(json.dumps(judge(args.judge, args.judge_cap)))
        return 0
    if args.from_json is not None:
        print(table(json.loads(args.from_json.read_text())))
        return 0
    if args.out is None:
        parser.error("OUT is needed")
    import jax
    import jaxlib

    names = list(PROGRAMS) if args.programs == "all" else args.programs.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for name in names:
        for size in SIZES[name][:1] if args.first_size else SIZES[name]:
            print(f"{name} {size}: profile, diagnose, direct A/B in a fresh process ...", file=sys.stderr, flush=True)
            rows.append(measure(name, size, args.out, args.steps, args.warmup, args.judge_cap))
            (args.out / "heldout.json").write_text(json.dumps({"head": "", "rows": rows}, indent=1, default=str))
    load = os.getloadavg()
    head = (f"jax {jax.__version__} / jaxlib {jaxlib.__version__}, XLA:CPU, {os.cpu_count()} cores, load average "
            f"{load0:.2f} at the start, {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; ms per step; "
            f"`--steps {args.steps} --warmup {args.warmup} --judge-cap {args.judge_cap:g}`.")
    doc = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "head": head, "rows": rows}
    (args.out / "heldout.json").write_text(json.dumps(doc, indent=1, default=str))
    print(table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
