"""Threat: an HLO module in a capture that XLA's printer (native code) crashes on, past every id check.

The module is a real one from a sample capture with one instruction's opcode changed (``convert`` made
``recv``: ids, operands and computations untouched), which makes this jaxlib's printer abort. The
printer runs in a process of its own: the command ends with exit 2 and one line naming the file and
the host, or, with ``--skip-bad-hosts``, leaves the host out and says so; never exit 134/139 or 3.
A structure-aware fuzz of the sample captures' real modules (seeded, bounded in count and time) holds
the same through the printer and through ``stats``/``diagnose``.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import pytest
from proto_fuzz import crashing_xplane, mutate, with_opcode
from test_bounded_readers import one_line_error
from threats import REPO, cli

from hlo_doctor.hlo.printer import PrinterCrash, print_modules
from hlo_doctor.trace.read import read_module_protos

RUN = REPO / "sample_traces" / "engine_b64_original_a"
OTHER = REPO / "sample_traces" / "engine_b64_original_b"


def _xplane(run: Path) -> Path:
    return next(run.glob("plugins/profile/*/*.xplane.pb"))


def _bad_run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    xplane = _xplane(run)
    crashing_xplane(_xplane(RUN), xplane)
    (run / "opstats.json").unlink()  # the table is built from the capture, not the export beside it
    return run, xplane


def test_the_printer_names_the_crash_and_starts_again() -> None:
    protos = read_module_protos(_xplane(RUN))
    good = protos[0]
    bad = next(b for b in (with_opcode(p.hlo_proto, b"convert", b"recv") for p in protos) if b is not None)
    with pytest.raises(PrinterCrash, match=r"XLA's HLO printer crashed \(SIGABRT\) on module m of host vm") as info:
        print_modules([(good.hlo_proto, "first", "vm", "x.xplane.pb"), (bad, "m", "vm", "x.xplane.pb")])
    assert info.value.path == "x.xplane.pb" and info.value.host == "vm"
    text = print_modules([(good.hlo_proto, "again", "vm", "x.xplane.pb")])[0]
    assert isinstance(text, str) and "ENTRY" in text  # a new printer for the next module


@pytest.mark.parametrize("command", ["stats", "diagnose"])
def test_a_module_that_crashes_the_printer_is_exit_2_naming_file_and_host(tmp_path: Path, command: str) -> None:
    run, xplane = _bad_run(tmp_path)
    r = cli(command, str(run), timeout=180)
    one_line_error(r, str(xplane), "host vm", "printer crashed")


def test_memory_reads_the_buffers_of_a_module_the_printer_crashes_on_from_its_proto(tmp_path: Path) -> None:
    # The memory view reads each buffer's op, shape and line from the module proto's fields
    # (memory.hlo_fields): XLA's printer is not started, so the module it crashes on is read all the same.
    run, _ = _bad_run(tmp_path)
    r = cli("memory", str(run), "--format", "json", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    good = cli("memory", str(RUN), "--format", "json", timeout=180)
    peaks = [{(p["module"], p["program_id"]): p["peak_bytes"] for p in json.loads(x.stdout)["programs"]} for x in (r, good)]
    assert peaks[0] == peaks[1] and "printer crashed" not in r.stderr


def _pod(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "pod"
    hosts = root / "plugins" / "profile" / "2026_01_01_00_00_00"
    hosts.mkdir(parents=True)
    # The bad host first: a module both hosts hold is printed from the first that has it.
    bad = crashing_xplane(_xplane(RUN), hosts / "cpu-host-0.xplane.pb")
    shutil.copy(_xplane(OTHER), hosts / "cpu-host-1.xplane.pb")
    return root, bad


@pytest.mark.parametrize("extra", [(), ("--jobs", "2")])
def test_a_pod_host_that_crashes_the_printer_is_named(tmp_path: Path, extra: tuple[str, ...]) -> None:
    root, bad = _pod(tmp_path)
    one_line_error(cli("stats", str(root), *extra, timeout=180), str(bad), "cpu-host-0", "--skip-bad-hosts")


def test_a_pod_host_that_crashes_the_printer_is_left_out_with_skip_bad_hosts(tmp_path: Path) -> None:
    root, bad = _pod(tmp_path)
    r = cli("stats", str(root), "--jobs", "2", "--skip-bad-hosts", "--format", "json", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["rows"] and any(str(bad) in w and "printer crashed" in w for w in doc["warnings"]), doc["warnings"]


def _mutants(count: int, seed: int) -> list[tuple[bytes, str, str]]:
    rng = random.Random(seed)
    protos = [p for run in (RUN, OTHER) for p in read_module_protos(_xplane(run))]
    out = []
    for k in range(count):
        p = rng.choice(protos)
        data, what = mutate(p.hlo_proto, rng)
        if rng.random() < 0.3:  # an opcode made another: what crashed XLA's printer before
            data = with_opcode(data, rng.choice((b"convert", b"fusion", b"broadcast", b"slice")),
                               rng.choice((b"recv", b"send", b"tuple", b"while", b"sort", b"gather"))) or data
            what += ", an opcode changed"
        out.append((data, f"{p.name}#{k}", what))
    return out


def test_fuzzed_real_modules_never_take_the_command_down(tmp_path: Path) -> None:
    """120 mutants of the sample captures' modules through the printer (each a text, an input error
    or a PrinterCrash), then, at least 3 and for 12 s at most, xplanes carrying them through stats and diagnose."""
    mutants = _mutants(120, seed=20261203)
    crashed: list[int] = []
    for k, (data, origin, what) in enumerate(mutants):
        try:
            out = print_modules([(data, origin, "vm", "fuzz.xplane.pb")])[0]
        except PrinterCrash:
            crashed.append(k)
            continue
        assert isinstance(out, (str, Exception)), (what, out)
    # Through the CLI: the crashing mutants first, then the rest, each in the sample capture.
    order = crashed + [k for k in range(len(mutants)) if k not in crashed]
    start, ran = time.monotonic(), 0
    for k in order:
        if ran >= 3 and time.monotonic() - start > 12:  # (at least 3 whatever the machine's load)
            break
        run = tmp_path / f"run{k}"
        shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("opstats.*"))
        _replace_module(_xplane(run), mutants[k][0])
        for command in ("stats", "diagnose"):
            r = cli(command, str(run), "--format", "json", timeout=120)
            assert r.returncode in (0, 2) and "Traceback" not in r.stderr, (mutants[k][2], r.returncode, r.stderr[-1500:])
        ran += 1
        shutil.rmtree(run)
    assert ran >= 3


def _replace_module(xplane: Path, hlo_proto: bytes) -> None:
    """The xplane with its jit_convert_element_type module's bytes replaced by ``hlo_proto``."""
    from hlo_doctor.trace import xplane_pb2 as xp

    space = xp.XSpace.FromString(xplane.read_bytes())
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for meta in plane.event_metadata.values():
            if plane.name == "/host:metadata" and meta.name.startswith("jit_convert_element_type"):
                for stat in meta.stats:
                    if names.get(stat.metadata_id) == "Hlo Proto":
                        stat.bytes_value = hlo_proto
    xplane.write_bytes(space.SerializeToString())
