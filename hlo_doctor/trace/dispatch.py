"""Host dispatch of each program, read from a trace's host events.

A program launched on its own costs the step more than its device time: the host enters jax's
dispatch (``PjitFunction(<name>)``, the C++ fast path every jitted or eager call goes through),
prepares arguments, launches, and the next program waits for it. The trace records that span on
the host plane (``/host:CPU``) on every backend.
"""

from __future__ import annotations

import re
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.xspace import METADATA_PLANE, parse_plane, plane_name, split_planes

_DISPATCH = re.compile(r"^PjitFunction\((.+)\)$")


def read_host_dispatch(paths: list[Path]) -> tuple[HostDispatch, ...]:
    """Dispatch spans per program from the host planes of ``paths`` (xplane files).

    Nested events of the same name (jax re-enters the fast path on a cache miss) count once, by
    their outermost span. Only host planes are parsed (a device trace's planes are skipped). A file
    that cannot be read yields nothing: an estimate then counts device time only.
    """
    calls: dict[str, int] = {}
    total: dict[str, float] = {}
    for path in paths:
        try:
            planes = split_planes(path.read_bytes(), str(path))
            host_planes = [data for data in planes
                           if (name := plane_name(data, str(path))).startswith("/host:") and name != METADATA_PLANE]
            parsed = [parse_plane(data, str(path)) for data in host_planes]
        except (InputError, OSError):
            continue
        for plane in parsed:
            names = {entry.key: m.group(1) for entry in plane.event_metadata
                     if (m := _DISPATCH.match(entry.value.name))}
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
