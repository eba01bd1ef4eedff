"""XLA:CPU: how much of a set of ops' summed time they run at once, for a finding that adds them up.

On XLA:CPU the runtime runs independent ops of one program side by side on its threads (a transpose
of one weight beside the convert of another): their summed time overstates what removing all of them
takes out of the step, which is at most their union. :func:`overlap_ratio` reads it from the capture's
op events: the length of the union of the ops' intervals over their summed length, on each host, over
the whole capture. A finding scales its summed time by it. On a GPU or TPU one device's ops run one
after another on its stream and the events of several devices share a host, so no ratio is given.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from hlo_doctor.lint.context import Context
from hlo_doctor.lint.intervals import union
from hlo_doctor.lint.trace_capture import trace_capture

__all__ = ["overlap_ratio"]


def overlap_ratio(ctx: Context, module: str, ops: Collection[str]) -> float | None:
    """The union of the timed events of ``ops`` (of program ``module``) over their summed length, in
    (0, 1]; None off XLA:CPU, without a capture, or with no event of them."""
    if ctx.backend != "cpu" or not ops:
        return None
    cap = trace_capture(ctx)
    if cap is None:
        return None
    wanted = frozenset(ops)
    summed = joined = 0.0
    for starts, ends, mods, names in cap.ops.values():
        mask = np.fromiter((m == module and n in wanted for m, n in zip(mods.tolist(), names.tolist(), strict=True)),
                           bool, len(mods))
        if not mask.any():
            continue
        s, e = starts[mask], ends[mask]
        summed += float((e - s).sum())
        us, ue = union(s, e)
        joined += float((ue - us).sum())
    if summed <= 0.0:
        return None
    return min(1.0, joined / summed)
