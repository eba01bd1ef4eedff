"""Whole stacks from HLO metadata, the frameworks, and the line a person edits.

Real JAX on CPU: a "library" package calls jnp ops and a "user" file calls the library; the stack
the parser reads from the optimized HLO must equal what jax's own lowering says (the MLIR debug
locations of ``lower(...).as_text(debug_info=True)``), innermost frame first.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.cli.config import default_map
from hlo_doctor.core.errors import InputError
from hlo_doctor.core.format import fmt_path, fmt_source
from hlo_doctor.hlo import module_text_from_proto, parse_module
from hlo_doctor.hlo.frames import (
    Frame,
    editable_frame,
    extra_frameworks,
    framework_of,
    module_of,
    set_extra_frameworks,
    source_frame,
)
from hlo_doctor.hlo.navigation import key_instruction
from hlo_doctor.opstats import load_opstats

LIBRARY = '''\
import jax
import jax.numpy as jnp


def dense(x, w):
    y = jnp.dot(x, w)
    return jax.nn.softmax(y, axis=-1)


def head(x, w):
    return dense(x, w)
'''

USER = '''\
import jax
import jax.numpy as jnp
from mylib.layers import head

X = jnp.ones((16, 64), jnp.float32)
W = jnp.ones((64, 512), jnp.float32)


def step_fn(x, w):
    logits = head(x, w)
    return jnp.argmax(logits, -1)


def step():
    return jax.jit(step_fn)(X, W)
'''


@pytest.fixture(autouse=True)
def _default_frameworks() -> Iterator[None]:
    set_extra_frameworks(())
    yield
    set_extra_frameworks(())


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """The user module (imported from a temporary project holding ``mylib``)."""
    root = tmp_path_factory.mktemp("project")
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "layers.py").write_text(LIBRARY)
    (root / "user_step.py").write_text(USER)
    sys.path.insert(0, str(root))
    try:
        yield root, importlib.import_module("user_step")
    finally:
        sys.path.remove(str(root))
        for name in ("user_step", "mylib", "mylib.layers"):
            sys.modules.pop(name, None)


def _line(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


_LOC = re.compile(r"^#(\w+) = loc\((.*)\)$")


def _mlir_stacks(text: str) -> dict[str, list[tuple[str, int]]]:
    """op name -> its stack (file, line), innermost first, from MLIR debug locations: jax's own."""
    defs = {m.group(1): m.group(2) for ln in text.splitlines() if (m := _LOC.match(ln))}

    def frames(body: str) -> list[tuple[str, int]]:
        body = body.strip()
        if body.startswith("#"):
            return frames(defs[body[1:]])
        if m := re.fullmatch(r'"([^"]*)":(\d+):\d+.*', body):
            return [(m.group(1), int(m.group(2)))]
        if m := re.fullmatch(r"callsite\((#\w+) at (#\w+)\)", body):
            return frames(m.group(1)) + frames(m.group(2))
        if m := re.fullmatch(r'"[^"]*"\((#\w+)\)', body):
            return frames(m.group(1))
        return []

    out = {}
    for body in defs.values():
        if m := re.fullmatch(r'"(jit\(step_fn\)/[^"]+)"\((#\w+)\)', body):
            out.setdefault(m.group(1), frames(m.group(2)))
    return out


def test_stack_equals_jax_lowering_locations(program: tuple[Path, Any]) -> None:
    root, user = program
    lowered = jax.jit(user.step_fn).lower(user.X, user.W)
    m = parse_module(lowered.compile().as_text())
    want = _mlir_stacks(lowered.as_text(debug_info=True))
    dot = next(i for i in m.instructions() if i.opcode == "dot")
    got = [(f.file, f.line) for f in dot.stack]
    assert got == want["jit(step_fn)/dot_general"]
    library = str(root / "mylib" / "layers.py")
    # Innermost first: the dot's line, its caller in the library, then the user's call.
    assert got[:3] == [(library, _line(root / "mylib" / "layers.py", "jnp.dot")),
                       (library, _line(root / "mylib" / "layers.py", "return dense")),
                       (str(root / "user_step.py"), _line(root / "user_step.py", "logits = head"))]
    assert [f.function for f in dot.stack[:3]] == ["dense", "head", "step_fn"]
    exp = next(i for i in m.instructions() if i.opcode == "exponential")
    assert [(f.file, f.line) for f in exp.stack] == want["jit(step_fn)/exp"]


def test_serialized_proto_keeps_the_stack(program: tuple[Path, Any]) -> None:
    """A trace stores HloModuleProto bytes (``stack_frame_index``, field 17): the text made from them
    holds the same stacks as the compiled module's own text."""
    _, user = program
    compiled = jax.jit(user.step_fn).lower(user.X, user.W).compile()
    proto = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    from_proto = parse_module(module_text_from_proto(proto))
    from_text = parse_module(compiled.as_text())
    stacks = {i.name: i.stack for i in from_text.instructions() if i.stack}
    assert stacks and {i.name: i.stack for i in from_proto.instructions() if i.stack} == stacks


def test_fusion_line_is_its_matmul_not_its_root(program: tuple[Path, Any]) -> None:
    root, user = program
    m = parse_module(jax.jit(user.step_fn).lower(user.X, user.W).compile().as_text())
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion"
                  and any(b.opcode == "dot" for b in m.fusion_body(i).instructions))  # type: ignore[union-attr]
    layers = root / "mylib" / "layers.py"
    softmax = _line(layers, "softmax")
    assert fusion.source == f"{layers}:{softmax}"  # the fusion's own metadata: its root, the softmax
    key = key_instruction(m, fusion)
    assert key.opcode == "dot" and key.source == f"{layers}:{_line(layers, 'jnp.dot')}"


def test_configured_framework_moves_the_line_to_the_caller(program: tuple[Path, Any]) -> None:
    root, user = program
    m = parse_module(jax.jit(user.step_fn).lower(user.X, user.W).compile().as_text())
    dot = next(i for i in m.instructions() if i.opcode == "dot")
    assert not dot.in_framework
    set_extra_frameworks(["mylib"])
    assert dot.source == f"{root / 'user_step.py'}:{_line(root / 'user_step.py', 'logits = head')}"
    assert framework_of(dot.stack[0].file) == "mylib" and not dot.in_framework
    set_extra_frameworks(["mylib", "user_step", Path(__file__).stem, "tests"])
    # Nothing of anyone's left (this test's own frames count as a framework too): the innermost
    # (framework) line, and the op says so.
    assert dot.in_framework and dot.source == f"{dot.stack[0].file}:{dot.stack[0].line}"


def test_stats_source_column_is_the_matmul_line_relative_to_the_package(
        program: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = program
    monkeypatch.chdir(tmp_path)  # outside the project: paths relative to the package root
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["profile", f"{root / 'user_step.py'}:step", "--steps", "2", "--warmup", "1",
                                  "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    stats = load_opstats(out)
    layers = root / "mylib" / "layers.py"
    matmul = stats.table[(stats.table["module"] == "jit_step_fn") & (stats.table["category"] == "matmul")]
    assert list(matmul["source"]) == [f"{layers}:{_line(layers, 'jnp.dot')}"]
    table = CliRunner().invoke(main, ["stats", str(out), "--top", "50"], catch_exceptions=False).stderr
    assert f"mylib/layers.py:{_line(layers, 'jnp.dot')}" in table
    # An op with no line of its own (XLA's copy) stays empty; no row borrows another op's line.
    rows = json.loads(CliRunner().invoke(main, ["stats", str(out), "--format", "json"]).stdout)["rows"]
    for row in rows:
        if row["module"] == "jit_step_fn" and row["opcode"] == "copy":
            assert row["source"] == ""


SITE = "/opt/venv/lib/python3.11/site-packages"


def test_frameworks_and_the_line_a_person_edits() -> None:
    keras_stack = (
        Frame(f"{SITE}/keras/src/backend/jax/nn.py", 120, "softmax"),
        Frame(f"{SITE}/keras/src/ops/nn.py", 980, "softmax"),
        Frame(f"{SITE}/keras_hub/src/samplers/sampler.py", 180, "compute_probabilities"),
        Frame(f"{SITE}/keras_hub/src/models/causal_lm.py", 300, "generate"),
        Frame("/usr/lib/python3.11/contextlib.py", 81, "inner"),
    )
    assert [framework_of(f.file) for f in keras_stack] == ["keras", "keras", "", "", "python"]
    assert editable_frame(keras_stack) == keras_stack[2]
    assert fmt_path(keras_stack[2].file) == "keras_hub/src/samplers/sampler.py"
    assert fmt_source(f"{keras_stack[0].file}:120") == "keras/src/backend/jax/nn.py:120"  # never bare nn.py
    # A model library is what a person edits; jax inside another package's name is not jax.
    assert framework_of(f"{SITE}/transformers/models/gpt2/modeling_flax_gpt2.py") == ""
    assert framework_of(f"{SITE}/recurrentgemma/jax/layers.py") == ""
    assert framework_of(f"{SITE}/flax/linen/linear.py") == "flax"
    assert module_of(f"{SITE}/keras/src/ops/__init__.py") == "keras.src.ops"
    # Only frameworks: the innermost frame is shown (and nothing pretends to be the user's).
    only = keras_stack[:2]
    assert editable_frame(only) is None and source_frame(only) == only[0]
    assert source_frame(()) is None
    # Configured prefixes: by module path, and by folder names for a path of another machine.
    set_extra_frameworks(["keras_hub.src.samplers", "mylib/internal"])
    assert editable_frame(keras_stack) == keras_stack[3]
    assert framework_of("/elsewhere/proj/mylib/internal/ops.py") == "mylib.internal"
    assert extra_frameworks() == ("keras_hub.src.samplers", "mylib.internal")


STACK_TABLES = """\
HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

FileNames
1 "/p/user.py"
2 "/p/lib.py"

FunctionNames
1 "<module>"
2 "f"
3 "g"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}
2 {file_name_id=1 function_name_id=2 line=5 end_line=5 column=1 end_column=2}
3 {file_name_id=2 function_name_id=3 line=3 end_line=3 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=PARENT1}
2 {file_location_id=2 parent_frame_id=PARENT2}
3 {file_location_id=3 parent_frame_id=PARENT3}

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%x), metadata={op_name="jit(f)/neg" stack_frame_id=3}
}
"""


@pytest.mark.parametrize("parents", [("1", "2", "3"), ("0", "1", "2")], ids=["xla-prints-parent+1", "raw-ids"])
def test_stack_tables_either_parent_convention(parents: tuple[str, str, str]) -> None:
    """XLA prints ``parent_frame_id + 1`` (1: no parent); a table printed with raw ids (0: none)
    names the same stack."""
    text = STACK_TABLES
    for i, p in enumerate(parents, 1):
        text = text.replace(f"PARENT{i}", p)
    neg = parse_module(text).instruction("n")
    assert neg is not None
    assert neg.stack == (Frame("/p/lib.py", 3, "g"), Frame("/p/user.py", 5, "f"), Frame("/p/user.py", 10, "<module>"))


def test_a_looping_stack_table_ends() -> None:
    text = STACK_TABLES.replace("PARENT1", "4").replace("PARENT2", "2").replace("PARENT3", "3")
    neg = parse_module(text).instruction("n")
    assert neg is not None and 1 <= len(neg.stack) <= 3


def test_pyproject_frameworks(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.hlo-doctor]\nframeworks = ["mylib.internal"]\n')
    assert default_map(tmp_path) == {}
    assert extra_frameworks() == ("mylib.internal",)
    (tmp_path / "pyproject.toml").write_text('[tool.hlo-doctor]\nframeworks = ["my lib"]\n')
    with pytest.raises(InputError, match="not a module path"):
        default_map(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.hlo-doctor]\nframework = ["x"]\n')
    with pytest.raises(InputError) as typo:
        default_map(tmp_path)
    assert "did you mean 'frameworks'" in typo.value.one_line()
    (tmp_path / "pyproject.toml").write_text("[tool.hlo-doctor]\n")
    default_map(tmp_path)
    assert extra_frameworks() == ()


def test_source_file_metadata_is_a_one_frame_stack() -> None:
    text = textwrap.dedent("""\
        HloModule m, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

        ENTRY %main (x: f32[8]) -> f32[8] {
          %x = f32[8]{0} parameter(0)
          ROOT %n = f32[8]{0} negate(%x), metadata={op_name="jit(f)/neg" source_file="/p/user.py" source_line=7}
        }
        """)
    neg = parse_module(text).instruction("n")
    assert neg is not None and neg.stack == (Frame("/p/user.py", 7),) and neg.source == "/p/user.py:7"
    x = parse_module(text).instruction("x")
    assert x is not None and x.stack == () and x.source == "" and not x.in_framework
