"""The roofline columns of the op-stats table: achieved bandwidth and FLOP rate of each op, its
operational intensity, what bounds it, and how close it comes to the device's peaks.

Per row (one run's cost, times the op's runs, over its total time, as xprof's hlo_stats computes
its "Measured memory BW", FLOP rate and "Operational intensity"):

- ``cost_bytes_per_run``: the trace's ``bytes_accessed`` (TPU op metadata, a GPU event stat), else
  XLA's cost analysis of the op's HLO (:mod:`hlo_doctor.hlo.cost`), else, for an op whose module the
  trace does not hold, its operands plus its result (from its HLO text);
- ``flops_per_run``: the trace's ``flops``, else XLA's cost analysis of the op's HLO
  (:mod:`hlo_doctor.hlo.flops`): on GPU by XLA's GPU conventions as xprof's hlo_stats counts them
  (an elementwise op priced at the cycles XLA's GPU op profile gives it per element, a fusion's
  instructions weighted by how much of them it uses; an op whose widest input is 8 bits at half
  its FLOPs, 4 bits at a quarter, as xprof's ``utils/xprof_gpu_cost_analysis.cc`` normalizes them
  to the 16-bit peak), elsewhere by XLA's generic ones (one FLOP per element of an elementwise
  op, transcendentals apart); unknown (NaN) for an op with neither (a custom call XLA does not
  price, an op whose module the trace does not hold);
- ``memory_bw_gibps`` = bytes x runs / total time (GiB/s, 2**30), ``flop_rate_gflops`` = FLOPs x
  runs / total time, ``intensity_flop_per_byte`` = FLOPs / bytes;
- ``pct_of_peak_bw`` and ``pct_of_peak_flops`` against the device's peaks
  (:mod:`hlo_doctor.trace.peaks`: the device plane's stats, else known chips; never XLA:CPU);
- ``bound_by``: the resource the op uses the larger share of its peak of, as xprof decides it
  (``compute`` when its FLOP share is at least its bandwidth share, which is an intensity at or above
  the ridge point); ``memory`` for an op that moves bytes and has no FLOP count; empty when a peak
  is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.cost import op_cost
from hlo_doctor.hlo.flops import Convention, xprof_device_flops
from hlo_doctor.trace.peaks import DevicePeaks

GIB = float(2**30)
ROOFLINE_COLUMNS: tuple[str, ...] = (
    "cost_bytes_per_run", "flops_per_run", "memory_bw_gibps", "flop_rate_gflops", "intensity_flop_per_byte",
    "pct_of_peak_bw", "pct_of_peak_flops", "bound_by",
)
"""The columns :func:`add_roofline` fills (their spec is in :data:`hlo_doctor.opstats.COLUMNS`)."""

ModuleLookup = Callable[[str, "int | None"], "HloModule | None"]
"""(module name, program id) -> the parsed module the op belongs to, or None."""


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def run_cost(row: dict[str, Any], stated: tuple[float | None, float | None],
             module: HloModule | None, convention: Convention = "xla") -> tuple[float | None, float | None]:
    """(FLOPs, bytes) of one run of the row's op: what the trace states, completed from the HLO
    (FLOPs by ``convention``: ``gpu`` for a GPU capture, ``xla`` otherwise)."""
    flops, nbytes = stated
    if flops is not None and nbytes is not None:
        return flops, nbytes
    inst = module.instruction(str(row["op"])) if module is not None else None
    if inst is not None:
        cost = op_cost(module, inst, convention)  # type: ignore[arg-type]
        hlo_flops = cost.flops
        if hlo_flops is not None and convention == "gpu":
            # xprof/utils/xprof_gpu_cost_analysis.cc: an op with 8-bit (4-bit) inputs counts half
            # (a quarter) of its FLOPs against the 16-bit peak.
            hlo_flops = xprof_device_flops(module, inst, hlo_flops)  # type: ignore[arg-type]
        return (flops if flops is not None else hlo_flops,
                nbytes if nbytes is not None else cost.bytes_accessed)
    if nbytes is None and int(row.get("bytes_accessed") or 0) > 0:
        # No module: the op's text still gives its operand and result shapes.
        nbytes = float(row["bytes_accessed"])
    return flops, nbytes


def bound_by(flop_rate: float | None, byte_rate: float | None, peaks: DevicePeaks | None) -> str:
    """``compute``, ``memory`` or empty: which peak the op comes closer to (rates per second)."""
    if peaks is None or not peaks.tflops or not peaks.hbm_gbps or byte_rate is None:
        return ""
    if flop_rate is None:
        return "memory" if byte_rate > 0 else ""
    flop_share = flop_rate / (peaks.tflops * 1e12)
    byte_share = byte_rate / (peaks.hbm_gbps * 1e9)
    if flop_share == 0 and byte_share == 0:
        return ""
    return "compute" if flop_share >= byte_share else "memory"


def roofline_values(row: dict[str, Any], flops: float | None, nbytes: float | None,
                    peaks: DevicePeaks | None) -> dict[str, Any]:
    """The roofline columns of one row, from one run's FLOPs and bytes."""
    seconds = float(row["total_time_us"]) / 1e6
    runs = int(row["occurrences"])
    byte_rate = nbytes * runs / seconds if nbytes is not None and seconds > 0 else None
    flop_rate = flops * runs / seconds if flops is not None and seconds > 0 else None
    intensity = flops / nbytes if flops is not None and nbytes else None
    pct_bw = byte_rate / (peaks.hbm_gbps * 1e9) * 100 if byte_rate is not None and peaks and peaks.hbm_gbps else None
    pct_flops = (flop_rate / (peaks.tflops * 1e12) * 100
                 if flop_rate is not None and peaks and peaks.tflops else None)
    return {
        "cost_bytes_per_run": _or_nan(nbytes),
        "flops_per_run": _or_nan(flops),
        "memory_bw_gibps": _or_nan(None if byte_rate is None else byte_rate / GIB),
        "flop_rate_gflops": _or_nan(None if flop_rate is None else flop_rate / 1e9),
        "intensity_flop_per_byte": _or_nan(intensity),
        "pct_of_peak_bw": _or_nan(pct_bw),
        "pct_of_peak_flops": _or_nan(pct_flops),
        "bound_by": bound_by(flop_rate, byte_rate, peaks) if seconds > 0 else "",
    }


def add_roofline(rows: list[dict[str, Any]], module_of: ModuleLookup,
                 op_costs: Iterable[tuple[str, int, str, float | None, float | None]],
                 peaks: DevicePeaks | None, backend: str = "") -> None:
    """Fill :data:`ROOFLINE_COLUMNS` of each row (keys ``module``, ``program_id``, ``op``,
    ``occurrences``, ``total_time_us``, ``bytes_accessed``) in place.

    ``backend`` (``gpu``, ``tpu``, ``cpu``) picks the FLOP convention of ops the trace does not
    price: XLA's GPU cost analysis on ``gpu``, its generic one otherwise.
    ``op_costs`` are the trace's own (module, program id, op, FLOPs, bytes) of one run (program id -1
    when unknown); ``module_of`` finds an op's parsed module.
    """
    stated = {(m, p, o): (f, b) for m, p, o, f, b in op_costs}
    convention: Convention = "gpu" if backend == "gpu" else "xla"
    for row in rows:
        pid = row["program_id"]
        key = (str(row["module"]), -1 if pid is None else int(pid), str(row["op"]))
        cost = stated.get(key, (None, None))
        module = module_of(key[0], pid) if None in cost else None
        flops, nbytes = run_cost(row, cost, module, convention)
        row.update(roofline_values(row, flops, nbytes, peaks))


def peaks_line(peaks: DevicePeaks | None, backend: str) -> str:
    """One line for the table's header: the peaks the % columns use and where they come from."""
    if peaks is None or (peaks.tflops is None and peaks.hbm_gbps is None):
        why = "XLA:CPU states no peaks" if backend == "cpu" else "no peak in the trace and the chip is not known"
        return f"roofline: unknown peak ({why}): % of peak and bound-by left blank"
    parts = []
    if peaks.tflops is not None:
        parts.append(f"{peaks.tflops:,.1f} TFLOP/s")
    if peaks.hbm_gbps is not None:
        parts.append(f"{peaks.hbm_gbps:,.0f} GB/s ({peaks.hbm_gbps * 1e9 / GIB:,.0f} GiB/s)")
    ridge = peaks.ridge_flop_per_byte
    ridge_text = f", ridge {ridge:,.1f} FLOP/byte" if ridge is not None else ""
    return f"roofline peaks: {' · '.join(parts)}{ridge_text} ({peaks.source})"
