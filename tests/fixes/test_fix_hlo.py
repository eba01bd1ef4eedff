"""The real tpu-inference ``sample()``, patched by apply-fix, compiled on CPU and read as HLO.

For 0.24.0 and the newest release: the released function fed what the released runner feeds it
(float32, widened eagerly) against the patched one fed what the patched runner feeds it (bf16).
Facts are read with hlo-doctor's own parser from ``.lower(...).compile().as_text()``: the aliasing
copy, the dtype the argmax reads from memory, the float32 logits output, and the greedy tokens
(ties and NaN included) compared element for element.
"""

from __future__ import annotations

import inspect
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures_wheels import import_tpu_sampling, newest_release, unpack
from jax.sharding import Mesh

from hlo_doctor.fixes import FixApplied, FixSkipped, apply_fix
from hlo_doctor.hlo import HloInstruction, HloModule, parse_module

FIX = "bf16-greedy-sampler"
B, V = 16, 2048
# Every axis name either ShardingAxisName flavour uses, each of size 1 (one CPU device).
AXES = ("data", "attn_dp", "attn_dp_expert", "expert", "model", "dcp")

pytestmark = pytest.mark.slow


@dataclass(frozen=True, slots=True)
class SampleFacts:
    """What the compiled greedy ``sample()`` does, read from its HLO."""

    aliasing_copy: bool
    argmax_reads: str
    logits_output: str | None
    f32_logits_materialized: bool


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:1]).reshape((1,) * len(AXES)), AXES)


def _metadata(sampling: ModuleType, logprobs: bool) -> object:
    import sys

    cls = sys.modules["tpu_inference.layers.jax.sample.sampling_metadata"].TPUSupportedSamplingMetadata
    # As the precompile pass and the runner build it: greedy, a collision dummy per logprobs flag.
    dummy = jnp.zeros((1 if logprobs else 2,), jnp.int32)
    return cls(do_sampling=False, logprobs=logprobs, _cache_collision_dummy=dummy)


def _argmax_operand(module: HloModule) -> HloInstruction:
    """The entry-level value the argmax (a variadic reduce to (value, s32 index)) reads."""
    for inst in module.entry_instructions():
        body = module.fusion_body(inst) if inst.opcode == "fusion" else None
        reduces = [inst] if inst.opcode == "reduce" else ([i for i in body.instructions if i.opcode == "reduce"] if body else [])
        for reduce in reduces:
            if reduce.shape.is_tuple and any(e.dtype == "s32" for e in reduce.shape.elements):
                return module.operands_of(inst)[0]
    raise AssertionError("no argmax reduce in the entry computation")


def facts_of(text: str, batch: int = B, vocab: int = V) -> SampleFacts:
    """Read :class:`SampleFacts` from compiled HLO text of a ``[batch, vocab]`` greedy sample."""
    module = parse_module(text)
    entry = module.entry_instructions()
    aliasing_copy = any(
        i.opcode == "copy"
        and module.is_live_out(i)
        and all(o.opcode == "parameter" for o in module.operands_of(i))
        for i in entry
    )
    root = module.entry.root
    outputs = module.operands_of(root) if root.opcode == "tuple" else [root]
    logits_out = [o for o in outputs if o.shape.dims == (batch, vocab)]
    return SampleFacts(
        aliasing_copy=aliasing_copy,
        argmax_reads=str(_argmax_operand(module).shape.text(with_layout=False)),
        logits_output=logits_out[0].shape.text(with_layout=False) if logits_out else None,
        f32_logits_materialized=any(
            i.opcode != "parameter" and i.shape.dtype == "f32" and i.shape.dims == (batch, vocab) for i in entry
        ),
    )


def _logits(seed: int) -> jax.Array:
    """Random bf16 logits with explicit ties, a NaN row, -inf rows and extreme positions."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, V)).astype(np.float32) * 4
    x[0, [5, 700, 2047]] = 30.0  # three-way tie for the max: the first index wins
    x[1, :] = 1.0  # a row of equal values
    x[2, -1] = 50.0  # max at the last index
    x[3, 0] = 50.0  # max at the first index
    x[4, 10] = np.nan  # NaN: argmax returns the first NaN
    x[5, :] = -np.inf
    x[5, 1234] = -3.0
    # Values that differ in float32 but round to the same bf16: ties exist only after rounding.
    x[6, 100], x[6, 200] = 20.0, 20.0 + 2.0**-12
    bf16 = jnp.asarray(x, dtype=jnp.bfloat16)
    assert float(bf16[6, 100]) == float(bf16[6, 200])
    return bf16


@pytest.fixture(scope="module", params=["0.24.0", "newest"])
def trees(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Released, patched (full) and patched (upstream) trees of one release."""
    version = newest_release() if request.param == "newest" else request.param
    base = tmp_path_factory.mktemp(f"hlo-{version}")
    released = unpack(version, base / "released")
    out = {"released": released, "version": Path(version)}
    for variant in ("full", "upstream"):
        patched = Path(shutil.copytree(released, base / variant))
        result = apply_fix(FIX, patched, variant=variant)
        if isinstance(result, FixSkipped) and result.kind == "not-affected":
            pytest.skip(f"{version}: {result.reason}")
        assert isinstance(result, FixApplied), result
        out[variant] = patched
    return out


def _lower(sampling: ModuleType, x: jax.Array, meta: object) -> jax.stages.Lowered:
    """``sample`` lowered as the release jits it; TPU-only compiler options are left out on CPU.

    Newer releases pass TPU flags (``xla_tpu_*``) to ``jax.jit``, which XLA:CPU rejects. Then the
    same function body (``sample.__wrapped__``) is jitted with the same static arguments and no
    compiler options; the program is the same.
    """
    sample = sampling.sample
    try:
        lowered = sample.lower(jax.random.key(0), _mesh(), x, meta)
        lowered.compile()
        return lowered
    except jax.errors.JaxRuntimeError as exc:
        if "No such compile option" not in str(exc):
            raise
    params = inspect.signature(sample.__wrapped__).parameters
    static = [name for name in ("mesh", "allow_distributed_sampling") if name in params]
    return jax.jit(sample.__wrapped__, static_argnames=static).lower(jax.random.key(0), _mesh(), x, meta)


def _compile(tree: Path, dtype: jnp.dtype, logprobs: bool, logits: jax.Array) -> tuple[SampleFacts, np.ndarray, object]:
    with import_tpu_sampling(tree) as sampling:
        meta = _metadata(sampling, logprobs)
        x = logits.astype(dtype)
        compiled = _lower(sampling, x, meta).compile()
        tokens, out_logits = compiled(jax.random.key(0), x, meta)
        return facts_of(compiled.as_text()), np.asarray(tokens), out_logits


def test_patched_sample_hlo_facts_and_tokens(trees: dict[str, Path], record_property: pytest.RecordProperty) -> None:
    logits = _logits(seed=0)
    for logprobs in (True, False):
        before, tokens_before, logits_before = _compile(trees["released"], jnp.float32, logprobs, logits)
        # The released sample(), fed float32 by the released runner: the greedy branch returns its
        # input, so XLA copies an entry parameter; the argmax reads float32.
        assert before.aliasing_copy
        assert before.argmax_reads == f"f32[{B},{V}]"
        assert before.logits_output == f"f32[{B},{V}]"

        for variant in ("upstream", "full"):
            after, tokens_after, logits_after = _compile(trees[variant], jnp.bfloat16, logprobs, logits)
            record_property(f"{trees['version']}-{variant}-logprobs={logprobs}", repr(after))
            assert not after.aliasing_copy
            assert after.argmax_reads == f"bf16[{B},{V}]"
            np.testing.assert_array_equal(tokens_after, tokens_before)
            if logprobs or variant == "upstream":
                # The float32 logits are produced in-graph, by the widening convert.
                assert after.logits_output == f"f32[{B},{V}]"
                np.testing.assert_array_equal(np.asarray(logits_after), np.asarray(logits_before))
            else:
                # Full variant without logprobs: no float32 logits at all, not even internally.
                assert after.logits_output is None and logits_after is None
                assert not after.f32_logits_materialized
    # Reference points for the ties: the first maximal index, the first NaN.
    assert tokens_before[0] == 5 and tokens_before[1] == 0 and tokens_before[2] == V - 1
    assert tokens_before[3] == 0 and tokens_before[4] == 10 and tokens_before[5] == 1234 and tokens_before[6] == 100


def test_tokens_equal_on_random_bf16_batches(trees: dict[str, Path]) -> None:
    for seed in range(1, 4):
        logits = _logits(seed)
        _, released, _ = _compile(trees["released"], jnp.float32, False, logits)
        _, patched, _ = _compile(trees["full"], jnp.bfloat16, False, logits)
        np.testing.assert_array_equal(patched, released)
