"""Host dispatch of each program, read from a trace's host events.

A program launched on its own costs the step more than its device time: the host enters jax's
dispatch (``PjitFunction(<name>)``, the C++ fast path every jitted or eager call goes through),
prepares arguments, launches, and the next program waits for it. The trace records that span on
the host plane (``/host:CPU``) on every backend. This module reads those spans so a rule can count
what removing a standalone program really saves (see docs/rules.md, "How the estimate is built").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_DISPATCH = re.compile(r"^PjitFunction\((.+)\)$")


@dataclass(frozen=True, slots=True)
class HostDispatch:
    """Outermost ``PjitFunction(<name>)`` spans of one program on the host."""

    module: str
    """``jit_<name>``: the module name XLA gives the program."""
    calls: int
    total_us: float

    @property
    def per_call_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0


def read_host_dispatch(paths: list[Path]) -> tuple[HostDispatch, ...]:
    """Dispatch spans per program from the host planes of ``paths`` (xplane files).

    Nested events of the same name (jax re-enters the fast path on a cache miss) count once, by
    their outermost span. A file that cannot be parsed yields nothing: the estimate then counts
    device time only, as before.
    """
    from google.protobuf.message import DecodeError

    from hlo_doctor.trace import xplane_pb2

    calls: dict[str, int] = {}
    total: dict[str, float] = {}
    for path in paths:
        space = xplane_pb2.XSpace()  # type: ignore[attr-defined]
        try:
            space.ParseFromString(path.read_bytes())
        except (DecodeError, OSError):
            continue
        for plane in space.planes:
            if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
                continue
            names = {k: m.group(1) for k, v in plane.event_metadata.items()
                     if (m := _DISPATCH.match(v.name))}
            if not names:
                continue
            for line in plane.lines:
                spans = sorted((e.offset_ps, e.offset_ps + e.duration_ps, names[e.metadata_id])
                               for e in line.events if e.metadata_id in names)
                open_until: dict[str, int] = {}
                for start, end, name in spans:
                    if start < open_until.get(name, -1):
                        continue  # nested inside an outer span of the same program
                    open_until[name] = end
                    module = f"jit_{name}"
                    calls[module] = calls.get(module, 0) + 1
                    total[module] = total.get(module, 0.0) + (end - start) / 1e6
    return tuple(HostDispatch(m, calls[m], total[m]) for m in sorted(calls))
