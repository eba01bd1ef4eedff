"""HD014: per-call work that depends only on constants and weights, on real JAX programs (XLA:CPU).

The analyses (``hlo.invariance``, ``hlo.weights``) are tested on programs compiled here; the rule on
``programs/invariant_work.py`` profiled and diagnosed (a bf16 table widened on every call, a random
projection from a constant key, an eager ``generate()`` that reruns the model's ``init``, each next
to the same step without the waste), on recurrentgemma 1.0.1's sampler loop as XLA:CPU compiled it
(``programs/recurrentgemma_sample_fn.hlo.gz``: ``benchmarks/recurrentgemma_sampler.py``, bf16
params, vocabulary 8,192, read back from the trace; paths shortened), and on the reference engine's
captures, whose per-call logits widening is an input's and must not be reported.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.hlo import HloModule, parse_module
from hlo_doctor.hlo.invariance import VARYING, dependence, invariant_groups
from hlo_doctor.hlo.weights import weight_parameters
from hlo_doctor.lint import Context, load_context, load_rulebook, run_rule

PROGRAMS = Path(__file__).parent / "programs"
PROGRAM = PROGRAMS / "invariant_work.py"
SAMPLE_TRACES = Path(__file__).parents[2] / "sample_traces"
RULE = next(r for r in load_rulebook().rules if r.code == "HD014")


def _compiled(f: Any, *args: Any, **jit: Any) -> HloModule:
    return parse_module(jax.jit(f, **jit).lower(*args).compile().as_text())


def _op(m: HloModule, opcode: str, dtype: str = "") -> Any:
    return next(i for i in m.entry.instructions if opcode in (i.opcode, *_fused(m, i))
                and (not dtype or i.shape.dtype == dtype))


def _fused(m: HloModule, inst: Any) -> list[str]:
    body = m.fusion_body(inst)
    return [i.opcode for i in body.instructions] if body is not None else []


def _program() -> Any:
    sys.path.insert(0, str(PROGRAMS))
    try:
        import invariant_work
    finally:
        sys.path.remove(str(PROGRAMS))
    return invariant_work


# -- what each op depends on -------------------------------------------------------------------------

def test_dependence_follows_parameters_constants_and_random_keys() -> None:
    def f(x: jax.Array, key: jax.Array) -> tuple[jax.Array, ...]:
        table = jnp.sin(jnp.arange(4096.0)).reshape(64, 64)      # constants only
        fixed = jax.random.normal(jax.random.PRNGKey(0), (64, 64))  # a constant key
        drawn = jax.random.normal(key, (64, 64))                   # a key the caller passes
        return x @ table, x @ fixed, drawn

    m = _compiled(f, jnp.ones((8, 64)), jax.random.PRNGKey(1))
    dep = dependence(m)
    assert dep.sources(_op(m, "sine")) == frozenset()
    # The constant key's draws depend on nothing; the passed key's on parameter 1; the products on x.
    by_sources = {dep.sources(i) for i in m.entry.instructions if i.opcode not in ("parameter", "constant")}
    assert frozenset() in by_sources and frozenset({1}) in by_sources
    assert dep.sources(_op(m, "dot")) & {0}
    assert all(VARYING not in s for s in by_sources)


def test_dependence_through_a_while_loop() -> None:
    def f(w: jax.Array, x: jax.Array) -> jax.Array:
        def body(c: tuple[Any, ...]) -> tuple[Any, ...]:
            i, h, w_ = c
            return i + 1, jnp.tanh(h @ w_), w_
        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, x, w))[1]

    m = _compiled(f, jnp.ones((64, 64)), jnp.ones((8, 64)))
    dep = dependence(m)
    loop = next(i for i in m.entry.instructions if i.opcode == "while")
    state = dep.of(loop)
    assert isinstance(state, tuple)
    by_shape = {e.text(with_layout=False): s for e, s in zip(loop.shape.elements, state, strict=True)}
    assert by_shape["s32[]"] == frozenset()            # the counter: constants only
    assert by_shape["f32[64,64]"] == frozenset({0})    # w, passed through unchanged
    assert by_shape["f32[8,64]"] == frozenset({0, 1})  # h, rewritten from h and w


# -- which parameters are weights -------------------------------------------------------------------

def test_weights_are_contracted_gathered_and_never_written() -> None:
    def step(emb: jax.Array, w: jax.Array, x: jax.Array, cache: jax.Array, tok: jax.Array) -> Any:
        h = emb[tok] + x.astype(jnp.float32) @ w.astype(jnp.float32)
        # The cache is read like a weight (the right operand of a dot) but written in place.
        return h @ emb.T, cache.at[0].set(h[0].astype(jnp.bfloat16)), h @ cache.astype(jnp.float32)

    args = (jnp.ones((512, 64)), jnp.ones((64, 64), jnp.bfloat16), jnp.ones((8, 64), jnp.bfloat16),
            jnp.ones((64, 64), jnp.bfloat16), jnp.zeros((8,), jnp.int32))
    weights = weight_parameters(_compiled(step, *args))
    assert sorted(weights) == [0, 1]  # x is the left operand; the cache is updated in place
    assert weights[0].how in ("rows gathered by", "contracted by")
    # Donated, the same table is not a weight: the caller hands its buffer over.
    donated = weight_parameters(_compiled(lambda emb, x: (x @ emb.T, emb * 2), args[0], jnp.ones((8, 64)),
                                          donate_argnums=0))
    assert 0 not in donated


def test_loop_carried_state_is_not_a_weight() -> None:
    def f(w: jax.Array, x: jax.Array) -> jax.Array:
        def body(c: tuple[Any, ...]) -> tuple[Any, ...]:
            i, h, w_ = c
            return i + 1, h @ w_, w_ * 0.5   # w changes every iteration
        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, x, w))[1]

    assert weight_parameters(_compiled(f, jnp.ones((64, 64)), jnp.ones((8, 64)))) == {}


def test_groups_join_a_weight_convert_and_its_transpose() -> None:
    m = parse_module(gzip.decompress((PROGRAMS / "recurrentgemma_sample_fn.hlo.gz").read_bytes()).decode())
    weights = weight_parameters(m)
    emb = next(n for n, u in weights.items() if "input_embedding" in u.parameter.op_name)
    groups = [g for g in invariant_groups(m, dependence(m), set(weights)) if g.parameters == (emb,)]
    transposed = next(g for g in groups if g.anchor.shape.dims == (256, 8192))
    assert len(transposed.ops) == 2 and transposed.feeds_work and not transposed.loops


# -- the rule ----------------------------------------------------------------------------------------

def test_recurrentgemma_embedding_widened_and_transposed_every_call() -> None:
    text = gzip.decompress((PROGRAMS / "recurrentgemma_sample_fn.hlo.gz").read_bytes()).decode()
    [found] = run_rule(RULE, Context(modules=(parse_module(text),), kind="hlo"))
    extra = dict(found.extra)
    assert found.module == "jit__sample_fn" and found.shape.startswith("f32[256,8192]")
    assert "params['embedder']['input_embedding'] bf16[8192,256]" in found.message
    assert "widens and transposes" in found.message and "passed unchanged through while" in found.message
    assert extra["parameter_names"][0] == "params['embedder']['input_embedding']"
    assert extra["inputs"] == "weights" and extra["groups"] > 1
    assert found.source.endswith("recurrentgemma/jax/modules.py:940")


def _profile_and_diagnose(target: str, out: Path) -> dict[str, Any]:
    runner = CliRunner()
    result = runner.invoke(main, ["profile", f"{PROGRAM}:{target}", "--steps", "3", "--warmup", "1",
                                  "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["diagnose", str(out), "--format", "json", "--select", "HD014", "--no-what-if"],
                           catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _line(text: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if text in line)


def test_weight_widened_every_call(tmp_path: Path) -> None:
    [found] = _profile_and_diagnose("step", tmp_path / "run")["findings"]
    assert found["module"] == "jit_decode" and found["shape"].startswith("f32[2048,128]")
    assert "params['emb'] bf16[2048,128]" in found["message"] and "widens" in found["message"]
    assert found["extra"]["parameter_names"] == ["params['emb']", "params['w']"]
    assert found["recoverable_us"] > 0 and found["source"].endswith(f":{_line('.T.astype(jnp.float32)')}")


def test_no_finding_when_the_weights_are_prepared_once(tmp_path: Path) -> None:
    assert _profile_and_diagnose("step_prepared", tmp_path / "run")["findings"] == []


def test_random_projection_from_a_constant_key(tmp_path: Path) -> None:
    [found] = _profile_and_diagnose("step_rng", tmp_path / "run")["findings"]
    assert found["module"] == "jit_project" and found["extra"]["inputs"] == "constants"
    assert "random bits from a constant key" in found["message"]
    # The whole draw (the threefry loop and its body) is one group, timed once, below the step.
    assert 0 < found["recoverable_us"] < _profile_step(tmp_path / "run")
    assert _profile_and_diagnose("step_rng_fixed", tmp_path / "fixed")["findings"] == []


def _profile_step(run: Path) -> float:
    return float(load_context(run).step_time_us or 0.0)


def test_eager_generate_reruns_the_models_init(tmp_path: Path) -> None:
    [found] = _profile_and_diagnose("step_init", tmp_path / "run")["findings"]
    extra = found["extra"]
    assert found["message"].startswith("the model's initialisation runs on every step")
    assert any(p.startswith("jit__normal(") for p in extra["random_programs"])
    assert set(extra["initialisers"]) == {"TinyLM.init_cache", "TinyLM.init"}
    # The line to edit: generate()'s call into init_cache, not the constructor that compiled the draws.
    assert found["source"].endswith(f"invariant_work.py:{_line('cache = self.init_cache(B, N)')}")
    assert found["stack"][0]["function"] == "TinyLM.generate"
    assert found["recoverable_us"] > 0
    assert _profile_and_diagnose("step_init_once", tmp_path / "once")["findings"] == []


@pytest.mark.parametrize("capture", sorted(p.name for p in SAMPLE_TRACES.iterdir() if p.is_dir()))
def test_reference_engine_captures_have_no_finding(capture: str) -> None:
    # The engine widens its logits on every call: per-call data, not invariant work.
    assert run_rule(RULE, load_context(SAMPLE_TRACES / capture)) == []


def test_two_causes_in_a_scan_over_layers_are_two_findings_with_their_own_lines(tmp_path: Path) -> None:
    # The cast of the projections and the move of the stacked weights to the scan's axis share the
    # scan's loop counter; they are two wastes with two remedies, each at the line that does it.
    found = _profile_and_diagnose("step_scan", tmp_path / "run")["findings"]
    by_cause = {f["extra"]["cause"]: f for f in found}
    assert sorted(by_cause) == ["dtype", "layout"] and len(found) == 2
    dtype, layout = by_cause["dtype"], by_cause["layout"]
    cast, move = _line('proj = params["proj"].astype(jnp.bfloat16)'), _line('layers = jnp.moveaxis(params["wt"], 1, 0)')
    assert dtype["source"].endswith(f":{cast}") and layout["source"].endswith(f":{move}")
    # The verb is the compiled convert's: "narrows" where XLA kept the f32 -> bf16 convert itself
    # (jaxlib 0.11.2), "converts" where it is another (0.10.2).
    assert dtype["extra"]["parameter_names"] == ["params['proj']"]
    assert "converts" in dtype["message"] or "narrows" in dtype["message"]
    assert layout["extra"]["parameter_names"] == ["params['wt']"] and "transposes" in layout["message"]
    # Timed: the ops doing the work, not the scan's slices of the weights, which stay once they are
    # stored as the scan uses them; on XLA:CPU scaled by the ops' union over their sum.
    for f in found:
        assert 0 < f["recoverable_us"] <= f["extra"]["summed_op_us_per_step"] + 0.1
        assert 0 < f["extra"]["overlap_ratio"] <= 1
        assert f["extra"]["timed_ops"] and not any(op.startswith("dynamic-slice") for op in f["extra"]["timed_ops"])
    assert _profile_and_diagnose("step_scan_prepared", tmp_path / "prepared")["findings"] == []
