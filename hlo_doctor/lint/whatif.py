"""What-if runs: time an op's replacement on this machine when the capture cannot say what it costs.

A fix that narrows what a reduction reads (HD004: an argmax over the bf16 logits instead of their
float32 copy) saves bandwidth on a GPU or TPU, where a large reduction streams its bytes. On XLA:CPU
the reduction's loop often bounds it instead (:mod:`.bandwidth` tells which from the capture), and
whether the narrower read is then faster or slower depends on the compiler (a bf16 argmax ran 1.6x
the time of the float32 one on jaxlib 0.10.2's XLA:CPU, less than it on 0.11.2's). No trace of the
original program holds that figure, so it is measured: the same reduction over the same shape, in
the wide and in the narrow dtype, compiled by this machine's XLA:CPU and timed alternately
(:data:`REPS` runs each in pairs; the figure is the median of the pairs' ratios, with its
interval: :mod:`.measurement`). The ratio scales the op's time in the capture, so the capture's own
pace (its machine, its load) stays the unit.

A what-if is measured once per capture, machine, jax and jaxlib: the measurement is stored with the
capture (:mod:`.store`, ``Context.measurements``) and every later diagnosis of it reads it back, so
the same capture gives the same figures. A what-if that cannot run (a reduction it cannot build, a
tensor over :data:`MAX_BYTES`, a program this XLA will not compile or run) is a :class:`Refused`
with the reason in one line, and the finding keeps the capture's own estimate.

A what-if runs only where its answer stands for the capture's: the capture is from XLA:CPU, and it
names the same jax and jaxlib versions as this process has (the compiler decides the loop). It is
off unless asked (``Context.what_if``: ``diagnose`` and ``doctor`` ask by default; ``--no-what-if``).
How long one may take: :data:`MAX_SECONDS`, or ``HLO_DOCTOR_WHAT_IF_SECONDS`` in the environment.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from hlo_doctor.lint.activity import measuring
from hlo_doctor.lint.context import Context
from hlo_doctor.lint.measurement import Measurement, paired_ratio, versions_here
from hlo_doctor.lint.store import MeasurementStore

REPS = 7
"""Timed runs of each dtype (alternating wide, narrow)."""
MAX_SECONDS = 4.0
"""Stop adding runs past this much time (at least 3 of each are kept); ``HLO_DOCTOR_WHAT_IF_SECONDS``
overrides it."""
SECONDS_ENV = "HLO_DOCTOR_WHAT_IF_SECONDS"
MAX_BYTES = 1 << 30
"""Largest wide tensor a what-if allocates."""
KIND = "what-if/narrow-read"
"""The store's kind for these measurements."""
_DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
_KINDS = ("argmax", "argmin", "max", "min")
_PROCESS_STORE = MeasurementStore(None)
"""Where a what-if asked for without a store is kept: this process only."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a what-if did not run, in one line."""

    reason: str


@dataclass(frozen=True, slots=True)
class NarrowReadTiming:
    """One reduction timed over the wide and the narrow dtype on this machine (the stored measurement)."""

    kind: str
    dims: tuple[int, ...]
    axes: tuple[int, ...]
    wide: str
    narrow: str
    measurement: Measurement

    @property
    def wide_us(self) -> float:
        """Median time of the wide read (us)."""
        return _median(self.measurement.side("wide"))

    @property
    def narrow_us(self) -> float:
        """Median time of the narrow read (us)."""
        return _median(self.measurement.side("narrow"))

    @property
    def ratio(self) -> float:
        """Narrow time over wide time (median of the paired runs): below 1 the narrower read is faster."""
        return self.measurement.median

    @property
    def reps(self) -> int:
        return self.measurement.reps

    @property
    def jax_version(self) -> str:
        return self.measurement.identity.jax

    def text(self) -> str:
        """``argmax over bf16[64,256000] 59.0 ms, over f32 36.5 ms (measured here 2026-12-01, 7 runs each,
        x1.61 [1.55, 1.68], jax 0.10.2)``."""
        from hlo_doctor.core.format import fmt_duration

        shape = ",".join(str(d) for d in self.dims)
        return (f"{self.kind} over {self.narrow}[{shape}] {fmt_duration(self.narrow_us)}, over {self.wide} "
                f"{fmt_duration(self.wide_us)} ({self.measurement.label()}, jax {self.jax_version})")


def _median(values: tuple[float, ...]) -> float:
    import statistics

    return float(statistics.median(values)) if values else math.nan


def refusal(ctx: Context, backends: tuple[str, ...] = ("cpu",)) -> str:
    """Why no what-if runs for ``ctx`` ("" when one may): what-ifs on, a capture of one of
    ``backends`` (XLA's platform names), made by this machine's jax and jaxlib."""
    if not ctx.what_if:
        return "what-if runs are off"
    if ctx.backend not in backends:
        return f"the capture is from {ctx.backend or 'an unknown backend'}, not " + \
            " or ".join(f"XLA:{b.upper()}" for b in backends)
    versions = dict(ctx.versions)
    # A run directory names them ``jax``/``jaxlib``, the trace's metadata plane ``jax_version``...
    want = (versions.get("jax", versions.get("jax_version", "")), versions.get("jaxlib", versions.get("jaxlib_version", "")))
    if not want[0]:
        return "the capture names no jax version"
    have = versions_here()  # from the packages' metadata: reusing a stored measurement never imports jax
    if not have[0] or not have[1]:
        return "jax is not installed here"
    if want[0] != have[0] or (want[1] and want[1] != have[1]):
        ran = f"jax {want[0]}" + (f" (jaxlib {want[1]})" if want[1] else "")
        return (f"the capture ran {ran}, this machine has jax {have[0]} (jaxlib {have[1]}): its "
                f"XLA:{ctx.backend.upper()} may compile the loop otherwise")
    return ""


def narrow_read(kind: str, dims: tuple[int, ...], axes: tuple[int, ...], wide: str, narrow: str,
                store: MeasurementStore | None = None) -> NarrowReadTiming | Refused:
    """``kind`` over ``dims`` reduced on ``axes`` in ``wide`` and in ``narrow`` (HLO dtype names), from
    ``store`` when it holds the measurement, else timed here and kept there; :class:`Refused` (why) for
    a reduction or dtype it cannot build, a tensor over :data:`MAX_BYTES`, or one that does not run."""
    if kind not in _KINDS or wide not in _DTYPES or narrow not in _DTYPES or not dims:
        return Refused(f"no what-if for a {kind} from {wide} to {narrow}")
    if kind in ("argmax", "argmin") and len(axes) != 1:
        return Refused(f"no what-if for a {kind} over {len(axes)} axes")
    if any(a < 0 or a >= len(dims) for a in axes):
        return Refused(f"no what-if for axes {list(axes)} of a rank-{len(dims)} tensor")
    if math.prod(dims) * 8 > MAX_BYTES:
        return Refused(f"the tensor is over the what-if's {MAX_BYTES >> 20} MiB limit")
    store = store if store is not None else _PROCESS_STORE
    key = f"{kind} over [{','.join(str(d) for d in dims)}] axes {','.join(str(a) for a in axes)}: {wide} vs {narrow}"
    found = store.lookup(KIND, key)
    if found is None:
        try:
            with measuring(f"measuring a what-if: {key}"):
                found = _measure(kind, tuple(dims), tuple(axes), wide, narrow, key, store)
        except Exception as exc:  # noqa: BLE001 - a what-if that cannot run leaves the capture's own estimate
            words = " ".join(str(exc).split())[:160]
            return Refused(f"the reduction did not run here ({type(exc).__name__}{': ' + words if words else ''})")
        store.record(found)
    return NarrowReadTiming(kind=kind, dims=tuple(dims), axes=tuple(axes), wide=wide, narrow=narrow,
                            measurement=found)


def max_seconds() -> float:
    """How long a what-if may add runs: ``HLO_DOCTOR_WHAT_IF_SECONDS`` when set to a number >= 0."""
    try:
        value = float(os.environ.get(SECONDS_ENV, MAX_SECONDS))
    except ValueError:
        return MAX_SECONDS
    return value if math.isfinite(value) and value >= 0 else MAX_SECONDS


def _measure(kind: str, dims: tuple[int, ...], axes: tuple[int, ...], wide: str, narrow: str, key: str,
             store: MeasurementStore) -> Measurement:
    import jax
    import jax.numpy as jnp
    import numpy as np

    cpu = jax.devices("cpu")[0]
    functions = {"argmax": lambda a: jnp.argmax(a, axis=axes[0]), "argmin": lambda a: jnp.argmin(a, axis=axes[0]),
                 "max": lambda a: jnp.max(a, axis=axes), "min": lambda a: jnp.min(a, axis=axes)}
    f = jax.jit(functions[kind])
    values = np.random.default_rng(0).standard_normal(dims, dtype=np.float32)
    x = jax.device_put(values, cpu).astype(_DTYPES[wide])
    y = x.astype(_DTYPES[narrow])
    del values
    jax.block_until_ready((f(x), f(y)))  # compile both outside the timing
    times: dict[str, list[float]] = {"wide": [], "narrow": []}
    t_end = time.perf_counter() + max_seconds()
    for i in range(REPS):
        for side, a in (("wide", x), ("narrow", y)) if i % 2 == 0 else (("narrow", y), ("wide", x)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(a))
            times[side].append((time.perf_counter() - t0) * 1e6)
        if i >= 2 and time.perf_counter() > t_end:
            break
    return paired_ratio(KIND, key, ("wide", times["wide"]), ("narrow", times["narrow"]), store.identity())
