"""The replay's two sides against the engine's own sampler calls, in one process, alternated.

``diagnose`` promises the bf16-greedy-sampler fix on an engine capture by replaying the capture's
programs (``hlo_doctor.lint.replay``): side A is the eager convert and ``jit_sample`` recompiled from
the capture's optimized HLO, side B the same ``jit_sample`` taking bf16 and returning its input.
This script times, in one process and alternated (A B C D, D C B A, ...), those two sides and the
engine's own calls of the same step: the runner's eager ``astype`` and the bundled engine's jitted
``sample`` (original), and the patched tree's ``sample`` on the bf16 logits (fixed). Each sample is
``--repeat`` iterations, each blocked on; the medians and the page faults per iteration are printed,
and the saving each pair gives.

The judge of the replay is the engine's own calls: where both savings agree, the replay stands for
the engine; where they do not, this says by how much, with the machine's allocator state the same
for both (one process, interleaved).

    python benchmarks/replay_vs_engine.py --run runs/doctor/profile --treatment runs/doctor/treatment-engine \
        [--rounds 16] [--repeat 3]

``--run`` is a capture of the bundled engine (``hlo-doctor doctor``'s ``profile/``), ``--treatment``
the patched engine tree (its ``treatment-engine/``). Prints a table; give ``uptime``'s load beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIX = "bf16-greedy-sampler"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--treatment", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax._src.lib import xla_client as xc

    from hlo_doctor.engine.sampling import sample as original_sample
    from hlo_doctor.engine.sampling_metadata import TPUSupportedSamplingMetadata
    from hlo_doctor.lint import diagnose, load_context, load_rulebook
    from hlo_doctor.lint.replay import child
    from hlo_doctor.lint.replay.plan import plan
    from hlo_doctor.lint.replay.run import _protos

    ctx = dataclasses.replace(load_context(args.run), what_if=False)
    findings = [f for f in diagnose(ctx, load_rulebook()).findings if f.fix == FIX]
    p = plan(ctx, findings)
    if isinstance(p, str):
        sys.exit(f"{args.run}: no replay of {FIX}: {p}")
    shape = next(q.dims for c in p.a for q in c.parameters if q.dtype == "bf16")
    with tempfile.TemporaryDirectory(prefix="replay-vs-engine-") as tmp:
        folder = Path(tmp)
        protos = _protos(ctx, p)
        if isinstance(protos, str):
            sys.exit(f"{args.run}: {protos}")
        for name, data in protos.items():
            (folder / name).write_bytes(data)
        # The patched tree as a package of its own (its modules import each other relatively).
        shutil.copytree(args.treatment, folder / "fixed_engine")
        sys.path.insert(0, str(folder))
        fixed = importlib.import_module("fixed_engine.sampling")

        device = jax.devices("cpu")[0]
        client, devices = device.client, xc.DeviceList((device,))
        rng = np.random.default_rng(0)
        side_a = child._Side(p.a, folder, client, devices, device, rng)
        side_b = child._Side(p.b, folder, client, devices, device, rng)
        logits = jax.device_put(rng.standard_normal(shape, dtype=np.float32).astype(jnp.bfloat16), device)
        key = jax.random.PRNGKey(0)
        meta = TPUSupportedSamplingMetadata.from_params(shape[0], do_sampling=False, logprobs=False)
        fixed_meta = fixed.TPUSupportedSamplingMetadata.from_params(shape[0], do_sampling=False, logprobs=False)

        def engine_original() -> Any:
            return original_sample(key, None, logits.astype(jnp.float32), meta)  # the runner's eager astype

        def engine_fixed() -> Any:
            return fixed.sample(key, None, logits, fixed_meta)

        sides: dict[str, Callable[[], Any]] = {
            "replay A (the capture's programs)": side_a.iterate, "replay B (changed)": side_b.iterate,
            "engine, original (eager astype + sample)": engine_original, "engine, fixed (sample on bf16)": engine_fixed}
        times, faults = _alternate(sides, args.rounds, args.repeat, jax.block_until_ready)

    med = {k: statistics.median(v) for k, v in times.items()}
    names = list(sides)
    print(f"{args.run}: logits {shape}, {args.rounds} rounds x {args.repeat} iterations, alternated\n")
    print("| side | median ms per iteration | runs (min-max) | page faults per iteration |")
    print("|---|---:|---|---:|")
    for k in names:
        print(f"| {k} | {med[k]:.1f} | {min(times[k]):.1f}-{max(times[k]):.1f} | {statistics.median(faults[k]):,.0f} |")
    replay = med[names[0]] - med[names[1]]
    engine = med[names[2]] - med[names[3]]
    print(f"\nsaving: replay {replay:.1f} ms, the engine's own calls {engine:.1f} ms; replay / engine "
          f"{replay / engine:.2f}" if engine > 0 else f"\nsaving: replay {replay:.1f} ms, engine {engine:.1f} ms")


def _alternate(sides: dict[str, Callable[[], Any]], rounds: int, repeat: int,
               wait: Callable[[Any], Any]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each side ``repeat`` times per round, the sides in turn, the order reversed every other round."""
    for fn in sides.values():
        for _ in range(3):
            wait(fn())  # warm: compiles, first allocations
    times: dict[str, list[float]] = {k: [] for k in sides}
    faults: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(rounds):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            for _ in range(repeat):
                wait(sides[name]())
            times[name].append((time.perf_counter() - start) * 1e3 / repeat)
            faults[name].append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / repeat)
    return times, faults


if __name__ == "__main__":
    main()
