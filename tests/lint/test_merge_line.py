"""One rule, one source line, one program: one finding.

A sum of squares over every parameter leaf written on one line (as MaxText's ``max_utils`` writes its
norm) reduces each bf16 leaf in f32, narrows the sum to bf16 and widens it back: HD007 flags each
leaf's round trip, and a person edits one line. The program is lowered by jax on CPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from hlo_doctor.hlo import parse_modules
from hlo_doctor.lint import Context, load_rulebook, run_rule
from hlo_doctor.lint.runner import diagnose

PROGRAM = '''
import jax.numpy as jnp


def norm(leaves):
    return sum(jnp.sum(jnp.square(x)).astype(jnp.float32) for x in leaves)
'''


def _lowered(tmp_path: Path) -> str:
    path = tmp_path / "norms.py"
    path.write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("norms_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    leaves = [jnp.ones((64, 64), jnp.bfloat16) for _ in range(4)]
    return str(jax.jit(module.norm).lower(leaves).as_text(dialect="hlo", debug_info=True))


def test_one_rule_on_one_line_of_one_program_is_one_finding(tmp_path: Path) -> None:
    modules = parse_modules(_lowered(tmp_path), origin="norms.hlo")
    ctx = Context(modules=tuple(modules), origin="norms.hlo", kind="hlo")
    hd007 = next(r for r in load_rulebook().select(("HD007",), ()))
    separate = list(run_rule(hd007, ctx))
    assert len(separate) == 4 and len({f.source for f in separate}) == 1, [f.source for f in separate]
    merged = [f for f in diagnose(ctx, load_rulebook()).findings if f.code == "HD007"]
    assert len(merged) == 1
    extra = dict(merged[0].extra)
    assert extra["same_line_ops"] == 4
    assert set(extra["ops"]) == {f.op for f in separate}
    assert merged[0].source.endswith("norms.py:6")
    assert "4 ops of this program from one line" in merged[0].message
    sys.modules.pop("norms_under_test", None)
