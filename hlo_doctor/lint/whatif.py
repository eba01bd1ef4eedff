"""What-if runs: time an op's replacement on this machine when the capture cannot say what it costs.

A fix that narrows what a reduction reads (HD004: an argmax over the bf16 logits instead of their
float32 copy) saves bandwidth on a GPU or TPU, where a large reduction streams its bytes. On XLA:CPU
the reduction's loop often bounds it instead (:mod:`.bandwidth` tells which from the capture), and
whether the narrower read is then faster or slower depends on the compiler (a bf16 argmax ran 1.6x
the time of the float32 one on jaxlib 0.10.2's XLA:CPU, less than it on 0.11.2's). No trace of the
original program holds that figure, so it is measured: the same reduction over the same shape, in
the wide and in the narrow dtype, compiled by this machine's XLA:CPU and timed alternately
(:data:`REPS` runs each, the median). The ratio scales the op's time in the capture, so the
capture's own pace (its machine, its load) stays the unit.

A what-if runs only where its answer stands for the capture's: the capture is from XLA:CPU, and it
names the same jax and jaxlib versions as this process has (the compiler decides the loop). It is
off unless asked (``Context.what_if``: ``diagnose`` and ``doctor`` ask by default; ``--no-what-if``).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from functools import lru_cache

from hlo_doctor.lint.context import Context

REPS = 7
"""Timed runs of each dtype (alternating wide, narrow)."""
MAX_SECONDS = 4.0
"""Stop adding runs past this much time (at least 3 of each are kept)."""
MAX_BYTES = 1 << 30
"""Largest wide tensor a what-if allocates."""
_DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
_KINDS = ("argmax", "argmin", "max", "min")


@dataclass(frozen=True, slots=True)
class NarrowReadTiming:
    """One reduction timed over the wide and the narrow dtype on this machine (us, medians)."""

    kind: str
    dims: tuple[int, ...]
    axes: tuple[int, ...]
    wide: str
    narrow: str
    wide_us: float
    narrow_us: float
    reps: int
    jax_version: str

    @property
    def ratio(self) -> float:
        """Narrow time over wide time: below 1 the narrower read is faster."""
        return self.narrow_us / self.wide_us if self.wide_us > 0 else math.nan

    def text(self) -> str:
        """``argmax over bf16[64,256000] 59.0 ms, over f32 36.5 ms (x1.62; median of 7 each, jax 0.10.2)``."""
        from hlo_doctor.core.format import fmt_duration

        shape = ",".join(str(d) for d in self.dims)
        return (f"{self.kind} over {self.narrow}[{shape}] {fmt_duration(self.narrow_us)}, over {self.wide} "
                f"{fmt_duration(self.wide_us)} (x{self.ratio:.2f}; median of {self.reps} each, jax {self.jax_version})")


def refusal(ctx: Context) -> str:
    """Why no what-if runs for ``ctx`` ("" when one may)."""
    if not ctx.what_if:
        return "what-if runs are off"
    if ctx.backend != "cpu":
        return f"the capture is from {ctx.backend or 'an unknown backend'}, not XLA:CPU"
    versions = dict(ctx.versions)
    # A run directory names them ``jax``/``jaxlib``, the trace's metadata plane ``jax_version``...
    want = (versions.get("jax", versions.get("jax_version", "")), versions.get("jaxlib", versions.get("jaxlib_version", "")))
    if not want[0]:
        return "the capture names no jax version"
    try:
        import jax
        import jaxlib
    except ImportError:
        return "jax is not installed here"
    have = (jax.__version__, getattr(jaxlib, "__version__", jax.__version__))
    if want[0] != have[0] or (want[1] and want[1] != have[1]):
        return f"the capture ran jax {want[0]}, this machine has {have[0]}: its XLA:CPU may compile the loop otherwise"
    return ""


def narrow_read(kind: str, dims: tuple[int, ...], axes: tuple[int, ...], wide: str,
                narrow: str) -> NarrowReadTiming | None:
    """Time ``kind`` over ``dims`` reduced on ``axes`` in ``wide`` and in ``narrow`` (HLO dtype names);
    None for a reduction or dtype it cannot build, or a tensor over :data:`MAX_BYTES`."""
    if kind not in _KINDS or wide not in _DTYPES or narrow not in _DTYPES or not dims:
        return None
    if kind in ("argmax", "argmin") and len(axes) != 1:
        return None
    if math.prod(dims) * 8 > MAX_BYTES or any(a < 0 or a >= len(dims) for a in axes):
        return None
    return _narrow_read(kind, tuple(dims), tuple(axes), wide, narrow)


@lru_cache(maxsize=16)
def _narrow_read(kind: str, dims: tuple[int, ...], axes: tuple[int, ...], wide: str,
                 narrow: str) -> NarrowReadTiming | None:
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
    t_end = time.perf_counter() + MAX_SECONDS
    for i in range(REPS):
        for side, a in (("wide", x), ("narrow", y)) if i % 2 == 0 else (("narrow", y), ("wide", x)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(a))
            times[side].append((time.perf_counter() - t0) * 1e6)
        if i >= 2 and time.perf_counter() > t_end:
            break
    return NarrowReadTiming(kind=kind, dims=dims, axes=axes, wide=wide, narrow=narrow,
                            wide_us=statistics.median(times["wide"]), narrow_us=statistics.median(times["narrow"]),
                            reps=len(times["wide"]), jax_version=jax.__version__)
