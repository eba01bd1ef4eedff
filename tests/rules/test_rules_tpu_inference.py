"""The rules on the real tpu-inference ``sample()`` (0.24.0 wheel), compiled on XLA:CPU.

The released function fed what the released runner feeds it (bf16 logits widened by an eager
``astype``), against the function patched by ``apply-fix bf16-greedy-sampler`` fed bf16.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner
from fixtures_wheels import import_tpu_sampling, unpack
from jax.sharding import Mesh

from hlo_doctor.cli import main
from hlo_doctor.hlo import parse_module
from hlo_doctor.lint import Context, diagnose, load_rulebook

B, V = 16, 2048
AXES = ("data", "attn_dp", "attn_dp_expert", "expert", "model", "dcp")
BOOK = load_rulebook()

pytestmark = pytest.mark.slow


def _sample_hlo(tree: Path, dtype: jnp.dtype) -> str:
    mesh = Mesh(np.array(jax.devices()[:1]).reshape((1,) * len(AXES)), AXES)
    with import_tpu_sampling(tree) as sampling:
        meta_cls = sys.modules["tpu_inference.layers.jax.sample.sampling_metadata"].TPUSupportedSamplingMetadata
        meta = meta_cls(do_sampling=False, logprobs=True, _cache_collision_dummy=jnp.zeros((1,), jnp.int32))
        x = jnp.zeros((B, V), dtype)
        return _lower(sampling, mesh, x, meta).compile().as_text()


def _lower(sampling: ModuleType, mesh: Mesh, x: jax.Array, meta: object) -> jax.stages.Lowered:
    params = inspect.signature(sampling.sample.__wrapped__).parameters
    static = [name for name in ("mesh", "allow_distributed_sampling") if name in params]
    return jax.jit(sampling.sample.__wrapped__, static_argnames=static).lower(jax.random.key(0), mesh, x, meta)


def _eager_convert_hlo() -> str:
    # What an eager ``logits.astype(jnp.float32)`` compiles: its own jit_convert_element_type program.
    convert = jax.jit(jax.lax.convert_element_type, static_argnums=1)
    return convert.lower(jnp.zeros((B, V), jnp.bfloat16), jnp.float32).compile().as_text()


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tpu_inference")
    released = unpack("0.24.0", tmp / "released")
    fixed = unpack("0.24.0", tmp / "fixed")
    r = CliRunner().invoke(main, ["apply-fix", "bf16-greedy-sampler", "--target", str(fixed)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return released, fixed


def test_released_sample_with_eager_widening(trees: tuple[Path, Path]) -> None:
    released, _ = trees
    modules = (parse_module(_eager_convert_hlo()), parse_module(_sample_hlo(released, jnp.float32)))
    assert modules[0].name == "jit_convert_element_type"
    result = diagnose(Context(modules=modules), BOOK)
    got = {(f.code, f.module) for f in result.findings}
    # No HD001: sample() also returns the widened logits (HD002), so the widening would move, not vanish.
    assert got == {("HD002", "jit_sample"), ("HD004", "jit_sample")}, [f.message for f in result.findings]
    copy = next(f for f in result.findings if f.code == "HD002")
    assert copy.shape == f"f32[{B},{V}]{{1,0}}"
    assert copy.fix == "bf16-greedy-sampler"
    reduce = next(f for f in result.findings if f.code == "HD004")
    assert reduce.source.endswith("tpu_inference/layers/jax/sample/sampling.py:" + reduce.source.rsplit(":", 1)[1])


def test_fixed_sample_is_clean(trees: tuple[Path, Path]) -> None:
    _, fixed = trees
    result = diagnose(Context(modules=(parse_module(_sample_hlo(fixed, jnp.bfloat16)),)), BOOK)
    assert result.findings == (), [f.message for f in result.findings]
