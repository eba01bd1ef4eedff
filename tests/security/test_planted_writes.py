"""Threat: an output goes where a planted link or an artifact from elsewhere says.

``report --format md`` writes its chart images beside the Markdown: a symbolic link planted at the
images' folder or at one image's name must not send a byte outside (judged with ``os.lstat`` and the
bytes of the file the link aimed at). ``apply-fix --from DIAGNOSIS.json`` reads each finding's fix
site from the artifact: a diagnosis that names a file outside ``--source-root`` must leave it alone.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from threats import REPO, picture

from hlo_doctor.cli import main

RUN = REPO / "sample_traces" / "engine_b64_original_a"
PROGRAM = REPO / "tests" / "fixes" / "programs" / "decode_step.py"


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args), env={"GITHUB_ACTIONS": ""})
    return r.exit_code, r.stderr


@pytest.fixture()
def planted(tmp_path: Path) -> tuple[Path, Path]:
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "victim.svg").write_text("keep")
    return out, outside


def test_a_link_at_the_charts_folder_is_refused(planted: tuple[Path, Path]) -> None:
    out, outside = planted
    (out / "rep-charts").symlink_to(outside, target_is_directory=True)
    before = picture(outside)
    code, err = run("report", str(RUN), "--format", "md", "-o", str(out / "rep.md"))
    assert code == 2 and "rep-charts: a symbolic link" in err, err
    assert picture(outside) == before and not (out / "rep.md").exists()


def test_a_link_at_a_charts_name_is_replaced_not_followed(planted: tuple[Path, Path]) -> None:
    out, outside = planted
    code, _ = run("report", str(RUN), "--format", "md", "-o", str(out / "rep.md"))
    assert code == 0
    names = sorted(p.name for p in (out / "rep-charts").iterdir())
    assert names
    for name in names:
        (out / "rep-charts" / name).unlink()
        (out / "rep-charts" / name).symlink_to(outside / "victim.svg")
    code, _ = run("report", str(RUN), "--format", "md", "-o", str(out / "rep.md"))
    assert code == 0
    assert (outside / "victim.svg").read_text() == "keep"
    for name in names:
        assert stat.S_ISREG(os.lstat(out / "rep-charts" / name).st_mode)
    assert not [p for p in (out / "rep-charts").iterdir() if p.name.startswith(".")]  # no temporary left


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as its own process in ``cwd`` (the profiled module stays out of this one)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{cwd}", "JAX_PLATFORMS": "cpu", "GITHUB_ACTIONS": ""}
    return subprocess.run([sys.executable, "-c", "import sys; from hlo_doctor.cli import main; main()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_apply_fix_from_writes_only_under_the_source_root(tmp_path: Path) -> None:
    """A real diagnosis of a real run whose fix sites were rewritten to name a copy of the file outside
    the project: with --unsafe --write, the outside copy stays byte for byte, each finding refused."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    shutil.copy2(PROGRAM, project / "decode_step.py")
    shutil.copy2(PROGRAM, outside / "decode_step.py")
    (project / ".git").mkdir()
    r = _cli(project, "profile", "decode_step.py:step", "--steps", "2", "--warmup", "1", "--out", "run")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(_cli(project, "diagnose", "run", "--format", "json", "--no-what-if").stdout)
    moved = 0
    for f in doc["findings"]:
        extra = f.get("extra") or {}
        site = extra.get("fix_site")
        if isinstance(site, str) and f.get("fix"):
            extra["fix_site"] = f"{outside / 'decode_step.py'}:{site.rsplit(':', 1)[1]}"
            moved += 1
        if isinstance(f.get("source"), str):
            f["source"] = f["source"].replace(str(project), str(outside))
    assert moved, "the diagnosis names no fix site"
    diagnosis = tmp_path / "diagnosis.json"
    diagnosis.write_text(json.dumps(doc))
    before = (outside / "decode_step.py").read_bytes()
    r = _cli(project, "apply-fix", "--from", str(diagnosis), "--unsafe", "--write", "--source-root", str(project),
             "--format", "json")
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (outside / "decode_step.py").read_bytes() == before
    assert not (outside / ".hlo-doctor").exists()
    if r.returncode == 0:
        statuses = [f["status"] for f in json.loads(r.stdout)["findings"] if f.get("fix")]
        assert statuses and "applied" not in statuses, statuses


@pytest.mark.parametrize(("command", "link"), [
    (["doctor"], "report.md"),
    (["verify", "--fix", "bf16-greedy-sampler"], "treatment-bf16-greedy-sampler-full"),
])
def test_a_reused_out_folder_with_a_planted_link_is_refused_before_any_work(
        tmp_path: Path, command: list[str], link: str) -> None:
    """A folder the command wrote before (its marker), with a link planted since (dangling, or at a
    treatment folder): exit 2 naming the link, nothing written anywhere."""
    from hlo_doctor.core.outdir import MARKER

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / MARKER).write_text(json.dumps({"written_by": "hlo-doctor", "command": command[0]}) + "\n")
    (out / link).symlink_to(outside / "target")  # dangling: where a later write would land
    before, before_outside = picture(out), picture(outside)
    code, err = run(*command, "--out", str(out))
    assert code == 2 and "symbolic link" in err and link in err, err
    assert picture(out) == before and picture(outside) == before_outside
