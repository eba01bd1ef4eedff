"""Host dispatch of each program, read from a trace's host events.

A program launched on its own costs the step more than its device time: the host enters jax's
dispatch (``PjitFunction(<name>)``, the C++ fast path every jitted or eager call goes through),
prepares arguments, launches, and the next program waits for it. The trace records that span on
the host plane (``/host:CPU``) on every backend. :mod:`hlo_doctor.trace.dispatch` reads those spans so a
rule can count what removing a standalone program really saves (see docs/rules.md, "How the estimate is built").
"""

from __future__ import annotations

# The trace package holds the one XSpace reader; this module keeps the names rules import.
from hlo_doctor.trace import HostDispatch, read_host_dispatch

__all__ = ["HostDispatch", "read_host_dispatch"]
