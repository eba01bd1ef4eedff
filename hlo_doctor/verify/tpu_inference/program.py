"""Program level of ``verify --target``: the real ``sample()`` of two tpu-inference trees, side by side.

Each tree's ``sample()`` is imported (:mod:`~hlo_doctor.verify.tpu_inference.tpu_shim`), fed what the tree's own
runner feeds it (float32 when ``_sample_from_logits`` widens eagerly, else the model's bf16) and
warmed with the dtype the tree's own precompile menu is keyed on, as at an engine start. Measured
rounds run interleaved (AB BA AB...), each starting cold (the jitted ``sample`` cache cleared and
the menu's entry built again), with the backend compiles inside counted. The treatment's compiled
greedy program is read as HLO and checked by hlo-doctor's rules; greedy tokens are compared on
random logits, explicit ties, ties made by bf16 rounding, NaN and -inf rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hlo_doctor.verify.compiles import compile_window
from hlo_doctor.verify.rounds import interleaved
from hlo_doctor.verify.settings import ProgressFn
from hlo_doctor.verify.tpu_inference.sampler_tree import (
    JittedSample,
    SampleOutput,
    SourceFacts,
    lower_error,
    mesh,
    metadata,
    source_facts,
    static_argnames,
)
from hlo_doctor.verify.tpu_inference.tpu_shim import import_sampler

if TYPE_CHECKING:
    import jax

PROGRAM_RULES = ("HD001", "HD002", "HD004")


@dataclass(frozen=True, slots=True)
class SamplerSide:
    """One tree at program level: where it is, what its source says, whether its ``sample()`` lowers."""

    label: str
    package_dir: str
    release: str
    facts: SourceFacts
    stood_in: tuple[str, ...]
    lower_error: str | None
    options_dropped: str | None = None
    """Why the release's compiler options were left out (``--without-compiler-options``), else None."""

    def to_dict(self) -> dict[str, Any]:
        f = self.facts
        return {"label": self.label, "package_dir": self.package_dir, "release": self.release,
                "runner_dtype": f.runner_dtype, "runner_widens": f.runner_widens, "runner_site": f.runner_site,
                "menu_dtype": f.menu_dtype, "menu_site": f.menu_site, "stood_in": list(self.stood_in),
                "lower_error": self.lower_error, "options_dropped": self.options_dropped}


@dataclass(frozen=True, slots=True)
class ProgramRound:
    """One measured round of one tree: ``steps`` calls of its runner's sampling step."""

    label: str
    first_step_ms: float
    step_times_ms: tuple[float, ...]
    throughput_rows_s: float
    compiles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HloFacts:
    """What a compiled greedy ``sample()`` does, read from its HLO text."""

    aliasing_copy: bool
    argmax_reads: str
    logits_output: str | None
    findings: tuple[str, ...]
    """``HD002 copy f32[16,2048]``... from the rules on the compiled module."""

    def to_dict(self) -> dict[str, Any]:
        return {"aliasing_copy": self.aliasing_copy, "argmax_reads": self.argmax_reads,
                "logits_output": self.logits_output, "findings": list(self.findings)}


class Sampler:
    """A tree's ``sample()`` driven as its runner drives it."""

    def __init__(self, side: SamplerSide, sample: JittedSample, metadata_module: ModuleType, logprobs: bool) -> None:
        import jax

        self.side = side
        self.sample = sample
        self.mesh = mesh()
        self.meta = metadata(metadata_module, logprobs)
        self.key = jax.random.key(0)

    def step(self, logits_bf16: jax.Array) -> SampleOutput:
        """One sampling step as the tree's runner takes it: its widening (if any), then ``sample()``."""
        import jax.numpy as jnp

        x = logits_bf16.astype(jnp.float32) if self.side.facts.runner_widens else logits_bf16
        return self.sample(self.key, self.mesh, x, self.meta)

    def warm_menu(self, shape: tuple[int, ...]) -> None:
        """Cold start: the jitted cache cleared, then the precompile menu's entry built for ``shape``."""
        import jax
        import jax.numpy as jnp

        self.sample.clear_cache()
        menu = jnp.float32 if self.side.facts.menu_dtype == "float32" else jnp.bfloat16
        jax.block_until_ready(self.sample(self.key, self.mesh, jnp.zeros(shape, menu), self.meta))
        if self.side.facts.runner_widens:
            # The runner's eager widening is its own program, compiled by any earlier step.
            jax.block_until_ready(jnp.zeros(shape, jnp.bfloat16).astype(jnp.float32))

    def compiled_text(self, logits_bf16: jax.Array) -> str:
        """The optimized HLO of the program one step runs."""
        import jax.numpy as jnp

        x = logits_bf16.astype(jnp.float32) if self.side.facts.runner_widens else logits_bf16
        return str(self.sample.lower(self.key, self.mesh, x, self.meta).compile().as_text())


def load_side(label: str, package_dir: Path, release: str, logprobs: bool, shape: tuple[int, int], *,
              without_compiler_options: bool = False) -> tuple[SamplerSide, Sampler | None]:
    """Import ``package_dir``'s sampler, read its source facts, and try lowering it here.

    ``without_compiler_options``: when the release's ``jax.jit`` carries compiler options this backend
    rejects (TPU flags), jit the same function body with the same static arguments and no options
    (the program is the same; the side's ``lower_error`` then says so after ``jit without options:``).
    """
    import jax
    import jax.numpy as jnp

    facts = source_facts(package_dir / "runner" / "tpu_runner.py", package_dir / "runner" / "compilation_manager.py")
    with import_sampler(package_dir) as imported:
        sample = imported.sampling.sample
        meta_module = imported.metadata
        stood_in = imported.stood_in
        dtype = jnp.float32 if facts.runner_dtype == "float32" else jnp.bfloat16
        probe = Sampler(SamplerSide(label, str(package_dir), release, facts, stood_in, None), sample, meta_module,
                         logprobs)
        args = (probe.key, probe.mesh, jnp.zeros(shape, dtype), probe.meta)
        error = lower_error(sample, args)
        dropped = None
        if error is not None and without_compiler_options and "compile option" in error:
            bare = cast(JittedSample, jax.jit(sample.__wrapped__, static_argnames=static_argnames(sample)))
            if lower_error(bare, args) is None:
                probe.sample, dropped, error = bare, error, None
    side = SamplerSide(label, str(package_dir), release, facts, stood_in, error, dropped)
    if error is not None:
        return side, None
    probe.side = side
    return side, probe


def test_logits(batch: int, vocab: int, seed: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """bf16-representable float32 logits ``[batch, vocab]`` with the hard rows first, and their names."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, vocab)).astype(np.float32) * 4
    cases: list[str] = []

    def row(i: int, name: str) -> bool:
        if i < batch:
            cases.append(name)
            return True
        return False

    if row(0, "explicit tie"):
        x[0, [5, vocab // 3, vocab - 1]] = 30.0
    if row(1, "all equal"):
        x[1, :] = 1.0
    if row(2, "NaN"):
        x[2, 10] = np.nan
    if row(3, "-inf row"):
        x[3, :] = -np.inf
        x[3, vocab // 2] = -3.0
    if row(4, "all -inf"):
        x[4, :] = -np.inf
    if row(5, "tie by bf16 rounding"):
        # Distinct in float32, equal once rounded to bf16: a tie only the model dtype sees.
        x[5, 100 % vocab], x[5, 200 % vocab] = 20.0, 20.0 + 2.0**-12
    bf16 = x.astype(ml_dtypes.bfloat16)
    return bf16, tuple(cases)


def hlo_facts(text: str, batch: int, vocab: int) -> HloFacts:
    """Read :class:`HloFacts` from compiled HLO text; run the HLO rules on the module."""
    from hlo_doctor.hlo import parse_module
    from hlo_doctor.hlo.analysis import argmax_reads
    from hlo_doctor.lint import Context, diagnose, load_rulebook

    module = parse_module(text)
    entry = module.entry_instructions()
    aliasing = any(i.opcode == "copy" and module.is_live_out(i)
                   and all(o.opcode == "parameter" for o in module.operands_of(i)) for i in entry)
    root = module.entry.root
    outputs = module.operands_of(root) if root.opcode == "tuple" else [root]
    logits_out = [o for o in outputs if o.shape.dims == (batch, vocab)]
    ctx = Context(modules=(module,), kind="hlo", origin="sample()")
    reads = argmax_reads(ctx)
    diagnosis = diagnose(ctx, load_rulebook(), select=PROGRAM_RULES)
    findings = tuple(f"{f.code} {f.op} {f.shape}" for f in diagnosis.findings)
    return HloFacts(aliasing, ", ".join(r.split(": ", 1)[1] for r in reads) or "no argmax",
                    logits_out[0].shape.text(with_layout=False) if logits_out else None, findings)


def measure_rounds(base: Sampler, treat: Sampler, logits: jax.Array, rounds: int, steps: int,
                   progress: ProgressFn) -> dict[str, list[ProgramRound]]:
    """Interleaved cold rounds (AB BA AB...) of ``steps`` sampling steps each."""
    import jax

    out: dict[str, list[ProgramRound]] = {"baseline": [], "treatment": []}
    pair = {"baseline": base, "treatment": treat}
    for done, label in enumerate(interleaved(rounds), start=1):
        s = pair[label]
        s.warm_menu(tuple(logits.shape))
        times: list[float] = []
        # Backend compiles with JAX's cache-miss explanation: sample() reports none of its own.
        with compile_window(explain=True) as window:
            start = time.perf_counter()
            for _ in range(steps):
                t0 = time.perf_counter()
                jax.block_until_ready(s.step(logits))
                times.append((time.perf_counter() - t0) * 1000)
            total = time.perf_counter() - start
        out[label].append(ProgramRound(label, times[0], tuple(times), logits.shape[0] * steps / total,
                                       window.reasons))
        progress("rounds", done, 2 * rounds)
    return out
