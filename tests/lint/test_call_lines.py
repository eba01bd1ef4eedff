"""Eager-program findings point at the call that creates the program, not its function's first line.

The Python tracer names a frame by the line its function starts at (a decorator's, when it has one);
the HLO of a cached eager program names the call that traced it first (a warm-up). A real capture of
a program written here (real JAX on XLA:CPU, the Python tracer on) whose warm-up traces the eager
``astype`` first, then runs it each step from a decorated function that widens twice: HD003 and HD001
must point at the step's first ``astype``, read back from the program's own text. The bundled
engine's capture likewise: HD003 and its GitHub annotation land on the runner's ``astype`` line.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.format import split_source
from hlo_doctor.hlo.call_sites import call_line

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "sample_traces" / "engine_b64_original_a"

_PROGRAM = '''\
import functools

import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (16, 32768), jnp.bfloat16)


@jax.jit
def pick(logits):
    return jnp.argmax(logits, axis=-1)


def warm_up():
    return pick(_LOGITS.astype(jnp.float32))  # WARM-UP


warm_up()


def _traced(f):
    @functools.wraps(f)
    def inner(*args):
        return f(*args)
    return inner


@_traced
def step():
    """One step: widen the logits eagerly, then pick."""
    logits = _LOGITS
    wide = logits.astype(jnp.float32)  # THE CALL
    tokens = pick(wide)
    wide = wide.astype(jnp.float32)  # A REPEAT
    return tokens, wide
'''


def _line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("call_lines")
    source = folder / "sampler.py"
    source.write_text(textwrap.dedent(_PROGRAM))
    out = folder / "run"
    result = CliRunner().invoke(main, ["profile", f"{source}:step", "--steps", "3", "--warmup", "1",
                                       "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return source, out


def _findings(run: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["diagnose", str(run), "--no-what-if", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_programs_eager_findings_point_at_the_steps_astype(program: tuple[Path, Path]) -> None:
    source, run = program
    text = source.read_text()
    want = _line_of(text, "# THE CALL")
    doc = json.loads(_findings(run, "--format", "json"))
    by_code = {f["code"]: f for f in doc["findings"]}
    for code in ("HD003", "HD001"):
        path, line = split_source(by_code[code]["source"])
        assert Path(path).name == "sampler.py" and line == want, (code, by_code[code]["source"])
        assert by_code[code]["stack"][0]["line"] == want
    # The HLO's own line (the warm-up that traced it first) is still named, as such.
    assert f"first traced at {source}:{_line_of(text, '# WARM-UP')}" in by_code["HD003"]["message"]


def test_the_engines_hd003_and_its_annotation_land_on_the_astype() -> None:
    doc = json.loads(_findings(ENGINE, "--format", "json"))
    (hd003,) = [f for f in doc["findings"] if f["code"] == "HD003"]
    path, line = split_source(hd003["source"])
    runner = REPO / "hlo_doctor" / "engine" / "runner.py"
    assert path.endswith("hlo_doctor/engine/runner.py") and line is not None
    code = runner.read_text().splitlines()[line - 1]
    assert ".astype(jnp.float32)" in code and "def " not in code
    github = _findings(ENGINE, "--format", "github", "--source-root", str(REPO))
    (annotation,) = [a for a in github.splitlines() if "HD003" in a]
    assert re.search(rf"file=hlo_doctor/engine/runner.py,line={line},", annotation)


def test_call_line_reads_the_callers_source(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(textwrap.dedent('''\
        import jax.numpy as jnp


        @staticmethod
        def f(x):
            def g(y):
                return y.astype(jnp.float32)
            a = x.astype(jnp.float32)
            b = (x
                 .astype(jnp.int32))
            return jnp.asarray(a), b, g
        '''))
    # The tracer's line of a decorated function is its decorator's; the def's works too.
    assert call_line(str(src), 4, "f", "_astype", 0) == 8
    assert call_line(str(src), 5, "f", "_astype", 1) == 10  # the line that names .astype
    assert call_line(str(src), 4, "f", "asarray") == 11
    assert call_line(str(src), 4, "f", "_astype", 2) is None  # more calls than sites: cannot tell
    # A file that no longer matches the capture (no function of that name starts there): no guess.
    assert call_line(str(src), 7, "f", "_astype") is None
    assert call_line(str(tmp_path / "gone.py"), 4, "f", "_astype") is None


def test_call_line_reads_a_file_again_once_it_changed(tmp_path: Path) -> None:
    """One process (the MCP server, diagnose run twice in a session) asks again after the file
    changed: the answer is the file's as it is now, not the earlier one kept."""
    src = tmp_path / "m.py"
    src.write_text("def f(x):\n    return x.astype('float32')\n")
    assert call_line(str(src), 1, "f", "_astype") == 2
    src.write_text("# a line added above\ndef f(x):\n    y = x\n    return y.astype('float32')\n")
    assert call_line(str(src), 1, "f", "_astype") is None  # f no longer starts at line 1
    assert call_line(str(src), 2, "f", "_astype") == 4


_TWIN = '''\
import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (16, 12288), jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    logits = _LOGITS.astype(jnp.float32)  # THE CALL
    return sample(logits)
'''


def test_a_twin_file_in_another_folder_that_traced_first_is_not_the_steps_line(tmp_path: Path) -> None:
    """Two programs alike, the same file name and function in two folders, profiled in one process:
    the eager astype's HLO names the first folder's file (jax caches the program), and the second
    capture's findings must still point at the second folder's file, where its steps call it."""
    runs = []
    for name in ("first", "second"):
        source = tmp_path / name / "sampler.py"
        source.parent.mkdir()
        source.write_text(_TWIN)
        out = tmp_path / name / "run"
        result = CliRunner().invoke(main, ["profile", f"{source}:step", "--steps", "3", "--warmup", "1",
                                           "--out", str(out), "--format", "json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        runs.append((source, out))
    (first, _), (second, run) = runs
    want = _line_of(_TWIN, "# THE CALL")
    by_code = {f["code"]: f for f in json.loads(_findings(run, "--format", "json"))["findings"]}
    for code in ("HD003", "HD001"):
        assert by_code[code]["source"] == f"{second}:{want}", (code, by_code[code]["source"])
    assert f"first traced at {first}:{want}" in by_code["HD003"]["message"]
