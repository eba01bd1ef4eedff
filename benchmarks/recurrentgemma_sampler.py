"""A profile target: recurrentgemma's own ``Sampler`` (a jitted ``lax.while_loop`` decode loop) on a
small random Griffin, as a judge of the rules on a decode loop nobody here wrote.

Not a dependency of hlo-doctor; in a separate environment::

    python3 -m venv /tmp/rg && /tmp/rg/bin/pip install "recurrentgemma[jax]" "jax==0.10.2" "jaxlib==0.10.2" -e .
    /tmp/rg/bin/hlo-doctor profile benchmarks/recurrentgemma_sampler.py:step --steps 3 --out runs/rg
    /tmp/rg/bin/hlo-doctor diagnose runs/rg

With recurrentgemma 1.0.1 on XLA:CPU: six HD010 findings, the loop-carried copies of the
attention and recurrent caches inside the sampler's ``while`` (15 iterations per step, each timed
on its own row), and the loop's 73-buffer state shown shortened in the tables.
"""
import jax
import jax.numpy as jnp
import recurrentgemma.jax as rg
from recurrentgemma import common

VOCAB = 8192


class _Vocab:
    """Stands in for the SentencePiece vocabulary (no model file here): ids are bytes + 3."""
    def pad_id(self): return 0
    def bos_id(self): return 2
    def eos_id(self): return 1
    def EncodeAsIds(self, s): return [b + 3 for b in s.encode()]
    def DecodeIds(self, ids): return ""


config = common.GriffinConfig(
    vocab_size=VOCAB, width=256, mlp_expanded_width=768, num_heads=4,
    block_types=(common.TemporalBlockType.RECURRENT, common.TemporalBlockType.RECURRENT,
                 common.TemporalBlockType.ATTENTION),
    embeddings_scale_by_sqrt_dim=True, attention_window_size=64, logits_soft_cap=30.0)
model = rg.Griffin(config, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
tokens = jnp.ones((1, 8), jnp.int32)
params = model.init(jax.random.PRNGKey(0), tokens, jnp.arange(8)[None])["params"]
sampler = rg.Sampler(model=model, vocab=_Vocab(), params=params)
PROMPTS = ["the quick brown fox", "jumps over the lazy dog"] * 4


def step():
    out = sampler(PROMPTS, total_generation_steps=16, end_sampling_at_eos_token=False)
    return out.tokens
