"""The seed-shaped engine's sampler memory at any batch, computed from compiled programs (no run):
the eager widening program and ``sample()`` as the engine ships them, next to the fixed sampler (one
bf16 argmax), each program's peak from its buffer assignment, the memory rules' freed bytes and the
compiled difference they must equal.

    python benchmarks/memory_seed.py --batch 64 --batch 512 [--vocab 256000]

At batch 64 the original programs' peaks equal those of sample_traces/engine_b64_original_a (same
programs). "fixed" is a bare bf16 argmax, not the fixed engine's sampler: that one also keeps an
f32[batch] partial of its reduction (256 B at batch 64), which the bare argmax does not.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from hlo_doctor.engine.sampling import sample
from hlo_doctor.engine.sampling_metadata import TPUSupportedSamplingMetadata
from hlo_doctor.hlo import parse_module
from hlo_doctor.lint import Context, load_rulebook, run_rule
from hlo_doctor.memory import MemoryReport, memory_of_compiled


def _programs(batch: int, vocab: int) -> dict[str, object]:
    bf16 = jax.ShapeDtypeStruct((batch, vocab), jnp.bfloat16)
    f32 = jax.ShapeDtypeStruct((batch, vocab), jnp.float32)
    meta = TPUSupportedSamplingMetadata(do_sampling=False)
    key = jax.random.key(0)
    return {
        "convert": jax.jit(lambda x: x.astype(jnp.float32)).lower(bf16).compile(),
        "sample": sample.lower(key, None, f32, meta).compile(),
        "fixed": jax.jit(lambda x: jnp.argmax(x, axis=-1)).lower(bf16).compile(),
    }


def measure(batch: int, vocab: int) -> dict[str, object]:
    """Peaks, the rules' freed bytes and the compiled difference for one batch size."""
    c = _programs(batch, vocab)
    mods = {k: parse_module(v.as_text(), origin=k) for k, v in c.items()}
    mem = {k: memory_of_compiled(v, name=mods[k].name) for k, v in c.items()}
    ctx = Context(modules=(mods["sample"], mods["convert"]),
                  memory=MemoryReport("compiled", (mem["sample"], mem["convert"])), kind="hlo")
    rule = next(r for r in load_rulebook(()).rules if r.code == "HD017")
    findings = [f for f in run_rule(rule, ctx) if f.module == mods["sample"].name]
    freed = sum(int(dict(f.extra)["freed_bytes"]) for f in findings)
    peaks = {k: int(v.memory_analysis().peak_memory_in_bytes) for k, v in c.items()}
    return {
        "batch": batch, "vocab": vocab,
        "peak_bytes": {k: m.peak_bytes for k, m in mem.items()},
        "jax_peak_bytes": peaks,
        "hd017_findings": [f.op for f in findings],
        "hd017_freed_bytes": freed,
        "sample_minus_fixed_bytes": peaks["sample"] - peaks["fixed"],
        "f32_twin_bytes": batch * vocab * 4,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, action="append", default=[])
    parser.add_argument("--vocab", type=int, default=256000)
    args = parser.parse_args()
    for b in args.batch or [64, 512]:
        print(json.dumps(measure(b, args.vocab)))


if __name__ == "__main__":
    main()
