"""Remedies by library: a model library's own setting (or, where it has none, the code to change)
that removes what a finding flags, when the finding's line is inside that library.

A finding whose first frame outside the frameworks (:func:`hlo_doctor.hlo.frames.editable_frame`)
is in keras-hub, transformers' Flax models or recurrentgemma points at a line of an installed
package: editing it is rarely what a person does. :data:`LIBRARY_REMEDIES` says, per rule code and
module path, what to do instead: a setting or API of that library (``kind="setting"``), or the code
to override where the library offers none (``kind="code"``). Each entry names the what-if run that
checked it (``benchmarks/field/``: the library's loop with that change against the loop as
shipped, interleaved in one process) and the saving it measured (docs/field.md, "Remedies by
library"). :func:`with_library_remedy` attaches the entry's text to a finding
(:attr:`hlo_doctor.core.model.Finding.remedy`); every view shows it.

Matching is by the module the line's file is imported as (``keras_hub.src.samplers.sampler``,
from the part after ``site-packages/``; for a path from another machine, by consecutive folder
names), the longest prefix winning; an entry with ``functions`` also needs the frame's function to
end with one of them (``init_cache``, ``FlaxConv1D.__call__``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from hlo_doctor.core.model import Finding
from hlo_doctor.hlo.frames import Frame, editable_frame, module_of

__all__ = ["LIBRARY_REMEDIES", "LibraryRemedy", "library_remedy", "with_library_remedy"]


@dataclass(frozen=True, slots=True)
class LibraryRemedy:
    """One library's remedy for one kind of finding."""

    library: str
    """The library as people name it (``keras-hub``)."""
    module: str
    """Dotted module prefix the finding's line must be in (``keras_hub.src.samplers``)."""
    rules: tuple[str, ...]
    """Rule codes it answers."""
    kind: Literal["setting", "code"]
    """``setting``: the library's own option or API; ``code``: no option does it, the code to change."""
    remedy: str
    """What to do, in one or two sentences."""
    measured: str
    """The what-if that checked it and what it saved (CPU clock, share of the step as shipped)."""
    functions: tuple[str, ...] = ()
    """When set, the frame's function must end with one of them."""

    def text(self) -> str:
        """``keras-hub (setting): ... [what-if: ...]``: the line every view shows."""
        return f"{self.library} ({self.kind}): {self.remedy} [what-if: {self.measured}]"


LIBRARY_REMEDIES: tuple[LibraryRemedy, ...] = (
    LibraryRemedy(
        "keras-hub", "keras_hub.src.samplers", ("HD005",), "setting",
        "compile the CausalLM without run_eagerly (causal_lm.compile(sampler=..., run_eagerly=False), the "
        "default): keras-hub then jits generate() once and the sampler's while_loop is not traced and "
        "compiled again on every call",
        "jit-compile vs run_eagerly=True, keras-hub 0.32 Gemma, vocab 32000, 32-token cache: 99.2% [92.7, 106.7]"),
    LibraryRemedy(
        "keras-hub", "keras_hub.src.samplers", ("HD011",), "code",
        "no sampler option skips it (GreedySampler inherits Sampler.compute_probabilities: softmax(logits / "
        "temperature)); pass compile(sampler=S()) with S a GreedySampler subclass whose compute_probabilities "
        "returns ops.cast(logits, \"float32\")",
        "no-softmax, keras-hub 0.32 Gemma: 3.8% [2.3, 6.6] (vocab 256000), 7.2% [2.4, 8.9] (vocab 32000, batch 4)"),
    LibraryRemedy(
        "keras-hub", "keras_hub.src.models", ("HD013",), "code",
        "no setting: call_with_cache slices each layer's cache out of the stacked cache and re-stacks all of "
        "them on every token; override call_with_cache to write each layer's new key and value with one "
        "ops.slice_update into the stacked cache",
        "cache-in-place, keras-hub 0.32 Gemma, 1,024-token cache, batch 4: 15.1% [11.8, 18.0]; "
        "nothing measurable with a 32-token cache"),
    LibraryRemedy(
        "keras-hub", "keras_hub.src.models", ("HD022",), "code",
        "no setting: generate() pads every prompt to max_length and _build_cache prefills all of it; override "
        "_build_cache to run call_with_cache on token_ids[:, :P] (P static: one compile per prompt length, or "
        "prompts bucketed) into the zero cache",
        "prefill-prompt-only, keras-hub 0.32 Gemma, 1,024-token cache, batch 4: 10.7% [3.7, 14.1] (prompt 768), "
        "9.6% [3.6, 14.1] (prompt 64)"),
    LibraryRemedy(
        "transformers", "transformers.generation", ("HD005",), "setting",
        "call generate() inside jax.jit, the parameters as an argument (jax.jit(lambda ids, p: "
        "model.generate(ids, params=p, max_length=N).sequences)): greedy search's while_loop, built from "
        "fresh closures on every eager call, is then compiled once",
        "jit-generate vs eager generate(), transformers 4.57.6 Flax: 97.9% [95.0, 107.1] (GPT-2), 94.3% "
        "[83.3, 98.2] (Gemma, vocab 256000)"),
    LibraryRemedy(
        "transformers", "transformers.models", ("HD014",), "setting",
        "call generate() inside jax.jit (parameters as an argument): init_cache's module.init (a random init "
        "of every parameter and a forward pass, kept only for its zero cache) is then traced into the program "
        "and removed by XLA as dead code; or build the cache once (init_cache memoised)",
        "jit-generate vs eager generate(), transformers 4.57.6 Flax: 97.9% [95.0, 107.1] (GPT-2), 94.3% "
        "[83.3, 98.2] (Gemma); cache-once "
        "alone: 11.9% [5.4, 17.1] (GPT-2), 39.1% [36.9, 43.1] (Gemma, vocab 256000)",
        functions=("init_cache", "prepare_inputs_for_generation")),
    LibraryRemedy(
        "transformers", "transformers.models.gpt2", ("HD014",), "code",
        "no setting: FlaxConv1D transposes its [out, in] kernel on every call (inside the decode loop: every "
        "iteration); contract the stored kernel on its second axis (lax.dot_general) in a FlaxConv1D "
        "override, or store the kernels transposed once",
        "conv1d-no-transpose, transformers 4.57.6 Flax GPT-2 under jax.jit: 19.2% [17.3, 21.7]",
        functions=("FlaxConv1D.__call__",)),
    LibraryRemedy(
        "transformers", "transformers.models", ("HD012",), "code",
        "no setting in the Flax models (the PyTorch models' logits_to_keep has no Flax twin): greedy search "
        "keeps logits[:, -1] of the prefill; in a subclass of the *LMHeadModule apply the LM head to "
        "hidden_states[:, -1:] only",
        "head-last-only, transformers 4.57.6 Flax under jax.jit: 8.2% [3.7, 16.0] (GPT-2), 13.1% [10.4, 14.2] "
        "(Gemma, vocab 256000)"),
    LibraryRemedy(
        "recurrentgemma", "recurrentgemma.jax.modules", ("HD014",), "setting",
        "on XLA:CPU (no bf16 dot: the bf16 embedding is widened on every call), build the model with "
        "Griffin(config, dtype=jnp.float32, param_dtype=jnp.float32) and pass Sampler(params=...) the "
        "parameters cast to float32 once; on GPU and TPU keep bf16",
        "f32-model vs bf16 as shipped, recurrentgemma 1.0.1, vocab 256000: 49.5% [43.2, 63.4]",
        functions=("Embedder.decode", "Embedder.encode")),
    LibraryRemedy(
        "recurrentgemma", "recurrentgemma", ("HD011",), "setting",
        "GriffinConfig(logits_soft_cap=None): the cap tanh(x / c) * c is monotone and the greedy sampler only "
        "argmaxes; it changes the logits the model returns, so keep it where they are sampled with a "
        "temperature or read",
        "no-softcap, recurrentgemma 1.0.1 bf16, vocab 256000: 7.1% [3.7, 9.7]"),
)


def _in_module(file: str, prefix: str) -> bool:
    module = module_of(file)
    if module == prefix or module.startswith(prefix + "."):
        return True
    # A path from another machine whose install folder is not recognised: consecutive folder names.
    p = PurePosixPath(file.replace("\\", "/"))
    parts = [*p.parent.parts, p.stem]
    want = prefix.split(".")
    return any(parts[i:i + len(want)] == want for i in range(len(parts) - len(want) + 1))


def library_remedy(code: str, stack: tuple[tuple[str, int, str], ...] | list[Frame]) -> LibraryRemedy | None:
    """The remedy for a finding of rule ``code`` whose stack is ``stack`` (innermost first), or None
    when its first frame outside the frameworks is in no listed library (or no entry answers the rule)."""
    frame = editable_frame([Frame(*f) for f in stack])
    if frame is None:
        return None
    fits = [r for r in LIBRARY_REMEDIES
            if code in r.rules and _in_module(frame.file, r.module)
            and (not r.functions or frame.function.endswith(r.functions))]
    return max(fits, key=lambda r: (len(r.module), bool(r.functions)), default=None)


def with_library_remedy(finding: Finding) -> Finding:
    """``finding`` with :attr:`Finding.remedy` set from :func:`library_remedy` (unchanged without one);
    a finding without a stack (a program's compiles) is looked up by its source line alone."""
    if finding.remedy:
        return finding
    stack = finding.stack
    if not stack and finding.source:  # a finding on a program (a compile) has its line, not a stack
        path, _, line = finding.source.rpartition(":")
        stack = ((path, int(line), ""),) if line.isdigit() and path else ((finding.source, 0, ""),)
    remedy = library_remedy(finding.code, stack) if stack else None
    return dataclasses.replace(finding, remedy=remedy.text()) if remedy is not None else finding
