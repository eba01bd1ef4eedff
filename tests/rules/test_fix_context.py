"""Fix texts that can be applied where they are shown: eager vs jitted, a framework's line vs one's
own, a staged NumPy input vs a returned input (hlo_doctor.hlo.origin), on real XLA:CPU programs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hlo_doctor.hlo import HloModule
from hlo_doctor.hlo.frames import set_extra_frameworks
from hlo_doctor.hlo.origin import eager_op, is_staging_copy, origin_of, program_framework
from hlo_doctor.lint import diagnose, load_context, load_rulebook

BOOK = load_rulebook()
ROOT = Path(__file__).resolve().parents[2]

LIBRARY = '''\
import jax.numpy as jnp


def round_trip(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)
'''

PROGRAM = '''\
import jax
import jax.numpy as jnp
import numpy as np
from mylib.ops import round_trip

host = np.ones((64, 64), np.float32)
staged = jnp.asarray(host)                                   # jit_stage: jax staging a NumPy array
copied = staged.copy()                                       # jit_copy
tokens = jnp.argmax(staged, -1)                              # jit__argmax: an eager jax helper


def sample(logits):
    return jnp.argmax(logits, -1), logits


def smooth(x):
    return round_trip(x)


jax.jit(sample)(staged)                                      # returns its input: donation applies
jax.jit(smooth)(staged)
'''


@pytest.fixture(autouse=True)
def _default_frameworks() -> Iterator[None]:
    set_extra_frameworks(())
    yield
    set_extra_frameworks(())


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Optimized HLO of the program above (its own process, --xla_dump_to)."""
    root = tmp_path_factory.mktemp("fixctx")
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "ops.py").write_text(LIBRARY)
    (root / "program.py").write_text(PROGRAM)
    out = root / "dump"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={out}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, str(root / "program.py")], check=True, env=env, cwd=root, timeout=180)
    return out


def _module(ctx_modules: tuple[HloModule, ...], name: str) -> HloModule:
    return next(m for m in ctx_modules if m.name == name)


def test_eager_and_staging_programs(dump: Path) -> None:
    mods = load_context(dump).modules
    assert eager_op(_module(mods, "jit_stage")) == "stage"
    assert eager_op(_module(mods, "jit_copy")) == "copy"
    assert eager_op(_module(mods, "jit__argmax")) == "_argmax"
    assert eager_op(_module(mods, "jit_sample")) == "" and eager_op(_module(mods, "jit_smooth")) == ""
    stage = _module(mods, "jit_stage")
    copy = next(i for i in stage.entry.instructions if i.opcode == "copy")
    assert is_staging_copy(stage, copy)
    sample = _module(mods, "jit_sample")
    returned = next(i for i in sample.entry.instructions if i.opcode == "copy")
    assert not is_staging_copy(sample, returned)
    assert program_framework(sample) == ""


def test_hd002_staged_numpy_input_gets_no_donation_advice(dump: Path) -> None:
    result = diagnose(load_context(dump), BOOK, select=["HD002"])
    by_module = {f.module: f for f in result.findings if f.code == "HD002"}
    staged = by_module["jit_stage"]
    assert "jax staging a NumPy (host) array" in staged.message
    assert "donate_argnums" not in staged.message and "device_put" in staged.message and not staged.fix
    assert "drop the copy" in by_module["jit_copy"].message
    # A jitted program of one's own that returns its input: return something else, or donate.
    assert "donate the argument (donate_argnums)" in by_module["jit_sample"].message
    assert by_module["jit_sample"].fix == "bf16-greedy-sampler"


def test_hd007_own_line_or_framework_line(dump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(dump.parent)
    own = [f for f in diagnose(load_context(dump), BOOK, select=["HD007"]).findings if f.module == "jit_smooth"]
    assert len(own) == 1
    assert own[0].message.endswith("drop both converts (at mylib/ops.py:5)")
    assert own[0].source.endswith("mylib/ops.py:5")
    assert [fr[2] for fr in own[0].stack[:2]] == ["round_trip", "smooth"]
    set_extra_frameworks(["mylib", "program"])
    fw = [f for f in diagnose(load_context(dump), BOOK, select=["HD007"]).findings if f.module == "jit_smooth"]
    assert "written inside mylib (" in fw[0].message
    assert "mylib/ops.py:5); no frame of code you edit" in fw[0].message
    assert "drop both converts" not in fw[0].message
    m = _module(load_context(dump).modules, "jit_smooth")
    convert = next(i for i in m.instructions() if i.opcode == "convert" and i.dtype == "bf16")
    origin = origin_of(m, convert)
    assert origin.framework == "mylib" and not origin.editable and program_framework(m) == "mylib"


def test_hd003_names_the_eager_call_first_traced() -> None:
    result = diagnose(load_context(ROOT / "sample_traces" / "engine_b64_original_a"), BOOK, select=["HD003"])
    (f,) = [f for f in result.findings if f.code == "HD003"]
    # The line that runs it each step (the Python tracer's frame), and where the cached program was
    # first traced (the warm-up's line in its HLO).
    assert "an eager astype called each step from _sample_from_logits (hlo_doctor/engine/runner.py:148; first " \
           "traced at hlo_doctor/engine/compilation_manager.py:103): move it inside the jitted consumer" in f.message
    assert f.fix == "bf16-greedy-sampler"


def test_messages_never_advise_donation_for_an_eager_copy_of_the_field_kind(tmp_path: Path) -> None:
    """A jax-internal copy of a NumPy input with a dtype (``jit_convert_element_type`` that only
    copies) gets the staging text, not "return a value it computes, or donate"."""
    program = textwrap.dedent("""
        import numpy as np, jax.numpy as jnp
        jnp.asarray(np.ones((64, 64), np.float32), dtype=jnp.bfloat16)
    """)
    out = tmp_path / "dump"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={out}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=120)
    (f,) = [f for f in diagnose(load_context(out), BOOK, select=["HD002"]).findings if f.code == "HD002"]
    assert f.module == "jit_convert_element_type" and "only copies" in f.message
    assert "donate_argnums" not in f.message and "convert it once, outside the step" in f.message and not f.fix
