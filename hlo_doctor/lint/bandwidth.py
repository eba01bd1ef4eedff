"""Whether an op's time follows the bytes it reads, judged from the capture's own ops.

A narrower read saves time only where an op streams its bytes: its time then scales with them. On
TPU and GPU a large reduction is bandwidth-bound; on XLA:CPU it often is not (an argmax there runs
its compare-and-select loop well below the memory's pace, and a bf16 read may even be slower: the
convert to f32 happens in registers). :func:`read_pace` compares the op's achieved bandwidth (the
op-stats table's ``memory_bw_gibps``: bytes accessed per run over the time per run, as xprof
measures it) with the fastest large copy or convert of the same capture (the pace at which this
machine streams memory, measured in the same window): from :data:`BANDWIDTH_BOUND_SHARE` of it the
op is taken as bandwidth-bound and its time as proportional to its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlo_doctor.hlo import HloModule
from hlo_doctor.lint.context import Context

BANDWIDTH_BOUND_SHARE = 0.5
"""An op reading at this share of the capture's streaming pace or more is taken as bandwidth-bound."""
STREAM_CATEGORIES = frozenset({"copy", "convert"})
"""Op categories that read and write every byte they account (not an in-place update, which the
table charges the whole buffer but which touches a slice): their pace is the machine's."""
MIN_STREAM_BYTES = 32 << 20
"""Ops moving fewer bytes per run than this may sit in a CPU's last-level cache and say nothing about
memory's pace."""


@dataclass(frozen=True, slots=True)
class ReadPace:
    """An op's achieved bandwidth against the capture's streaming pace (GiB/s)."""

    op_gibps: float
    stream_gibps: float
    stream_op: str
    """``module/op`` of the copy or convert that set the pace."""

    @property
    def share(self) -> float:
        """The op's bandwidth as a share of the streaming pace."""
        return self.op_gibps / self.stream_gibps if self.stream_gibps > 0 else 0.0

    @property
    def bandwidth_bound(self) -> bool:
        """True from :data:`BANDWIDTH_BOUND_SHARE` of the streaming pace."""
        return self.share >= BANDWIDTH_BOUND_SHARE


def read_pace(ctx: Context, module: HloModule | str, op: str) -> ReadPace | None:
    """The op's pace against the capture's fastest large copy or convert; None without op stats, a
    bandwidth for the op, or a streaming op in the capture."""
    t = ctx.table
    if t is None or not len(t) or "memory_bw_gibps" not in t or "category" not in t:
        return None
    name = module if isinstance(module, str) else module.name
    mine = t[(t["module"] == name) & (t["op"] == op)]["memory_bw_gibps"].dropna()
    per_run = t["cost_bytes_per_run"] if "cost_bytes_per_run" in t else t["bytes_accessed"]
    streams = t[t["category"].isin(STREAM_CATEGORIES) & (per_run.fillna(0) >= MIN_STREAM_BYTES)
                & t["memory_bw_gibps"].notna()]
    if not len(mine) or not len(streams):
        return None
    best = streams.loc[streams["memory_bw_gibps"].idxmax()]
    op_gibps, stream_gibps = float(mine.max()), float(best["memory_bw_gibps"])
    if not (math.isfinite(op_gibps) and math.isfinite(stream_gibps)) or stream_gibps <= 0:
        return None
    return ReadPace(op_gibps, stream_gibps, f"{best['module']}/{best['op']}")
