"""The machinery every file fix shares: values, the parsed file, name flow, ``jax.jit`` sites, the
transaction on one file, which fix applies to a finding, and ``apply-fix --from RUN``."""
