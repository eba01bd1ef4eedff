"""The hand list of the field set's wastes, and the table that puts each next to its figures.

    python benchmarks/field/wastes.py OUTROOT > table.md
    python benchmarks/field/wastes.py OUTROOT --into docs/field.md   # between its table markers

Each entry names a capture, the waste, the ops that carry it (chosen in the capture's op-stats CSV
by module, by the op's jax ``op_name`` and by shape; ``copy`` ops XLA inserted carry no op_name),
the line a person edits, and the what-if variant that removes it. The table gives, per entry: the
ops' share of the step in the op table (times ``fraction`` where only part of an op is waste),
or for a compile the compile time per step from compiles.py; and the what-if's saving on both
clocks with its 95% CI, and whether the greedy tokens stayed equal.
"""
from __future__ import annotations

import csv
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

KH = "keras_hub/src/models/gemma/"
TF = "transformers/models/"
GEN = "jit_compiled_generate_function"


@dataclass(frozen=True)
class Waste:
    """One waste (or look-alike) of one capture."""

    capture: str
    key: str
    what: str
    line: str
    variant: str = ""
    module: str = ""          # regex on the op's module
    op_name: str = ""         # regex on the op's jax op_name ("" matches ops without one)
    shape: str = ""           # regex on the op's shape
    opcode: str = ""          # regex on the opcode
    category: str = ""        # regex on the op table's category
    in_loop: bool | None = None   # True: ops run more often than once per step
    fraction: float = 1.0     # the part of the selected ops' time that is waste
    compiles: str = ""        # a program name: the share is its compile time per step


# A fusion that holds the LM head's dot and the softmax's max/exp is named after its root
# (reduce_max): the matmul category keeps it out; its softmax part is not separable.
SOFTMAX = dict(module=GEN, op_name=r"/while/body/(reduce_max|reduce_sum|div|exp|sub)$",
               in_loop=True, category=r"^(?!matmul)")
RESTACK = dict(module=GEN, in_loop=True,
               op_name=r"/while/body/(stack|decoder_block_\d+/attention/(slice|stack|"
                       r"dynamic_update_slice))$|^$")
RESTACK_LINE = (KH + "gemma_causal_lm.py:204,212; " + KH + "gemma_attention.py:296-304")
PREFILL = dict(module=GEN, op_name=r"^jit\(compiled_generate_function\)/(?!while)", in_loop=False)

WASTES = [
    Waste("kh-gemma-v256k-s32", "softmax-argmax", "(a) softmax (max, exp, sum, divide) over the "
          "256000 logits, only argmaxed", "keras_hub/src/samplers/sampler.py:139", "no-softmax",
          **SOFTMAX),
    Waste("kh-gemma-v256k-s32", "cache-restack", "(b) stacked cache sliced/re-stacked per token "
          "(32-token cache)", RESTACK_LINE, "cache-in-place", shape=r",32,", **RESTACK),
    Waste("kh-gemma-v256k-s32", "prefill-padded", "(f) prefill over all 32 positions, 16 are "
          "prompt", KH + "gemma_causal_lm.py:227", "prefill-prompt-only", fraction=0.5, **PREFILL),
    Waste("kh-gemma-v256k-s32", "weight-relayout-in-loop", "(d) the query and output dense "
          "kernels ([4,32,128] / [4,128,32]) copied into [128,128] on every iteration "
          "(compiler-inserted, loop-invariant; below 3%: no what-if)",
          KH + "gemma_attention.py:292,327", module=GEN, op_name="^$",
          shape=r"^f32\[128,128\]", in_loop=True),
    Waste("kh-gemma-v256k-s32", "transposed-head (not waste)", "LM head's transpose of the "
          "embedding fused into the dot", "keras/src/layers/core/reversible_embedding.py:131",
          "head-no-transpose", module=GEN, op_name=r"while/body/token_embedding/dot_general$"),
    Waste("kh-gemma-v32k-s1024-p768", "softmax-argmax", "(a) softmax over 32000 logits x4, only "
          "argmaxed (its max/exp fused into the LM head's ynn_fusion.1: the op table holds only "
          "the sum and divide)", "keras_hub/src/samplers/sampler.py:139", "no-softmax", **SOFTMAX),
    Waste("kh-gemma-v32k-s1024-p768", "cache-restack", "(b) stacked [4,2,2,1024,1,32] cache "
          "sliced/re-stacked per token", RESTACK_LINE, "cache-in-place", shape=r",1024,",
          **RESTACK),
    Waste("kh-gemma-v32k-s1024-p768", "prefill-padded", "(f) prefill over all 1024 positions, "
          "768 are prompt (1 - 0.75 of its linear work, 1 - 0.56 of its attention)",
          KH + "gemma_causal_lm.py:227", "prefill-prompt-only", fraction=0.35, **PREFILL),
    Waste("kh-gemma-v32k-s1024-p992", "softmax-argmax", "(a) softmax over 32000 logits x4 "
          "(max/exp fused into the LM head's fusion, as in p768; no what-if)",
          "keras_hub/src/samplers/sampler.py:139", **SOFTMAX),
    Waste("kh-gemma-v32k-s1024-p992", "cache-restack", "(b) as above, 32 new tokens after a "
          "992-token prompt", RESTACK_LINE, "", shape=r",1024,", **RESTACK),
    Waste("kh-gemma-eager-v32k-s32", "loop-recompiled", "(e) eager generate(): the sampler's "
          "while_loop compiled on every call", "keras_hub/src/samplers/sampler.py:195",
          "loop-once", compiles="while"),
    Waste("kh-gemma-eager-v32k-s32", "softmax-argmax", "(a) softmax before argmax (inside the "
          "recompiled loop)", "keras_hub/src/samplers/sampler.py:139", "no-softmax",
          module="jit_while", op_name=r"/while/body/(reduce_max|reduce_sum|div|exp|sub)$"),
    Waste("kh-gemma-eager-v32k-s32", "per-call-transpose", "(d) eager transpose of the "
          "[32000,128] embedding for the prefill's LM head, every call",
          "keras/src/layers/core/reversible_embedding.py:131", module="^jit_transpose$"),
    Waste("kh-gemma-eager-v32k-s32", "head-discarded", "(c) eager prefill LM head over 32 "
          "positions, result discarded", KH + "gemma_causal_lm.py:227", module="^jit_matmul$"),
    Waste("tf-gpt2-jit-v50k-s32", "head-all-positions", "(c) prefill LM head over 16 positions, "
          "last kept", "transformers/generation/flax_utils.py:629; " + TF +
          "gpt2/modeling_flax_gpt2.py:720", "head-last-only", module="jit_generate",
          op_name=r"^jit\(generate\)/FlaxGPT2LMHeadModule/lm_head/dot_general$",
          fraction=15 / 16),
    Waste("tf-gpt2-jit-v50k-s32", "weight-transpose-in-loop", "(d) FlaxConv1D transposes its "
          "kernel on every iteration", TF + "gpt2/modeling_flax_gpt2.py:120",
          "conv1d-no-transpose", module="jit_generate", op_name=r"/while/body/.*/transpose$"),
    Waste("tf-gpt2-jit-v50k-s32", "init-cache (control)", "init_cache's module.init under jit "
          "(XLA removes it)", TF + "gpt2/modeling_flax_gpt2.py:451", "cache-once",
          module="^$"),
    Waste("tf-gemma-jit-v256k-s32", "head-all-positions", "(c) prefill LM head over 16 "
          "positions x 256000, last kept", "transformers/generation/flax_utils.py:629; " + TF +
          "gemma/modeling_flax_gemma.py:721", "head-last-only", module="jit_generate",
          op_name=r"^jit\(generate\)/FlaxGemmaForCausalLMModule/lm_head/dot_general$",
          fraction=15 / 16),
    Waste("tf-gemma-jit-v256k-s32", "init-cache (control)", "init_cache's module.init under jit "
          "(XLA removes it)", TF + "gemma/modeling_flax_gemma.py:477", "cache-once",
          module="^$"),
]
WASTES += [
    Waste("rg-v256k-bf16", "widen-per-call", "(d) XLA:CPU widens the bf16 [256000,256] embedding "
          "to f32 (and transposes it for the LM head) on every call, in the prefill and in the "
          "sampling program", "recurrentgemma/jax/modules.py:940 (decode), :926 (encode)",
          "f32-embedding", module=r"^jit__(sample_fn|prompt_processing_fn)$", op_name="^$",
          shape=r"^f32\[(256000,256|256,256000)\]", in_loop=False),
    Waste("rg-v256k-bf16", "softcap-argmax", "(a) logits soft cap tanh(x/30)*30 fused into the "
          "argmax (share: the whole argmax fusion, an upper bound)",
          "recurrentgemma/jax/griffin.py:176", "no-softcap", module=r"^jit__sample_fn$",
          op_name=r"/while/body/reduce$", in_loop=True),
]
for _m, _v, _vocab, _init, _head, _t in (
        ("gpt2", "50k", 50257, "gpt2/modeling_flax_gpt2.py:451", "gpt2/modeling_flax_gpt2.py:720",
         "gpt2/modeling_flax_gpt2.py:719"),
        ("gemma", "256k", 256000, "gemma/modeling_flax_gemma.py:477",
         "gemma/modeling_flax_gemma.py:721", "gemma/modeling_flax_gemma.py:720")):
    _cap = f"tf-{_m}-eager-v{_v}-s32"
    WASTES += [
        Waste(_cap, "per-call-init", "(d) eager generate(): init_cache runs module.init (random "
              "init of every parameter + a forward pass) on every call", TF + _init +
              "; transformers/generation/flax_utils.py:608", "cache-once",
              module=r"^jit__(normal|threefry.*|uniform|truncated_normal)$"),
        Waste(_cap, "loop-recompiled", "(e) eager generate(): greedy search's while_loop "
              "compiled on every call", "transformers/generation/flax_utils.py:657", "loop-once",
              compiles="while"),
        Waste(_cap, "head-all-positions", "(c) eager prefill LM head over 16 positions, last "
              "kept", "transformers/generation/flax_utils.py:629; " + TF + _head,
              "head-last-only", module="^jit_dot_general$", shape=rf"^f32\[16,{_vocab}\]",
              fraction=15 / 16),
        *([Waste(_cap, "weight-transpose", "(d) eager FlaxConv1D kernel transposes, every "
                 "layer, every call (init forward + prefill)", TF + "gpt2/modeling_flax_gpt2.py:120",
                 "conv1d-no-transpose", module="^jit_transpose$",
                 shape=r"^f32\[(512,128|128,512|128,384|128,128)\]")] if _m == "gpt2" else []),
        Waste(_cap, "per-call-transpose", "(d) eager .T of the tied embedding, twice per call "
              "(init forward + prefill)", TF + _t, module="^jit_transpose$",
              shape=rf"^f32\[128,{_vocab}\]"),
    ]


def select(rows: list[dict[str, str]], w: Waste, steps: int) -> list[dict[str, str]]:
    """The op-table rows that carry the waste."""
    out = []
    for r in rows:
        if w.module and not re.search(w.module, r["module"]):
            continue
        if w.op_name and not re.search(w.op_name, r["op_name"]):
            continue
        if w.shape and not re.search(w.shape, r["shape"]):
            continue
        if w.opcode and not re.search(w.opcode, r["opcode"]):
            continue
        if w.category and not re.search(w.category, r["category"]):
            continue
        if w.in_loop is not None and (int(r["occurrences"]) > steps) != w.in_loop:
            continue
        out.append(r)
    return out


def op_share(rows: list[dict[str, str]], w: Waste, steps: int) -> tuple[float, int]:
    """The selected ops' % of step (times the waste's fraction), and how many ops."""
    chosen = select(rows, w, steps)
    return sum(float(r["pct_of_step"]) for r in chosen) * w.fraction, len(chosen)


def compile_share(root: Path, capture: str, program: str) -> float:
    """A program's compile time per step, in % of the mean step (compiles.py's count)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compiles import count

    run = root / "runs" / capture
    stats = json.loads((run / "opstats.json").read_text())
    per = count(run)["by_program"].get(program, {"ms": 0.0})["ms"] / stats["num_steps"]
    return 100 * per * 1e3 / stats["step_time_us"]


def figure(root: Path, w: Waste) -> str:
    """The what-if cells: saving % [CI] on the CPU clock, then the wall clock, then tokens."""
    path = root / "whatif" / f"{w.capture}.json"
    if not w.variant or not path.exists():
        return "| | | |"
    entry = json.loads(path.read_text())["variants"].get(w.variant)
    if entry is None:
        return "| | | |"

    def cell(c: dict[str, float | list[float]]) -> str:
        lo, hi = c["ci95_pct"]  # type: ignore[misc]
        return f"{c['saving_pct']:.1f}% [{lo:.1f}, {hi:.1f}] ({c['saving_ms']:.1f} ms)"

    return (f"| {cell(entry['cpu'])}{earlier(root, w, path)} | {cell(entry['wall'])} | "
            f"{'equal' if entry['tokens_equal'] else 'DIFFER'} |")


def earlier(root: Path, w: Waste, latest: Path) -> str:
    """The same what-if's CPU-clock saving in earlier runs kept beside OUTROOT/whatif
    (OUTROOT/whatif-*/), as "; earlier runs: 6.2% (12 rounds), ...": the spread between runs
    under a changing load is wider than one run's CI."""
    seen = {latest.read_bytes()}
    found = []
    for path in sorted(root.glob(f"whatif-*/{w.capture}.json")):
        if path.read_bytes() in seen:
            continue
        seen.add(path.read_bytes())
        report = json.loads(path.read_text())
        entry = report["variants"].get(w.variant)
        if entry and "cpu" in entry:
            found.append(f"{entry['cpu']['saving_pct']:.1f}% ({report['rounds']} rounds)")
    return f"; earlier runs: {', '.join(found)}" if found else ""


def table(root: Path) -> list[str]:
    """The table's markdown lines."""
    out = ["| capture | waste | ops (op table) | line to edit | % of step (op table) | what-if "
          "variant | saved, CPU clock [95% CI] | saved, wall clock [95% CI] | tokens |",
           "|---|---|---|---|---|---|---|---|---|"]
    entries: list[Waste] = []
    for c in dict.fromkeys(w.capture for w in WASTES):
        entries += [w for w in WASTES if w.capture == c]
        entries.append(Waste(c, "a/a", "the baseline timed against itself (noise floor)", "-",
                             "a/a", module="^$"))
    for w in entries:
        csv_path = root / "stats" / f"{w.capture}.csv"
        if not csv_path.exists() or (w.key == "a/a" and "| |" in figure(root, w)):
            continue
        steps = json.loads((root / "runs" / w.capture / "opstats.json").read_text())["num_steps"]
        if w.compiles:
            share, ops = compile_share(root, w.capture, w.compiles), f"compiles of {w.compiles}"
        else:
            with csv_path.open() as f:
                share, n = op_share(list(csv.DictReader(f)), w, steps)
            ops = f"{n} ops" + (f" x {w.fraction:.2f}" if w.fraction != 1 else "")
        out.append(f"| {w.capture} | {w.key}: {w.what} | {ops} | {w.line} | {share:.1f} | "
                   f"{w.variant or '-'} {figure(root, w)}")
    return out


BEGIN, END = "<!-- wastes.py table -->", "<!-- end of wastes.py table -->"


def main() -> None:
    """Command line: see the module docstring."""
    root = Path(sys.argv[1])
    lines = table(root)
    if len(sys.argv) > 3 and sys.argv[2] == "--into":
        doc = Path(sys.argv[3])
        text = doc.read_text()
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        doc.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
