"""The fixes of HD007, HD013 and HD014 on real programs: the rule fires on the compiled (or profiled)
program, ``diagnose`` offers the fix at the finding's line, the fix removes the finding, and the
outputs stay the same bit for bit over several inputs (``fix_programs``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from click.testing import CliRunner
from fix_programs import BOOK, bits, count_findings, fixed_pair, line_of, load_module, same_outputs
from fix_programs import forget_modules as forget_modules  # autouse: imported copies dropped after each test

from hlo_doctor.cli import main
from hlo_doctor.fixes.source.applicable import with_applicable_fixes
from hlo_doctor.fixes.source.base import Hint
from hlo_doctor.lint import diagnose, load_context


def _findings(tmp_path: Path, name: str, lowered: Any, root: Path) -> dict[str, list[str]]:
    """Per rule, the fixes ``diagnose`` offers for the compiled program's findings ("" where none)."""
    path = tmp_path / f"{name}.hlo.txt"
    path.write_text(lowered.compile().as_text())
    found: dict[str, list[str]] = {}
    for f in with_applicable_fixes(diagnose(load_context(path), BOOK).findings, root):
        found.setdefault(f.code, []).append(f.fix)
    return found


def test_update_in_place_on_a_layer_cache(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "layer_cache.py", "update-in-place",
                                       [("jnp.concatenate([cache[:i]", Hint())])
    assert result.variant == "safe" and "dynamic_update_slice(cache, row[None], (i, 0, t, 0))" in result.diff
    same_outputs(before, after)
    args = (jnp.zeros((4, 2, 256, 32)), jnp.zeros((2, 32)))
    assert _findings(tmp_path, "before", before.generate.lower(*args), tmp_path / "before")["HD013"] == \
        ["update-in-place"]
    # The rebuild is gone, and no whole-buffer copy took its place (HD010).
    left = _findings(tmp_path, "after", after.generate.lower(*args), tmp_path / "after")
    assert "HD013" not in left and "HD010" not in left, left


def test_drop_round_trip_on_a_projection(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "round_trip.py", "drop-round-trip",
                                       [("x.astype(jnp.bfloat16)", Hint(narrow_dtype="bf16", wide_dtype="f32"))])
    assert result.variant == "unsafe" and "+    h = x\n" in result.diff
    same_outputs(before, after)  # inputs that fit in bf16 (a bf16 checkpoint loaded as f32)
    args = (jnp.zeros((64, 512)), jnp.zeros((512, 256)))
    assert _findings(tmp_path, "before", before.project.lower(*args), tmp_path / "before")["HD007"] == \
        ["drop-round-trip"]
    assert count_findings(tmp_path, "HD007", "after", lambda: after.project.lower(*args)) == 0
    # Why it is unsafe: inputs that do not fit in bf16 lose the rounding the program applied.
    assert bits(before.outputs(0, stored=jnp.float32)) != bits(after.outputs(0, stored=jnp.float32))


def test_widen_weights_once_on_a_decode_step(tmp_path: Path) -> None:
    before, after, result = fixed_pair(tmp_path, "widened_weights.py", "widen-weights-once",
                                       [('params["emb"].T.astype', Hint())])
    assert result.variant == "safe" and "decode(PARAMS_F32, X0)" in result.diff and result.diff.count("PARAMS_F32") == 3
    same_outputs(before, after)
    x = jnp.zeros((8, 128))
    assert _findings(tmp_path, "before", before.decode.lower(before.PARAMS, x), tmp_path / "before")["HD014"] == \
        ["widen-weights-once"]
    assert count_findings(tmp_path, "HD014", "after", lambda: after.decode.lower(after.PARAMS_F32, x)) == 0


def _profiled(program: Path, out: Path, root: Path) -> list[dict]:  # type: ignore[type-arg]
    runner = CliRunner()
    result = runner.invoke(main, ["profile", f"{program}:step_init", "--steps", "3", "--warmup", "1", "--out",
                                  str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["diagnose", str(out), "--format", "json", "--source-root", str(root),
                                  "--no-what-if"])
    assert result.exit_code in (0, 1), result.output
    return [f for f in json.loads(result.stdout)["findings"] if f["code"] == "HD014"]


def test_init_once_on_an_eager_generate(tmp_path: Path) -> None:
    # tests/rules/programs/invariant_work.py's TinyLM: generate() reruns the model's init every call.
    program = tmp_path / "invariant_work.py"
    program.write_bytes((Path(__file__).parents[1] / "rules" / "programs" / "invariant_work.py").read_bytes())
    original = program.read_text()
    [found] = _profiled(program, tmp_path / "run", tmp_path)
    call = line_of(program, "cache = self.init_cache(B, N)")
    assert found["fix"] == "init-once" and found["source"].endswith(f"invariant_work.py:{call}")
    # Applied from the diagnosis, as a user would: unsafe, so only with --unsafe.
    applied = CliRunner().invoke(main, ["apply-fix", "--from", str(tmp_path / "run"), "--source-root", str(tmp_path),
                                        "--unsafe", "--write"])
    assert applied.exit_code == 0, applied.output
    assert "@functools.cache\n    def init_cache" in program.read_text()
    (tmp_path / "before.py").write_text(original)
    before, after = load_module(tmp_path / "before.py", "tinylm_before"), load_module(program, "tinylm_after")
    for seed in (0, 1, 2):
        tok = jax.random.randint(jax.random.key(seed), (before.B,), 0, before.V, jnp.int32)
        for _ in range(2):  # the second call reuses the cached init
            assert bits((before.MODEL.generate(tok),)) == bits((after.MODEL.generate(tok),)), seed
    assert _profiled(program, tmp_path / "fixed", tmp_path) == []
