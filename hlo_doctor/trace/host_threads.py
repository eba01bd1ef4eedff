"""The host threads that dispatch programs, per host, from xplane files or trace JSON files (the
readers of :mod:`hlo_doctor.trace.python_frames` and :mod:`hlo_doctor.trace.json_threads` behind one
call), and the dispatch spans of a trace JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.json_threads import DISPATCH_OF, THREADS_OF, cache_key, pick
from hlo_doctor.trace.model import HostDispatch
from hlo_doctor.trace.python_frames import DriverThread, dispatching_threads, host_of, threads_of_plane
from hlo_doctor.trace.stream import XSpaceFile
from hlo_doctor.trace.trace_json import read_events
from hlo_doctor.trace.xspace import METADATA_PLANE


def read_driver_threads(paths: list[Path] | tuple[Path, ...]) -> dict[str, DriverThread]:
    """host -> its driver thread (the most dispatches), from these xplane or trace JSON files
    (one per host); see :func:`read_host_threads`."""
    return {host: threads[0] for host, threads in read_host_threads(paths).items()}


def read_host_threads(paths: list[Path] | tuple[Path, ...]) -> dict[str, list[DriverThread]]:
    """host -> its dispatching threads, the driver thread first (:func:`dispatching_threads`), from
    the host planes of these xplane files and the host lines of these trace JSON files (one per host).

    Only host planes are parsed. A file that cannot be read, or a host without Python frames or
    dispatch spans, yields nothing for that host.
    """
    found: dict[str, list[DriverThread]] = {}
    json_paths = [Path(p) for p in paths if not str(p).endswith(".pb")]
    if json_paths:  # a trace JSON's host lines, read with its table (see json_threads)
        for host, threads in host_threads_json(json_paths).items():
            found.setdefault(host, []).extend(threads)
    for path in paths:
        if not str(path).endswith(".pb"):
            continue
        host = host_of(path)
        try:
            with XSpaceFile(path, str(path)) as space:
                for ref in space.planes:
                    if not ref.name.startswith("/host:") or ref.name == METADATA_PLANE:
                        continue
                    found.setdefault(host, []).extend(threads_of_plane(host, space.plane(ref)))
        except (InputError, OSError):
            continue
    return {host: picked for host, threads in found.items() if (picked := dispatching_threads(threads))}


def host_dispatch_json(paths: Sequence[Path]) -> tuple[HostDispatch, ...]:
    """Host dispatch spans per program in trace JSON files (kept from the table's read of them)."""
    try:
        cached = DISPATCH_OF.get(cache_key(paths))
        return cached if cached is not None else read_events(paths).host_dispatch()
    except (InputError, OSError):
        return ()


def host_threads_json(paths: Sequence[Path]) -> dict[str, list[DriverThread]]:
    """host -> its dispatching threads in trace JSON files (kept from the table's read of them, else
    read again); empty when the files hold no host thread events or cannot be read."""
    try:
        cached = THREADS_OF.get(cache_key(paths))
        return cached if cached is not None else pick(read_events(paths).threads)
    except (InputError, OSError):
        return {}
