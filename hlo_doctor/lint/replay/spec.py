"""What a replay runs, as plain values both processes read: the two sides' program calls.

Side A is the step as captured (each affected program as XLA compiled it); side B is the step with
the fix's change (a program dropped, a parameter narrowed, a copy aliased, a map dropped). A call
names the module's proto (a file beside the spec), how often it runs per iteration, the edits made
to it, and where its parameters come from: another call's output in the same iteration (the
convert program's result into its consumer), its own output of the previous iteration (a buffer a
decode loop carries), or random values of the parameter's shape.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

MLIR_DTYPES = {"f32": "f32", "f64": "f64", "bf16": "bf16", "f16": "f16", "s32": "i32", "s64": "i64",
               "s8": "i8", "s16": "i16", "u8": "ui8", "u32": "ui32", "u64": "ui64", "pred": "i1"}
"""HLO element types as MLIR names them (the edits write MLIR)."""


@dataclass(frozen=True, slots=True)
class Parameter:
    """One entry parameter: its HLO dtype and dims, and where its value comes from."""

    dtype: str
    dims: tuple[int, ...]
    source: tuple[int, int] | None = None
    """(call index, output index): that call's output; a call at or after this one means its output
    of the previous iteration (a carried buffer). None: random values, made once."""


@dataclass(frozen=True, slots=True)
class Call:
    """One program run on a side, and the edits the fix makes to it."""

    module: str
    """``name(program id)`` as the capture names it."""
    proto: str
    """File name of its ``HloModuleProto`` beside the spec."""
    parameters: tuple[Parameter, ...]
    runs: int = 1
    narrow: tuple[tuple[int, str], ...] = ()
    """(parameter number, HLO dtype): the parameter is taken in that dtype and widened inside."""
    narrow_reads: tuple[int, ...] = ()
    """Narrowed parameters whose selections read the narrow tensor itself (HD004: "reduce the bf16
    tensor"), not a widened copy of it made inside the program."""
    alias: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """(parameter number, output indices): the parameter is returned itself, donated, no copy."""
    drop_maps: bool = False
    """Selections are fed the value before the order-keeping maps that precede them."""
    eager_astype: str = ""
    """An HLO dtype: the call is an eager ``x.astype(dtype)`` of its one parameter, run through jax's
    own dispatch as the captured step ran it (the Python and dispatch time come with it)."""

    @property
    def edited(self) -> bool:
        return bool(self.narrow or self.alias or self.drop_maps)


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Both sides and the time the child may spend timing them."""

    a: tuple[Call, ...]
    b: tuple[Call, ...]
    seconds: float = 3.0
    """Time spent on pairs before the first look at the interval."""
    cap_seconds: float = 10.0
    """The most time spent on pairs: after the first look, pairs are added until the interval decides
    (:func:`.timing.decision`) or this cap is reached."""
    min_pairs: int = 8
    max_pairs: int = 4000
    sample_us: float = 2000.0
    """Each timed sample repeats a side's iteration until it lasts about this long."""
    notes: tuple[str, ...] = field(default=())
    platform: str = "cpu"
    """The capture's backend, where the child runs both sides (``cpu``, ``tpu``)."""
    device_kind: str = ""
    """The capture's device (``TPU v5 lite``): the child refuses another ("": not compared)."""

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @staticmethod
    def read(path: Path) -> ReplaySpec:
        doc = json.loads(path.read_text(encoding="utf-8"))

        def call(c: dict[str, object]) -> Call:
            params = tuple(Parameter(p["dtype"], tuple(p["dims"]), tuple(p["source"]) if p["source"] else None)  # type: ignore[index,arg-type]
                           for p in c["parameters"])  # type: ignore[attr-defined]
            return Call(module=str(c["module"]), proto=str(c["proto"]), parameters=params, runs=int(c["runs"]),  # type: ignore[call-overload]
                        narrow=tuple((int(n), str(d)) for n, d in c["narrow"]),  # type: ignore[attr-defined]
                        narrow_reads=tuple(int(n) for n in c.get("narrow_reads", ())),  # type: ignore[attr-defined]
                        alias=tuple((int(n), tuple(o)) for n, o in c["alias"]),  # type: ignore[attr-defined]
                        drop_maps=bool(c["drop_maps"]), eager_astype=str(c.get("eager_astype", "")))  # type: ignore[attr-defined]

        return ReplaySpec(a=tuple(call(c) for c in doc["a"]), b=tuple(call(c) for c in doc["b"]),
                          seconds=float(doc["seconds"]), cap_seconds=float(doc.get("cap_seconds", doc["seconds"])),
                          min_pairs=int(doc["min_pairs"]),
                          max_pairs=int(doc["max_pairs"]), sample_us=float(doc["sample_us"]),
                          notes=tuple(doc.get("notes", ())), platform=str(doc.get("platform", "cpu")),
                          device_kind=str(doc.get("device_kind", "")))
