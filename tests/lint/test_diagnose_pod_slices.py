"""``diagnose`` of a pod with the bundled rules keeps the step breakdown's sums and each host's steps
(``SliceSums``), not a slice per device and step of every host; the findings are those the kept slices
give, byte for byte, and a rule of one's own (``--rules``) is still given every slice.

Judged on a real capture (the H200 sample, whose host-bound steps HD015 reports from the breakdown,
and whose HD003 prices its host time within the steps of each host) as a pod of three hosts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.hosts import CaptureReader, PodOptions
from hlo_doctor.lint import load_context

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpu_h200_original"

SLICE_RULE = '''
from hlo_doctor.core.model import Severity
from hlo_doctor.lint import Rule


class Slices(Rule):
    """Counts the step breakdown's slices.

    What it flags:
        Nothing to fix: the number of slices a rule is given.
    Why it costs:
        Nothing.
    Example:
        None.
    Fix:
        None.
    """
    code = "XX900"
    name = "test.slices"
    severity = Severity.INFO
    requires = ("hlo",)
    VALID = ()
    INVALID = ()

    def check(self, ctx):
        b = ctx.breakdown
        m = ctx.modules[0]
        yield ctx.finding(self, m, m.entry.instructions[0], f"{len(b.steps)} slices of {b.slice_count}",
                          recoverable_fraction=0.0)
'''


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (xplane,) = SAMPLE.glob("plugins/profile/*/*.xplane.pb")
    run = tmp_path_factory.mktemp("pod") / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    for i in range(3):
        (run / f"gpu-host-{i}.xplane.pb").write_bytes(xplane.read_bytes())
    return run.parents[2]


def _diagnose(path: Path, *extra: str) -> dict:
    r = CliRunner().invoke(main, ["diagnose", str(path), "--format", "json", "--no-what-if", "--jobs", "2", *extra],
                           env={"GITHUB_ACTIONS": ""}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def test_a_pods_findings_from_the_sums_are_the_slices_findings(pod: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "xx900_slices.py").write_text(SLICE_RULE)
    summed = _diagnose(pod)
    kept = _diagnose(pod, "--rules", str(rules))
    (mine,) = [f for f in kept["findings"] if f["code"] == "XX900"]
    count = int(mine["message"].split()[0])
    assert count > 0 and mine["message"].startswith(f"{count} slices of {count}")  # every slice, kept
    assert {f["code"] for f in summed["findings"]} >= {"HD003", "HD015"}
    assert summed["findings"] == [f for f in kept["findings"] if f["code"] != "XX900"]


def test_each_hosts_steps_are_those_of_its_first_device_kept_or_summed(pod: Path) -> None:
    kept = load_context(pod, reader=CaptureReader(PodOptions(jobs=2))).breakdown
    summed = load_context(pod, reader=CaptureReader(PodOptions(jobs=2, breakdown_steps=False))).breakdown
    assert kept is not None and summed is not None
    assert kept.sums is None and summed.sums is not None and len(summed.steps) == 0
    hosts = sorted({s.host for s in kept.steps})
    assert len(hosts) == 3
    for host in hosts:
        first = min(s.device for s in kept.steps if s.host == host)
        slices = [s for s in kept.steps if s.host == host and s.device == first]
        for spans in (kept.host_step_spans_us(host), summed.host_step_spans_us(host)):
            assert np.array_equal(spans[0], [s.start_us for s in slices])
            assert np.array_equal(spans[1], [s.wall_us for s in slices])
    assert [len(a) for a in summed.host_step_spans_us("no such host")] == [0, 0]
