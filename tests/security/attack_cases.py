"""More cases of the attack set (helpers, not tests): native code, counts and sizes, an address-space limit.

- a real module that crashes XLA's printer (``convert`` made ``recv``), alone and as one host of a pod
  read with ``--jobs 2 --skip-bad-hosts``;
- a million empty lines on a device plane of a real xplane; a 100 MB name in HLO text;
- ``profile -o out.json`` under ``RLIMIT_AS`` 4 GiB (the chart engine would abort the process).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from attack_set import OTHER, REPO, RUN, Case, Outcome, _exit
from proto_fuzz import crashing_xplane

SEED_HLO = REPO / "sample_traces" / "seed_v5e_b512" / "jit_sample(23).hlo.txt"
Built = tuple[list[str], Callable[[Outcome, Path], None]]


def _xplane(run: Path) -> Path:
    return next(run.glob("plugins/profile/*/*.xplane.pb"))


def _printer_crash(f: Path) -> Built:
    run = f / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("opstats.*"))
    crashing_xplane(_xplane(RUN), _xplane(run))
    return ["stats", str(run)], _exit(2, "printer crashed", "host vm")


def _printer_crash_pod(f: Path) -> Built:
    hosts = f / "pod" / "plugins" / "profile" / "2026_01_01_00_00_00"
    hosts.mkdir(parents=True)
    crashing_xplane(_xplane(RUN), hosts / "cpu-host-0.xplane.pb")
    shutil.copy(_xplane(OTHER), hosts / "cpu-host-1.xplane.pb")

    def check(o: Outcome, _folder: Path) -> None:
        assert o.rc == 0, o.stderr[-800:]
        assert any("cpu-host-0" in w and "printer crashed" in w for w in json.loads(o.stdout)["warnings"])
    return ["stats", str(f / "pod"), "--jobs", "2", "--skip-bad-hosts", "--format", "json"], check


def _million_lines(f: Path) -> Built:
    from hlo_doctor.trace import xplane_pb2 as xp

    space = xp.XSpace.FromString(_xplane(RUN).read_bytes())
    plane = space.planes.add(id=999, name="/device:TPU:0")
    for i in range(1_000_000):
        plane.lines.add(id=i)
    out = f / "logs" / "plugins" / "profile" / "r" / "vm.xplane.pb"
    out.parent.mkdir(parents=True)
    out.write_bytes(space.SerializeToString())
    return ["stats", str(f / "logs"), "--format", "json"], _exit(2, "lines")


def _huge_hlo_name(f: Path) -> Built:
    meta = 'metadata={op_name="' + "A" * 100_000_000 + '" source_file="/s.py" source_line=3}'
    hlo = f / "big.hlo.txt"
    hlo.write_text(SEED_HLO.read_text().replace("copy(%Arg_1.2)", "copy(%Arg_1.2), " + meta))
    return ["diagnose", str(hlo)], _exit(2, "MiB")


TARGET = "import jax.numpy as jnp\n\ndef step():\n    return (jnp.ones((64, 64)) @ jnp.ones((64, 64))).sum()\n"


def _profile_limited(f: Path) -> Built:
    (f / "t.py").write_text(TARGET)

    def check(o: Outcome, folder: Path) -> None:
        assert o.rc == 0, o.stderr[-800:]
        assert json.loads((folder / "out.json").read_text())["rows"]
    return ["profile", "t.py:step", "--out", "run", "-o", "out.json", "--format", "json", "--steps", "2"], check


MORE_CASES: tuple[Case, ...] = (
    Case("native", "module crashing XLA's printer", _printer_crash, 120),
    Case("native", "same, pod host, --jobs 2 --skip-bad-hosts", _printer_crash_pod, 120),
    Case("readers", "1M empty lines on a device plane", _million_lines, 150),
    Case("readers", "100 MB name in HLO text", _huge_hlo_name, 40),
    Case("limits", "profile -o out.json under RLIMIT_AS 4 GiB", _profile_limited, 180, address_space=4 << 30),
)
"""The cases this module adds to :data:`attack_set.CASES`."""
