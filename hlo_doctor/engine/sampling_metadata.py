"""Per-step sampling parameters, passed to the jitted ``sample`` as a pytree.

``do_sampling`` and ``logprobs`` are static meta fields: each combination is its own program, which
is why the precompile menu enumerates them. The array fields are ``None`` for an all-greedy batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import numpy as np

# temperature below this counts as greedy inside the sampling branch.
SAMPLING_EPS = 1e-5


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["temperature", "top_k", "top_p"],
    meta_fields=["do_sampling", "logprobs"],
)
@dataclass
class TPUSupportedSamplingMetadata:
    """Sampling parameters of one padded batch (arrays of shape ``[padded_num_reqs]`` or ``None``)."""

    temperature: jax.Array | None = None
    top_k: jax.Array | None = None
    top_p: jax.Array | None = None
    do_sampling: bool = False
    logprobs: bool = False

    @classmethod
    def from_params(
        cls,
        padded_num_reqs: int,
        *,
        do_sampling: bool,
        logprobs: bool,
        temperature: float = 0.7,
        top_k: int = 20,
        top_p: float = 0.8,
    ) -> TPUSupportedSamplingMetadata:
        """Metadata for a batch where every request shares the same parameters."""
        if not do_sampling:
            return cls(do_sampling=False, logprobs=logprobs)
        return cls(
            temperature=jax.device_put(np.full((padded_num_reqs,), temperature, dtype=np.float32)),
            top_k=jax.device_put(np.full((padded_num_reqs,), top_k, dtype=np.int32)),
            top_p=jax.device_put(np.full((padded_num_reqs,), top_p, dtype=np.float32)),
            do_sampling=True,
            logprobs=logprobs,
        )
