"""Copies of real library files with a ``step()`` appended: targets for ``hlo-doctor verify FILE.py:step --fix FIX``.

``verify --fix`` edits a copy of the target's own file, so the target must live in the library file
whose code the fix changes. This writes, for each library below, a byte copy of that file with

- its package-relative imports spelled absolute (``from ...utils import x`` ->
  ``from transformers.utils import x``): the copy is imported by path, outside its package; the
  names it binds are the installed package's own objects, so the code runs as installed;
- a ``step()`` appended that builds a tiny random model from the file's own classes (nothing is
  downloaded) and runs the library's decode loop once, cycling over ``FIELD_PROMPTS`` prompts so
  that the outputs are compared over several inputs (both sides call in lockstep).

Usage (the field venv): ``.venv-field/bin/python benchmarks/field/library_copies.py OUT_DIR [NAME...]``
(names: ``tf_gpt2``, ``tf_gemma``, ``kh_gemma``, ``rg_griffin``); then e.g. ``hlo-doctor verify OUT_DIR/tf_gpt2/modeling_flax_gpt2.py:step
--fix init-once`` (docs/field.md, "Fixes proven on library loops").

Environment of the appended steps (read at import): ``FIELD_VOCAB``, ``FIELD_SEQ`` (max length),
``FIELD_PROMPT`` (prompt tokens), ``FIELD_BATCH``, ``FIELD_HIDDEN`` (width, default 128), ``FIELD_PROMPTS`` (distinct prompts, default 4),
``FIELD_TRACE`` (transformers: 1 = ``generate(trace=True)``, the library's default, whose
``lax.while_loop`` gets fresh closures and compiles on every call; 0 = its Python loop).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

TRANSFORMERS_STEP = '''

# ---- appended by benchmarks/field/library_copies.py: a tiny random {model} from this file's classes ----
import os as _os

import numpy as _np

_VOCAB = int(_os.environ.get("FIELD_VOCAB", "{vocab}"))
_SEQ = int(_os.environ.get("FIELD_SEQ", "32"))
_PROMPT = int(_os.environ.get("FIELD_PROMPT", "16"))
_BATCH = int(_os.environ.get("FIELD_BATCH", "1"))
_HIDDEN = int(_os.environ.get("FIELD_HIDDEN", "128"))
_TRACE = _os.environ.get("FIELD_TRACE", "1") == "1"
_CONFIG = {config}
_MODEL = {cls}(_CONFIG, seed=0)
_IDS = [jnp.asarray(_np.random.default_rng(i).integers(3, _VOCAB, size=(_BATCH, _PROMPT)), jnp.int32)
        for i in range(int(_os.environ.get("FIELD_PROMPTS", "4")))]
_CALLS = [0]


def step():
    """One greedy generate() (an end id the model never emits: always max_length), prompts in turn."""
    ids = _IDS[_CALLS[0] % len(_IDS)]
    _CALLS[0] += 1
    return _MODEL.generate(ids, max_length=_SEQ, do_sample=False, pad_token_id=0, eos_token_id=_VOCAB,
                           trace=_TRACE).sequences
'''
TRANSFORMERS_MODELS = {
    # name: (module, class, default vocabulary, config expression): benchmarks/field/transformers_flax.py's.
    "gpt2": ("transformers.models.gpt2.modeling_flax_gpt2", "FlaxGPT2LMHeadModel", 50257,
             "GPT2Config(vocab_size=_VOCAB, n_positions=max(_SEQ, 64), n_embd=_HIDDEN, n_layer=2, n_head=4, "
             "bos_token_id=0, eos_token_id=0)"),
    "gemma": ("transformers.models.gemma.modeling_flax_gemma", "FlaxGemmaForCausalLM", 256000,
              "GemmaConfig(vocab_size=_VOCAB, hidden_size=_HIDDEN, intermediate_size=2 * _HIDDEN, "
              "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=_HIDDEN // 4, "
              "max_position_embeddings=max(_SEQ, 64), bos_token_id=2, eos_token_id=1, pad_token_id=0)"),
}


KERAS_HUB_STEP = '''

# ---- appended by benchmarks/field/library_copies.py: a tiny random Gemma whose generate() is this file's ----
_LM = None


def step():
    """One greedy generate() (benchmarks/field/kerashub_gemma.py's sizes and prompts) through this file's
    CausalLM.make_generate_function."""
    global _LM
    if _LM is None:
        import sys as _sys

        _sys.path.insert(0, {field!r})
        import kerashub_gemma as kg

        class _ThisFilesLM(kg.GemmaCausalLM):
            make_generate_function = CausalLM.make_generate_function

        _LM = (_ThisFilesLM(backbone=kg.backbone, preprocessor=None), kg.INPUTS)
        _LM[0].compile(sampler="greedy")
    return _LM[0].generate(_LM[1], stop_token_ids=None)["token_ids"]
'''


RECURRENTGEMMA_STEP = '''

# ---- appended by benchmarks/field/library_copies.py: recurrentgemma's Sampler over this file's Griffin ----
import os as _os

import jax as _jax
import numpy as _np
import recurrentgemma.jax as _rg


class _Vocab:
    """A byte-level stand-in for the SentencePiece vocabulary (ids are bytes + 3)."""

    def pad_id(self):
        return 0

    def bos_id(self):
        return 2

    def eos_id(self):
        return 1

    def EncodeAsIds(self, s):  # noqa: N802
        return [b + 3 for b in s.encode()]

    def DecodeIds(self, ids):  # noqa: N802
        return ""


_DTYPE = jnp.dtype(_os.environ.get("FIELD_DTYPE", "bfloat16"))
_CONFIG = common.GriffinConfig(
    vocab_size=int(_os.environ.get("FIELD_VOCAB", "256000")), width=256, mlp_expanded_width=768, num_heads=4,
    block_types=(common.TemporalBlockType.RECURRENT, common.TemporalBlockType.RECURRENT,
                 common.TemporalBlockType.ATTENTION),
    embeddings_scale_by_sqrt_dim=True, attention_window_size=64, logits_soft_cap=30.0)
_MODEL = Griffin(_CONFIG, dtype=_DTYPE, param_dtype=_DTYPE)
_PARAMS = _MODEL.init(_jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32), jnp.arange(8)[None])["params"]
_SAMPLER = _rg.Sampler(model=_MODEL, vocab=_Vocab(), params=_PARAMS)
_PROMPTS = [["the quick brown fox", "jumps over the lazy dog"] * 4, ["hello world", "a b c d e f"] * 4]
_CALLS = [0]


def step():
    """One greedy Sampler call of 16 steps over 8 prompts (two prompt sets in turn)."""
    prompts = _PROMPTS[_CALLS[0] % len(_PROMPTS)]
    _CALLS[0] += 1
    return _SAMPLER(prompts, total_generation_steps=16, end_sampling_at_eos_token=False).tokens
'''


def absolute_imports(text: str, package: str) -> str:
    """``from .x``/``from ..x`` spelled from ``package`` (the file's own package, dotted)."""
    parts = package.split(".")

    def repl(m: re.Match[str]) -> str:
        dots, rest = len(m.group(2)), m.group(3)
        base = ".".join(parts[: len(parts) - dots + 1])
        return f"{m.group(1)}from {base}{'.' + rest if rest else ''} import"

    return re.sub(r"^(\s*)from (\.+)([\w.]*) import", repl, text, flags=re.M)


def write_transformers(out: Path, model: str) -> Path:
    """``out/tf_<model>/modeling_flax_<model>.py``: transformers' Flax file of ``model`` (``gpt2``,
    ``gemma``) with a greedy ``step()``."""
    import importlib

    module, cls, vocab, config = TRANSFORMERS_MODELS[model]
    lib = importlib.import_module(module)
    text = absolute_imports(Path(str(lib.__file__)).read_text(encoding="utf-8"), module.rpartition(".")[0])
    dest = out / f"tf_{model}" / Path(str(lib.__file__)).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    step = TRANSFORMERS_STEP.replace("{model}", model).replace("{vocab}", str(vocab)).replace(
        "{config}", config).replace("{cls}", cls)
    dest.write_text(text + step, encoding="utf-8")
    return dest


def write_kerashub_causal_lm(out: Path) -> Path:
    """``out/kh_gemma/causal_lm.py``: keras-hub's ``CausalLM`` file (its ``jax.jit`` of generate) with a
    ``step()`` that runs ``kerashub_gemma.py``'s tiny Gemma through it (run with ``KERAS_BACKEND=jax``)."""
    import keras_hub.src.models.causal_lm as lib

    text = Path(lib.__file__).read_text(encoding="utf-8")
    dest = out / "kh_gemma" / "causal_lm.py"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text + KERAS_HUB_STEP.replace("{field!r}", repr(str(Path(__file__).resolve().parent))),
                    encoding="utf-8")
    return dest


def write_recurrentgemma_griffin(out: Path) -> Path:
    """``out/rg_griffin/griffin.py``: recurrentgemma's ``Griffin`` file with a ``step()`` that samples
    greedily through ``recurrentgemma.jax.Sampler`` over this file's ``Griffin``."""
    import recurrentgemma.jax.griffin as lib

    dest = out / "rg_griffin" / "griffin.py"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(Path(lib.__file__).read_text(encoding="utf-8") + RECURRENTGEMMA_STEP, encoding="utf-8")
    return dest


WRITERS = {"tf_gpt2": lambda out: write_transformers(out, "gpt2"),
           "tf_gemma": lambda out: write_transformers(out, "gemma"), "kh_gemma": write_kerashub_causal_lm,
           "rg_griffin": write_recurrentgemma_griffin}


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/field/fixes")
    for name in sys.argv[2:] or list(WRITERS):
        path = WRITERS[name](root)
        print(path)
