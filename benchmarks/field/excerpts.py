"""Cut the optimized-HLO excerpts of the field set: one real module per waste (or per non-waste
that looks like one), copied from the captures' ``--xla_dump_to`` folders, with an index.

    python benchmarks/field/excerpts.py OUTROOT

Writes OUTROOT/excerpts/<waste>_<lib>.hlo.txt (the whole optimized module, as XLA:CPU printed it:
parseable, with its metadata) and OUTROOT/excerpts/INDEX.md (what to look at in each: the ops,
their shapes, whether it is a waste, and the what-if that measured it). A capture that is missing
is skipped with a line on stderr.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

# (file stem, capture, module name, VALID|INVALID for a rule on that waste, what to look at)
EXCERPTS = [
    ("softmax-argmax_kerashub", "kh-gemma-v256k-s32", "jit_compiled_generate_function", "INVALID",
     "while body: `ynn_fusion.1` (reduce_max, subtract, exp over f32[1,256000]), `ynn_fusion` "
     "(reduce_sum), `wrapped_divide`, then `iota_reduce_fusion` (the argmax; multiplies by 1/sum "
     "first). Softmax only feeds argmax: keras_hub/src/samplers/sampler.py:139 "
     "(`compute_probabilities`), argmax at greedy_sampler.py:36. What-if no-softmax."),
    ("argmax-of-logits_transformers", "tf-gpt2-jit-v50k-s32", "jit_generate", "VALID",
     "greedy search takes `jnp.argmax(logits)` directly (flax_utils.py:634): `iota_reduce_fusion` "
     "reads the dot's f32[1,50257] output, no exp/sum/divide. A softmax rule must stay silent."),
    ("cache-restack_kerashub", "kh-gemma-v32k-s1024-p768", "jit_compiled_generate_function",
     "INVALID",
     "while body: each layer's K and V sliced out of the stacked f32[4,2,2,1024,1,32] cache "
     "(`bitcast_slice_fusion*`, `slice_bitcast_fusion*`: gemma_causal_lm.py:204, "
     "gemma_attention.py:296-297), one token written (`*dynamic-update-slice*` fusions: "
     "gemma_attention.py:302-303), re-stacked (`bitcast_concatenate_fusion`: gemma_causal_lm.py:212, "
     "gemma_attention.py:304) and copied (`copy.*` of the cache shape). What-if cache-in-place."),
    ("cache-in-place_transformers", "tf-gpt2-jit-v50k-s32", "jit_generate", "VALID",
     "while body: each layer's cached_key/cached_value f32[1,32,4,32] is its own loop-carried "
     "buffer, updated by one dynamic-update-slice (modeling_flax_gpt2.py:179-180). A cache "
     "rebuild rule must stay silent."),
    ("head-all-positions_transformers", "tf-gemma-jit-v256k-s32", "jit_generate", "INVALID",
     "prefill (entry computation, before the while): `ynn_fusion` f32[16,256000] = LM head over all "
     "16 prompt positions (modeling_flax_gemma.py:721), then `iota_reduce_fusion.1` argmaxes the "
     "last row only (flax_utils.py:629 `logits[:, -1]`, the slice fused into the argmax). "
     "What-if head-last-only."),
    ("head-all-positions_transformers-gpt2", "tf-gpt2-jit-v50k-s32", "jit_generate", "INVALID",
     "the same in GPT-2: `ynn_fusion` f32[16,50257] (modeling_flax_gpt2.py:720) -> "
     "`iota_reduce_fusion.1`."),
    ("transposed-head-fused_kerashub", "kh-gemma-v256k-s32", "jit_compiled_generate_function",
     "VALID",
     "while body: `copy_dot_fusion` holds transpose + copy of the f32[256000,128] embedding and "
     "the dot (keras/src/layers/core/reversible_embedding.py:131 `ops.transpose(self.embeddings)`). "
     "Looks like a per-iteration transpose, is not one to remove: the what-if head-no-transpose "
     "(einsum on the stored layout) is slower on XLA:CPU."),
    ("per-call-init_transformers-eager", "tf-gpt2-eager-v50k-s32", "jit__normal", "INVALID",
     "eager generate(): `init_cache` runs `module.init` (random init of every parameter, e.g. "
     "u32[50257,128] threefry bits in `broadcast_add_fusion*`, and a forward pass) on every call "
     "for a zero cache (modeling_flax_gpt2.py:451). The module is one of the init's eager programs "
     "(program run once per call). What-if cache-once."),
    ("per-call-transpose_transformers-eager", "tf-gpt2-eager-v50k-s32", "jit_transpose", "INVALID",
     "eager generate(): `transpose_copy_fusion` f32[128,50257] = the tied embedding's `.T` "
     "(modeling_flax_gpt2.py:719), run twice per call (init forward + prefill)."),
    ("loop-recompiled_kerashub-eager", "kh-gemma-eager-v32k-s32", "jit_while", "INVALID",
     "eager generate(): the sampler's while loop (keras_hub/src/samplers/sampler.py:195 "
     "`ops.while_loop`), compiled on every call (fresh closures): the same module text under a "
     "new program id per call. What-if loop-once."),
    ("weight-transpose-in-loop_transformers-gpt2", "tf-gpt2-jit-v50k-s32", "jit_generate",
     "INVALID",
     "while body: `transpose_copy_fusion*` (f32[512,128], f32[128,512], f32[128,384], "
     "f32[128,128]) transpose each FlaxConv1D kernel, a loop-invariant parameter, on every "
     "iteration (modeling_flax_gpt2.py:120 `kernel.transpose()`). What-if conv1d-no-transpose."),
    ("widen-transpose-per-call_recurrentgemma", "rg-v256k-bf16", "jit__sample_fn", "INVALID",
     "entry computation, before the while: `wrapped_convert` (bf16[256000,256] -> f32), "
     "`convert_transpose_fusion` and `wrapped_copy.7` (f32[256,256000]): XLA:CPU widens the bf16 "
     "embedding (it has no bf16 dot) and lays it out for the LM head, once per call, for a "
     "parameter that never changes (recurrentgemma/jax/modules.py:940 `x @ embedding_table.T`, "
     ":926 the gather). What-if f32-embedding."),
    ("widen-for-gather_recurrentgemma", "rg-v256k-bf16", "jit__prompt_processing_fn", "INVALID",
     "`wrapped_convert.23` widens the whole bf16[256000,256] table to f32 so that 184 rows can "
     "be gathered (recurrentgemma/jax/modules.py:926 `input_embedding_table[(x,)]`)."),
    ("softcap-argmax_recurrentgemma", "rg-v256k-bf16", "jit__sample_fn", "INVALID",
     "while body: `iota_reduce_fusion` (argmax) has the logits soft cap fused in: divide by 30, "
     "tanh, multiply by 30, with bf16 round trips between (recurrentgemma/jax/griffin.py:176). "
     "A monotone map whose only consumer is the argmax. What-if no-softcap."),
]


def module_file(dump: Path, module: str) -> Path | None:
    """The largest ``*.<module>.cpu_after_optimizations.txt`` in a dump folder."""
    files = sorted(dump.glob(f"module_*.{module}.cpu_after_optimizations.txt"),
                   key=lambda p: -p.stat().st_size)
    return files[0] if files else None


def main() -> None:
    """Command line: see the module docstring."""
    root = Path(sys.argv[1])
    out = root / "excerpts"
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| file | from capture (module) | for a rule on that waste | what to look at |",
             "|---|---|---|---|"]
    for stem, capture, module, kind, note in EXCERPTS:
        src = module_file(root / "hlo" / capture, module)
        if src is None:
            print(f"excerpts: no {module} in {root / 'hlo' / capture}", file=sys.stderr)
            continue
        shutil.copyfile(src, out / f"{stem}.hlo.txt")
        lines.append(f"| {stem}.hlo.txt | {capture} ({src.name}) | {kind} | {note} |")
    (out / "INDEX.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
