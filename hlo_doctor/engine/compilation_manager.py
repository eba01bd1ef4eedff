"""The precompiled menu: every program of a step, for every num_reqs bucket, built during warm-up.

Each entry is lowered and compiled ahead of time, then called once so that the jit cache holds it.
The sampler's entries are built from float32 dummy logits: the menu is keyed on the logits dtype, so a
runner that hands ``sample`` logits of another dtype misses it and compiles while serving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .sampling import compute_and_gather_logprobs, sample
from .sampling_metadata import TPUSupportedSamplingMetadata

if TYPE_CHECKING:
    from .runner import ModelRunner


@dataclass(frozen=True, slots=True)
class MenuEntry:
    """One precompiled program: its name, the padding/static values it was built for, compile time."""

    name: str
    key: tuple[tuple[str, Any], ...]
    compile_s: float


class CompilationManager:
    """Builds the precompiled menu for a :class:`ModelRunner`."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.menu: list[MenuEntry] = []

    def _create_dummy_tensor(self, shape: tuple[int, ...], dtype: Any, sharding: Any = None) -> jax.Array:
        """A ones tensor standing in for a runtime input of this shape, dtype and placement."""
        tensor = jnp.ones(shape, dtype=dtype)
        if sharding is not None:
            tensor = jax.device_put(tensor, sharding)
        return tensor

    def _run_compilation(
        self, name: str, fn: Callable[..., Any], *args: Any, call_kwargs: dict[str, Any] | None = None, **key: Any
    ) -> None:
        """AOT lower + compile ``fn`` for these arguments, then warm-call it so the jit cache holds it."""
        call_kwargs = call_kwargs or {}
        start = time.perf_counter()
        fn.lower(*args, **call_kwargs).compile()  # type: ignore[attr-defined]
        self._record(MenuEntry(name, tuple(sorted(key.items())), time.perf_counter() - start))
        jax.block_until_ready(fn(*args, **call_kwargs))

    def capture_model(self) -> None:
        """Precompile everything a serving step runs, in the order a step runs it."""
        self._precompile_backbone()
        self._precompile_compute_logits()
        self._precompile_logits_cast()
        self._precompile_sampling_rng()
        self._precompile_sampling()
        self._precompile_gather_logprobs()

    def _precompile_backbone(self) -> None:
        runner = self.runner
        assert runner.state is not None
        dims = runner.dims
        for num_reqs in runner.num_reqs_paddings:
            cache_shape = (dims.num_layers, num_reqs, runner.max_model_len, dims.num_kv_heads, dims.head_dim)
            kv_caches = (
                self._create_dummy_tensor(cache_shape, runner.dtype),
                self._create_dummy_tensor(cache_shape, runner.dtype),
            )
            input_ids = self._create_dummy_tensor((num_reqs, runner.config.prompt_len), jnp.int32)
            self._run_compilation("prefill", runner.prefill_fn, runner.state, kv_caches, input_ids, num_reqs=num_reqs)
            kv_caches = (
                self._create_dummy_tensor(cache_shape, runner.dtype),
                self._create_dummy_tensor(cache_shape, runner.dtype),
            )
            input_ids = self._create_dummy_tensor((num_reqs,), jnp.int32)
            position = jax.device_put(np.int32(0))
            self._run_compilation("decode", runner.model_fn, runner.state, kv_caches, input_ids, position,
                                  num_reqs=num_reqs)

    def _precompile_compute_logits(self) -> None:
        runner = self.runner
        for num_reqs in runner.num_reqs_paddings:
            hidden_states = self._create_dummy_tensor((num_reqs, runner.dims.hidden_size), runner.dtype)
            self._run_compilation("compute_logits", runner.compute_logits_fn, runner.state, hidden_states,
                                  num_reqs=num_reqs)

    def _precompile_logits_cast(self) -> None:
        # The runner's eager widening of the model's logits is a program of its own. Warm it per
        # bucket so that the serving window of an unmodified engine compiles nothing.
        runner = self.runner
        for num_reqs in runner.num_reqs_paddings:
            model_logits = self._create_dummy_tensor((num_reqs, runner.vocab_size), runner.dtype)
            start = time.perf_counter()
            jax.block_until_ready(jax.lax.convert_element_type(model_logits, np.float32))
            self._record(MenuEntry("logits_cast", (("num_reqs", num_reqs),), time.perf_counter() - start))

    def _precompile_sampling_rng(self) -> None:
        # The sampling branch splits the runner's key every step (an eager program); warm it without
        # consuming the runner's key.
        start = time.perf_counter()
        new_key, step_key = jax.random.split(self.runner.rng_params_for_sampling)
        jax.block_until_ready((new_key, step_key))
        self._record(MenuEntry("rng_split", (), time.perf_counter() - start))

    def _precompile_sampling(self) -> None:
        runner = self.runner
        hsize = runner.vocab_size
        for num_reqs in runner.num_reqs_paddings:
            logits_sharding = None
            logits = self._create_dummy_tensor((num_reqs, hsize), jnp.float32, logits_sharding)
            for do_sampling in (True, False):
                for logprobs in (True, False):
                    if do_sampling:
                        temperature = jax.device_put(np.full((num_reqs,), 0.7, dtype=np.float32))
                        top_k = jax.device_put(np.full((num_reqs,), 20, dtype=np.int32))
                        top_p = jax.device_put(np.full((num_reqs,), 0.8, dtype=np.float32))
                    else:
                        temperature = None
                        top_k = None
                        top_p = None
                    sampling_metadata = TPUSupportedSamplingMetadata(
                        temperature=temperature,
                        top_k=top_k,
                        top_p=top_p,
                        do_sampling=do_sampling,
                        logprobs=logprobs,
                    )
                    self._run_compilation(
                        "sample",
                        sample,
                        runner.rng_params_for_sampling,
                        runner.mesh,
                        logits,
                        sampling_metadata,
                        num_reqs=num_reqs,
                        do_sampling=do_sampling,
                        logprobs=logprobs,
                    )

    def _precompile_gather_logprobs(self) -> None:
        runner = self.runner
        hsize = runner.vocab_size
        for num_reqs in runner.num_reqs_paddings:
            logits = self._create_dummy_tensor((num_reqs, hsize), jnp.float32)
            token_ids = self._create_dummy_tensor((num_reqs,), jnp.int32)
            self._run_compilation(
                "gather_logprobs",
                compute_and_gather_logprobs,
                logits,
                token_ids,
                runner.max_logprobs,
                num_reqs=num_reqs,
            )

    # -- progress -----------------------------------------------------------------------------------
    # Warm-up takes a minute or more at serving sizes. Kept below the menu's code so that the source
    # lines a trace records for the menu's programs stay where they were.

    _progress: Progress | None = None

    @property
    def menu_size(self) -> int:
        """How many entries :meth:`capture_model` builds (the ``total`` that progress reports)."""
        return _PROGRAMS_PER_BUCKET * len(self.runner.num_reqs_paddings) + 1

    def capture_reporting(self, progress: Progress | None) -> None:
        """:meth:`capture_model`, with ``progress("precompile", done, menu_size)`` before the first
        program and after each one."""
        self._progress = progress
        if progress is not None:
            progress("precompile", 0, self.menu_size)
        try:
            self.capture_model()
        finally:
            self._progress = None

    def _record(self, entry: MenuEntry) -> None:
        self.menu.append(entry)
        if self._progress is not None:
            self._progress("precompile", len(self.menu), self.menu_size)


Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, as the driver's."""

_PROGRAMS_PER_BUCKET = 9
"""Menu entries per num_reqs bucket: prefill, decode, compute_logits, logits_cast, sample (with and
without sampling, with and without logprobs: 4), gather_logprobs. The rng split is built once."""
