"""The greedy argmax over bfloat16 against float32 logits, side by side on the local backend.

Whether the bf16-greedy-sampler fix pays on a backend comes down to this: the fix removes the
standalone widening (a convert program) and the aliasing copy, and makes the argmax read bf16. On a
bandwidth-bound backend (TPU, GPU) reading half the bytes makes the argmax faster; on XLA:CPU the
argmax is compute-bound and what a bf16 read costs depends on the XLA release. Three jitted
programs over the same values, timed interleaved in one process (median of ``--repeats`` calls
each, after one warm-up call):

- ``argmax f32``: ``jnp.argmax`` of float32 logits (the released sampler's argmax);
- ``argmax bf16``: ``jnp.argmax`` of the bf16 logits (the fixed sampler's argmax);
- ``widen + argmax``: ``argmax(x.astype(float32))`` of the bf16 logits in one program.

Prints jax/jaxlib, the backend, each median in ms and the ratios to ``argmax f32``.

Usage::

    python benchmarks/bench_argmax_dtype.py [--batch 64] [--vocab 32768] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import jaxlib

    f32 = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.vocab), jnp.float32)
    bf16 = f32.astype(jnp.bfloat16)
    argmax = jax.jit(lambda x: jnp.argmax(x, axis=-1))
    widen_argmax = jax.jit(lambda x: jnp.argmax(x.astype(jnp.float32), axis=-1))
    programs = {"argmax f32": (argmax, f32), "argmax bf16": (argmax, bf16), "widen + argmax": (widen_argmax, bf16)}
    for fn, x in programs.values():
        fn(x).block_until_ready()
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits every program alike
        for name, (fn, x) in programs.items():
            t0 = time.perf_counter()
            fn(x).block_until_ready()
            times[name].append((time.perf_counter() - t0) * 1e3)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {jax.devices()[0].platform}, "
          f"[{args.batch}, {args.vocab}], median of {args.repeats} calls")
    base = medians["argmax f32"]
    for name, ms in medians.items():
        print(f"  {name:<16} {ms:9.3f} ms   x{ms / base:.3f}")


if __name__ == "__main__":
    main()
