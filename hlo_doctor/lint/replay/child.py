"""The replay's own process: compile both sides of a :class:`.spec.ReplaySpec` and time them, alternated.

``python -m hlo_doctor.lint.replay.child SPEC.json OUT.json``. A process of its own because a
program XLA:CPU cannot compile a second time may abort it (a CHECK in an emitter) rather than raise,
and because its allocations (random inputs of a capture's shapes) are given back when it ends.
Writes ``{"ok": true, "a_us": [...], "b_us": [...], ...}`` or ``{"ok": false, "reason": "..."}``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hlo_doctor.lint.replay.mlir_edit import (
    alias_output,
    drop_monotone_maps,
    module_text,
    narrow_parameter,
    narrow_reads,
)
from hlo_doctor.lint.replay.spec import MLIR_DTYPES, Call, ReplaySpec
from hlo_doctor.lint.replay.timing import GROWTH, decision

_OPCODE = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*.*?\s([a-z][a-z0-9_-]*)\(", re.M)
_NP_DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16", "s32": "int32",
              "s64": "int64", "s8": "int8", "s16": "int16", "u8": "uint8", "u32": "uint32", "u64": "uint64",
              "pred": "bool"}


class ReplayError(Exception):
    """A side that cannot be built or run here: its message is the refusal's line."""


class _EagerAstype:
    """An eager ``astype`` in place of a compiled program: jax's own dispatch, as the step ran it."""

    def __init__(self, dtype: str) -> None:
        self.dtype = _NP_DTYPES[dtype]

    def run(self, args: list[Any]) -> list[Any]:
        return [args[0].astype(self.dtype)]


class _Compiled:
    def __init__(self, exe: Any) -> None:
        self.exe = exe

    def run(self, args: list[Any]) -> list[Any]:
        return [o[0] for o in self.exe.execute_sharded(args).disassemble_into_single_device_arrays()]


def _compile(call: Call, folder: Path, client: Any, devices: Any, portable: bool = False) -> tuple[Any, str, int]:
    """The call's program compiled with its edits; its compiled HLO text; selections rewired."""
    from jax._src.lib import xla_client as xc

    if call.eager_astype:
        if call.eager_astype not in _NP_DTYPES:
            raise ReplayError(f"{call.module}: an eager astype to {call.eager_astype}, which the replay cannot make")
        return _EagerAstype(call.eager_astype), f"eager astype to {call.eager_astype}", 0

    text = module_text((folder / call.proto).read_bytes(), portable)
    rewired = 0
    for number, dtype in call.narrow:
        text = narrow_parameter(text, number, MLIR_DTYPES[dtype])
        if number in call.narrow_reads:
            text, n = narrow_reads(text, number)
            rewired += n
    for number, outputs in call.alias:
        text = alias_output(text, number, outputs)
    if call.drop_maps:
        text, dropped = drop_monotone_maps(text)
        rewired += dropped
        if not dropped:
            raise ReplayError(f"{call.module}: no order-keeping map before a selection to drop")
    try:
        exe = client.compile_and_load(text.encode(), devices, xc.CompileOptions())
    except Exception as exc:  # noqa: BLE001 - XLA's message is the reason
        raise ReplayError(f"{call.module} did not compile here: {str(exc).splitlines()[0][:200]}") from exc
    return _Compiled(exe), "\n".join(m.to_string() for m in exe.hlo_modules()), rewired


def _inputs(call: Call, rng: Any, device: Any) -> list[Any]:
    import jax
    import numpy as np

    out = []
    for number, p in enumerate(call.parameters):
        dtype = dict(call.narrow).get(number, p.dtype)
        if dtype not in _NP_DTYPES:
            raise ReplayError(f"{call.module}: parameter {number} is {dtype}, which the replay cannot make")
        if dtype.startswith(("f", "b")):
            values = rng.standard_normal(p.dims, dtype=np.float32).astype(jax.numpy.dtype(_NP_DTYPES[dtype]))
        else:
            # Integers and predicates as zeros: an index, a position or a trip count stays in range.
            values = np.zeros(p.dims, dtype=_NP_DTYPES[dtype])
        out.append(jax.device_put(values, device))
    return out


class _Side:
    """One side's compiled calls, their inputs and the buffers they carry between iterations."""

    def __init__(self, calls: tuple[Call, ...], folder: Path, client: Any, devices: Any, device: Any, rng: Any) -> None:
        self.calls = calls
        # XLA:CPU compiles the MLIR in process; a plugin (XLA:TPU) takes it as portable StableHLO.
        self.compiled = [_compile(c, folder, client, devices, device.platform != "cpu") for c in calls]
        self.inputs = [_inputs(c, rng, device) for c in calls]

    def iterate(self) -> list[Any]:
        """Run every call once (``runs`` times each), in order; the outputs, not yet waited for."""
        produced: list[list[Any]] = []
        for i, call in enumerate(self.calls):
            exe, args = self.compiled[i][0], self.inputs[i]
            for number, p in enumerate(call.parameters):
                if p.source is not None and p.source[0] < i:
                    args[number] = produced[p.source[0]][p.source[1]]
            outs: list[Any] = []
            for _ in range(max(1, call.runs)):
                outs = exe.run(args)
                # A carried (and maybe donated, so deleted) parameter takes its own new output.
                for number, p in enumerate(call.parameters):
                    if p.source is not None and p.source[0] == i:
                        args[number] = outs[p.source[1]]
            produced.append(outs)
        for i, call in enumerate(self.calls):
            for number, p in enumerate(call.parameters):
                if p.source is not None and p.source[0] > i:
                    self.inputs[i][number] = produced[p.source[0]][p.source[1]]
        return [o for outs in produced for o in outs]


def _time(side: _Side, repeats: int) -> tuple[float, float]:
    """The side's time per iteration (us) and the minor page faults this process took per iteration
    meanwhile (memory the allocator handed out fresh: its first touch is paid in the time)."""
    import resource

    import jax

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(side.iterate())
    us = (time.perf_counter() - t0) * 1e6 / repeats
    return us, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / repeats


def _device(spec: ReplaySpec) -> Any:
    """The first device of the capture's platform, refused where it is another chip than the capture's."""
    import jax

    try:
        device = jax.devices(spec.platform)[0]
    except RuntimeError as exc:
        raise ReplayError(f"this machine has no {spec.platform.upper()} device jax can use: "
                          f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from exc
    # The trace and jax spell one chip's kind with other capitals ("TPU v5 Lite", "TPU v5 lite").
    if spec.device_kind and device.device_kind.casefold().split() != spec.device_kind.casefold().split():
        raise ReplayError(f"the capture ran on {spec.device_kind}, this machine's device is {device.device_kind}: "
                          "its compiler builds other programs")
    return device


def run(spec: ReplaySpec, folder: Path) -> dict[str, Any]:
    """Compile and time both sides; the document the parent reads."""
    import jax
    import numpy as np
    from jax._src.lib import xla_client as xc

    device = _device(spec)
    client, devices = device.client, xc.DeviceList((device,))
    rng = np.random.default_rng(0)
    a = _Side(spec.a, folder, client, devices, device, rng)
    b = _Side(spec.b, folder, client, devices, device, rng)
    for side in (a, b, a, b):
        _time(side, 1)  # warm both: first runs allocate and page in
    one = max(_time(a, 1)[0], _time(b, 1)[0], 1.0)
    repeats = max(1, min(1000, int(spec.sample_us / one)))
    a_us: list[float] = []
    b_us: list[float] = []
    # Each timing's page faults per iteration, beside its time (the same pair order).
    a_faults: list[float] = []
    b_faults: list[float] = []
    start = time.perf_counter()

    def pair() -> None:
        sides = ((a, a_us, a_faults), (b, b_us, b_faults))
        for side, out, faults in (sides if len(a_us) % 2 == 0 else sides[::-1]):
            us, took = _time(side, repeats)
            out.append(us)
            faults.append(took)

    while len(a_us) < spec.max_pairs and (len(a_us) < spec.min_pairs or time.perf_counter() < start + spec.seconds):
        pair()
    # Then, as verify --budget adds rounds: more pairs until the interval decides or the cap is reached.
    look, stopped = 1, ""
    while True:
        stopped = decision(a_us, b_us, look)
        if stopped:
            break
        if len(a_us) >= spec.max_pairs or time.perf_counter() - start >= spec.cap_seconds:
            # At the cap an interval that clears 0 still decides, however wide (the figure keeps it).
            stopped = decision(a_us, b_us, look, precise=False) or "cap"
            break
        target = min(spec.max_pairs, max(len(a_us) + 1, math.ceil(len(a_us) * GROWTH)))
        while len(a_us) < target and time.perf_counter() - start < spec.cap_seconds:
            pair()
        look += 1
    return {"ok": True, "a_us": a_us, "b_us": b_us, "a_faults": a_faults, "b_faults": b_faults,
            "repeats": repeats, "jax": jax.__version__,
            "stopped": stopped, "looks": look, "cap_s": spec.cap_seconds,
            "a_ops": [opcodes(t) for _, t, _ in a.compiled], "b_ops": [opcodes(t) for _, t, _ in b.compiled],
            "b_aliased": ["input_output_alias=" in t.split("\n", 1)[0] for _, t, _ in b.compiled],
            "b_rewired": [r for _, _, r in b.compiled]}


def opcodes(hlo_text: str) -> dict[str, int]:
    """Opcode -> count over every computation of a compiled module (what ran, fused or not)."""
    return dict(Counter(_OPCODE.findall(hlo_text)))


def document(spec_path: Path) -> dict[str, Any]:
    """:func:`run` on the spec at ``spec_path`` (its protos beside it), or ``ok: false`` and the
    one-line reason it could not run: what the parent reads, from this process or another."""
    try:
        return run(ReplaySpec.read(spec_path), spec_path.parent)
    except ReplayError as exc:
        return {"ok": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any failure here is a replay that cannot run, said in one line
        return {"ok": False, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    out_path.write_text(json.dumps(document(spec_path)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
