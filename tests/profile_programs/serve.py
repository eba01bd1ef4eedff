"""A serving process for the attach test: starts the profiler server and runs decode steps forever.

Usage: python serve.py PORT. Prints 'ready' once the server is up and a step has run.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp


@jax.jit
def decode(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x.T).sum(axis=0)


def main() -> None:
    port = int(sys.argv[1])
    jax.profiler.start_server(port)
    x = jnp.ones((64, 64), jnp.float32)
    jax.block_until_ready(decode(x))
    print("ready", flush=True)
    deadline = time.monotonic() + 120  # never outlive a test run that forgot us
    while time.monotonic() < deadline:
        jax.block_until_ready(decode(x))
        time.sleep(0.002)


if __name__ == "__main__":
    main()
