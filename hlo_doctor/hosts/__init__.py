"""Reading a capture's host files in parallel: a local process pool or a Dask cluster, one merge.

A TPU pod writes one xplane per host. :func:`read_capture` reads each host file where the work is
sent (:class:`~hlo_doctor.hosts.local.InProcess` for ``--jobs 1``,
:class:`~hlo_doctor.hosts.local.LocalPool` for ``--jobs N``,
:class:`~hlo_doctor.hosts.cluster.DaskCluster` for ``--scheduler ADDRESS``), each worker hands back
the host's sums (:mod:`~hlo_doctor.hosts.work`), and :mod:`~hlo_doctor.hosts.merge` makes the one
table that reading every file in one process gives. Nothing outside this package knows which ran.
"""

from __future__ import annotations

from hlo_doctor.hosts.capture import CaptureReader, PodOptions, read_capture, read_capture_sums
from hlo_doctor.hosts.local import cores_available

__all__ = ["CaptureReader", "PodOptions", "cores_available", "read_capture", "read_capture_sums"]
