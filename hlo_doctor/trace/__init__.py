"""Events of HLO ops, step marks, compile work and HLO modules, read from xplane files.

An xplane (``<host>.xplane.pb``, an ``XSpace`` protobuf) holds planes -> lines -> events.
:mod:`~hlo_doctor.trace.xspace` reads it (protobuf, by field name), :mod:`~hlo_doctor.trace.conventions`
knows where each backend puts its op events, step marks and compile work,
:mod:`~hlo_doctor.trace.read` turns the files of one capture into a :class:`Trace`
(:mod:`~hlo_doctor.trace.model`), and :mod:`~hlo_doctor.trace.xprof` asks xprof for its own reading.
"""

from __future__ import annotations

from hlo_doctor.trace.conventions import COMPILE_MARKERS, split_op_text
from hlo_doctor.trace.dispatch import read_host_dispatch
from hlo_doctor.trace.model import CompileEvent, HostDispatch, ModuleProto, OpEvents, StepMark, Trace
from hlo_doctor.trace.read import XPLANE_SUFFIX, find_xplanes, read_trace
from hlo_doctor.trace.xprof import datatable_rows, xprof_hlo_stats
from hlo_doctor.trace.xspace import check_xspace, module_protos_from_xspace, program_id_of

__all__ = [
    "COMPILE_MARKERS", "XPLANE_SUFFIX", "CompileEvent", "HostDispatch", "ModuleProto", "OpEvents", "StepMark", "Trace",
    "check_xspace", "datatable_rows", "find_xplanes", "module_protos_from_xspace", "program_id_of",
    "read_host_dispatch", "read_trace", "split_op_text", "xprof_hlo_stats",
]
