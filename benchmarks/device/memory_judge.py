"""`hlo-doctor memory` judged by the device's own counters and by jax, on whatever backend runs here.

Each program runs in a process of its own (one program at a time may hold a TPU, and a device's
peak counter only grows): its arguments are made without a larger intermediate, the device's
``bytes_in_use`` is read, the program is compiled (jax's ``compiled.memory_analysis()`` read) and
run once under the profiler, then the device's ``peak_bytes_in_use`` is read. The program's own
peak on the device is ``peak_bytes_in_use - (bytes_in_use before - its arguments' bytes)``: what the
process held besides its arguments taken out. Then ``hlo-doctor memory CAPTURE --format json`` reads
the capture in this process (no device) and the three figures are put side by side:

- ``hlo-doctor``: the program's peak from the buffer assignment stored in the capture;
- ``jax``: ``memory_analysis().peak_memory_in_bytes`` (where the backend fills it) and arguments +
  outputs + temporaries - aliases;
- ``device``: the allocator's peak (``memory_stats()``; XLA:CPU keeps none, so the column is empty
  there).

    python benchmarks/device/memory_judge.py OUTDIR [--batch 512] [--vocab 256000]

Writes OUTDIR/memory-judge.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROGRAMS = ("widen", "sample", "sample_fixed", "softmax_argmax", "mlp")
"""The seed's three sampler programs (the eager widening, 0.24's greedy ``sample()`` reading and
returning float32, the fixed bf16 argmax), a softmax before an argmax, and a two-layer MLP."""


def _child(name: str, batch: int, vocab: int, out: Path) -> None:
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]

    def stats() -> dict[str, int]:
        s = dev.memory_stats() or {}
        return {k: int(v) for k, v in s.items() if isinstance(v, int)}

    if name == "widen":
        def widen(x):  # noqa: ANN001, ANN202
            return x.astype(jnp.float32)
        fn, args = jax.jit(widen), (jnp.zeros((batch, vocab), jnp.bfloat16),)
    elif name == "sample":
        def sample(logits):  # noqa: ANN001, ANN202
            return jnp.argmax(logits, axis=-1), logits.astype(jnp.float32)
        fn, args = jax.jit(sample), (jnp.zeros((batch, vocab), jnp.float32),)
    elif name == "sample_fixed":
        def sample_fixed(logits):  # noqa: ANN001, ANN202
            return jnp.argmax(logits, axis=-1)
        fn, args = jax.jit(sample_fixed), (jnp.zeros((batch, vocab), jnp.bfloat16),)
    elif name == "softmax_argmax":
        def softmax_argmax(logits):  # noqa: ANN001, ANN202
            return jnp.argmax(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), axis=-1)
        fn, args = jax.jit(softmax_argmax), (jnp.zeros((batch, vocab), jnp.bfloat16),)
    else:
        hidden = 4096

        def mlp(x, w1, w2):  # noqa: ANN001, ANN202
            return jax.nn.gelu(x @ w1) @ w2
        fn = jax.jit(mlp)
        args = (jnp.zeros((batch, hidden), jnp.bfloat16), jnp.zeros((hidden, 4 * hidden), jnp.bfloat16),
                jnp.zeros((4 * hidden, hidden), jnp.bfloat16))
    for a in args:
        a.block_until_ready()
    arg_bytes = sum(a.nbytes for a in args)
    before = stats()
    compiled = fn.lower(*args).compile()
    m = compiled.memory_analysis()
    capture = out.parent / f"capture-{name}"
    with jax.profiler.trace(str(capture)):
        jax.block_until_ready(compiled(*args))
    after = stats()
    doc = {
        "program": name, "backend": dev.platform, "device_kind": dev.device_kind,
        "argument_nbytes": arg_bytes,
        "jax": {k: int(getattr(m, k)) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                                 "alias_size_in_bytes", "temp_size_in_bytes",
                                                 "peak_memory_in_bytes") if hasattr(m, k)},
        "device_before": before, "device_after": after, "capture": str(capture),
    }
    if "peak_bytes_in_use" in after and "bytes_in_use" in before:
        doc["device_program_peak"] = after["peak_bytes_in_use"] - (before["bytes_in_use"] - arg_bytes)
    out.write_text(json.dumps(doc, indent=1))


def _hd_memory(capture: str, name: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", "import sys; from hlo_doctor.cli import main; "
                           "sys.argv[0]='hlo-doctor'; main()", "memory", capture, "--format", "json", "--all"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    progs = [p for p in json.loads(done.stdout)["programs"] if p["module"] == f"jit_{name}"]
    if not progs:
        return {"error": f"no program jit_{name} in the capture"}
    p = max(progs, key=lambda p: p["peak_bytes"])
    return {k: p[k] for k in ("module", "peak_bytes", "argument_bytes", "output_bytes", "alias_bytes",
                              "temporary_bytes", "peak_instruction")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=256000)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.outdir.mkdir(parents=True, exist_ok=True)
    if a.child:
        _child(a.child, a.batch, a.vocab, a.outdir / f"{a.child}.json")
        return
    rows = []
    for name in PROGRAMS:
        done = subprocess.run([sys.executable, __file__, str(a.outdir), "--batch", str(a.batch), "--vocab",
                               str(a.vocab), "--child", name], capture_output=True, text=True, timeout=300)
        path = a.outdir / f"{name}.json"
        if done.returncode != 0 or not path.exists():
            rows.append({"program": name, "error": (done.stderr.strip().splitlines() or ["?"])[-1]})
            continue
        doc = json.loads(path.read_text())
        doc["hlo_doctor"] = _hd_memory(doc["capture"], name)
        rows.append(doc)
    (a.outdir / "memory-judge.json").write_text(json.dumps(rows, indent=1))
    print("| program | backend | hlo-doctor peak | jax peak_memory_in_bytes | jax args+out+temp-alias "
          "| device allocator peak | hlo-doctor temporaries | jax temp |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['program']} | error: {r['error']} |||||||")
            continue
        j, h = r["jax"], r["hlo_doctor"]
        sum_ = (j.get("argument_size_in_bytes", 0) + j.get("output_size_in_bytes", 0)
                + j.get("temp_size_in_bytes", 0) - j.get("alias_size_in_bytes", 0))
        print(f"| {r['program']} | {r['backend']} ({r['device_kind']}) | {h.get('peak_bytes', h.get('error'))} "
              f"| {j.get('peak_memory_in_bytes', '')} | {sum_} | {r.get('device_program_peak', '')} "
              f"| {h.get('temporary_bytes', '')} | {j.get('temp_size_in_bytes', '')} |")


if __name__ == "__main__":
    main()
