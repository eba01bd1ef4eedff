"""The light commands start without the heavy libraries.

Each test runs commands in a fresh interpreter (``python -c``: import the click group, run the
commands one after another in that process) and reads ``sys.modules`` after each one. What each
command may import:

- ``--version``, ``--help``, every command's ``--help`` and shell completion: click and rich only
  (no numpy, pandas, protobuf, jax, jaxlib, scipy, libcst);
- ``rules``: no pandas, jax, jaxlib, scipy or libcst (the rule API's modules import the op-stats
  table's package inside the functions that build or read one);
- ``stats``, ``diagnose`` and ``gate`` on an ``.xplane.pb``: no jax, jaxlib, scipy or libcst. jaxlib
  prints the HLO modules stored in the xplane (XLA's own printer), in a process of its own
  (``hlo.printer``), and the memory view reads their fields from the protos; on an ``opstats.json``
  export with ``.hlo.txt`` modules no printer is started either. libcst comes
  in only when a finding's fix is computed; scipy only when the gate's Mann-Whitney test runs (enough
  steps on both sides).

Timings are not asserted here: ``benchmarks/bench_cold_start.py`` measures them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hlo_doctor.cli import doctor as doctor_cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
GPU = SAMPLES / "gpu_h200_seed_b512"  # a 108 KB XLA:GPU xplane
ENGINE_A = SAMPLES / "engine_b64_original_a"  # 1.9 MB XLA:CPU xplanes, 3 traced steps each
ENGINE_B = SAMPLES / "engine_b64_original_b"
SEED = SAMPLES / "seed_v5e_b512"  # opstats.json and .hlo.txt modules, no xplane

NATIVE = frozenset({"jax", "jaxlib", "scipy", "libcst"})
TABLE_LIBS = frozenset({"numpy", "pandas", "google", "pygments", "markdown_it", "ml_dtypes"})

# Run each command of argv[1] (a JSON list of [args, env]) in this one process; after each, write the
# top-level packages then loaded and the exit code to argv[2].
_SCRIPT = """
import json, os, sys
from hlo_doctor.cli import main
out = []
for args, env in json.loads(sys.argv[1]):
    os.environ.update(env)
    try:
        main.main(args=args, prog_name="hlo-doctor")
        code = 0
    except SystemExit as exc:
        code = exc.code
    for key in env:
        del os.environ[key]
    out.append({"args": args, "code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})})
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
"""


def _run(tmp_path: Path, *runs: list[str] | tuple[list[str], dict[str, str]]) -> list[dict[str, object]]:
    """Run the commands in one fresh interpreter (working folder: ``tmp_path``, no pyproject.toml)."""
    plan = [(r, {}) if isinstance(r, list) else r for r in runs]
    result = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("_HLO_DOCTOR")}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(plan), str(result)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    records: list[dict[str, object]] = json.loads(result.read_text())
    return records


def _loaded(record: dict[str, object], names: frozenset[str]) -> set[str]:
    modules = record["modules"]
    assert isinstance(modules, list)
    return names & set(modules)


def test_version_help_and_completion_load_click_and_rich_only(tmp_path: Path) -> None:
    from hlo_doctor.cli import main

    commands = sorted(main.load_all())
    completion = {"_HLO_DOCTOR_COMPLETE": "bash_complete", "COMP_WORDS": "hlo-doctor st", "COMP_CWORD": "1"}
    records = _run(tmp_path, ["--version"], ["--help"], *([name, "--help"] for name in commands),
                   (["--help"], {}), ([], completion))
    for record in records:
        assert record["code"] == 0, record["args"]
        heavy = _loaded(record, NATIVE | TABLE_LIBS)
        assert not heavy, f"hlo-doctor {' '.join(map(str, record['args']))} (or a command before it) imports {heavy}"


def test_the_group_help_lists_every_command_with_its_short_help() -> None:
    from click.testing import CliRunner

    from hlo_doctor.cli import main

    text = CliRunner().invoke(main, ["--help"], terminal_width=200).output
    for name, command in main.load_all().items():
        assert f"  {name}  " in text and command.get_short_help_str(150)[:40] in text, name


def test_rules_loads_no_native_library_nor_pandas(tmp_path: Path) -> None:
    records = _run(tmp_path, ["rules"], ["rules", "--format", "json"], ["rules", "explain", "HD002"],
                   ["rules", "explain", "HD015"], ["--help"])
    for record in records:
        assert record["code"] == 0, record["args"]
        assert not _loaded(record, NATIVE | {"pandas"}), record["args"]


def test_stats_diagnose_gate_on_an_xplane_never_import_jax(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    records = _run(tmp_path, ["stats", str(GPU), "--jobs", "1"],
                   # --source-root elsewhere: no finding's file is in that tree, no fix is computed (no libcst).
                   ["diagnose", str(GPU), "--jobs", "1", "--source-root", str(tmp_path)],
                   # 3 steps a side: fewer than the policy's min_samples, so no Mann-Whitney test (no scipy).
                   ["gate", str(ENGINE_A), str(ENGINE_B), "--jobs", "1"],
                   # The findings point at benchmarks/device/seed_sampler.py of this checkout: the
                   # eager-widening fix is checked against that code, and that needs libcst.
                   ["diagnose", str(GPU), "--jobs", "1", "--source-root", str(root)])
    for record in records:
        assert record["code"] in (0, 1), record["args"]
    for record in records[:3]:
        assert not _loaded(record, NATIVE - {"jaxlib"}), record["args"]
    # The xplane's HLO protos are printed by XLA in a process of its own (hlo.printer): the command's
    # process reads the capture without jaxlib.
    assert "jaxlib" not in records[0]["modules"]  # type: ignore[operator]
    assert _loaded(records[3], NATIVE) == {"libcst"}


def test_stats_and_gate_of_exports_import_no_native_library(tmp_path: Path) -> None:
    records = _run(tmp_path, ["stats", str(SEED / "opstats.json")],
                   ["diagnose", str(SEED), "--source-root", str(tmp_path)],
                   ["gate", str(ENGINE_A / "opstats.json"), str(ENGINE_B / "opstats.json")])
    for record in records:
        assert record["code"] in (0, 1), record["args"]
        assert not _loaded(record, NATIVE), record["args"]


def test_doctor_help_shows_the_verify_cores_defaults() -> None:
    from hlo_doctor.verify import DEFAULT_MAX_TOKENS, DEFAULT_ROUNDS, DEFAULT_TTFT_BOUND

    assert (doctor_cli.DEFAULT_ROUNDS, doctor_cli.DEFAULT_MAX_TOKENS, doctor_cli.DEFAULT_TTFT_BOUND) == (
        DEFAULT_ROUNDS, DEFAULT_MAX_TOKENS, DEFAULT_TTFT_BOUND)


def test_shell_completion_still_names_the_commands() -> None:
    env = dict(os.environ, _HLO_DOCTOR_COMPLETE="bash_complete", COMP_WORDS="hlo-doctor st", COMP_CWORD="1")
    done = subprocess.run([sys.executable, "-m", "hlo_doctor.cli"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["plain,stats"]


def test_the_commands_table_names_every_command_of_every_module() -> None:
    """``stats`` imports only its own module (cli.COMMAND_MODULES): the table must name each module's
    commands, or a command would be missing from the CLI."""
    import importlib

    from hlo_doctor.cli import COMMAND_MODULES

    package = Path(__file__).resolve().parents[2] / "hlo_doctor" / "cli"
    found: dict[str, str] = {}
    for path in sorted(package.glob("*.py")):
        if "\nCOMMANDS = " in path.read_text():
            module = importlib.import_module(f"hlo_doctor.cli.{path.stem}")
            found.update({command.name: path.stem for command in module.COMMANDS})
    assert found == COMMAND_MODULES


def test_stats_imports_no_other_command(tmp_path: Path) -> None:
    records = _run(tmp_path, ["stats", str(SEED / "opstats.json"), "--format", "json"])
    assert records[0]["code"] == 0
    modules = set(records[0]["modules"])  # type: ignore[call-overload]
    others = {"hlo_doctor.cli.apply_fix", "hlo_doctor.cli.verify", "hlo_doctor.cli.diagnose", "hlo_doctor.cli.mcp",
              "hlo_doctor.cli.doctor", "hlo_doctor.cli.gate"}
    assert not modules & others, modules & others


def test_an_unknown_command_is_said_with_the_closest_one() -> None:
    import click
    from click.testing import CliRunner

    from hlo_doctor.cli import main

    result = CliRunner().invoke(main, ["stat", "x.xplane.pb"])
    assert result.exit_code == 2 and "No such command 'stat'" in result.output
    if hasattr(click.exceptions, "NoSuchCommand"):  # (click 8.4 names the closest commands)
        assert "Did you mean 'stats'?" in result.output
