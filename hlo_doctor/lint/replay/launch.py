"""Where a replay runs: which captures' backends this machine can replay, and its child process.

A capture of XLA:CPU replays on this machine's CPU; a capture of XLA:TPU (XLA:GPU) replays on this
machine's TPU (GPU), where it has one (jax's runtime for it, ``libtpu`` or a ``jax-cuda*-plugin``,
installed) of the capture's own chip (the child compares the device kinds). Either way the capture's jax and jaxlib must be this machine's
(:func:`~hlo_doctor.lint.whatif.refusal`). The child is started with ``JAX_PLATFORMS`` set to the
capture's platform, so that it never picks another device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

from hlo_doctor.lint.context import Context
from hlo_doctor.lint.whatif import refusal

BACKENDS = ("cpu", "tpu", "gpu")
"""The captures' backends a replay runs for."""
_RUNTIMES = {"tpu": ("libtpu", "libtpu-nightly"), "gpu": ("jax-cuda12-plugin", "jax-cuda13-plugin")}
"""Distributions that bring a backend's runtime (checked from their metadata, without importing jax)."""
_PLATFORMS = {"gpu": ("cuda",)}
"""jax's own platform names for a capture's backend, where they differ (``JAX_PLATFORMS``, the
backends a process holds): an NVIDIA GPU is ``cuda``."""


def backend_refusal(ctx: Context) -> str:
    """Why the capture's programs cannot run on this machine ("" when they may)."""
    why = refusal(ctx, BACKENDS)
    if why:
        return why
    runtimes = _RUNTIMES.get(ctx.backend, ())
    if runtimes and not any(_installed(name) for name in runtimes):
        return (f"the capture is from XLA:{ctx.backend.upper()} and this machine has no "
                f"{ctx.backend.upper()} runtime ({runtimes[0]} is not installed)")
    return ""


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def run_child(folder: Path, timeout_s: float, platform: str = "cpu", extra_env: dict[str, str] | None = None,
              out_name: str = "out.json") -> dict[str, object]:
    """Run :mod:`.child` on ``folder``'s spec on ``platform``; its document, or ``ok: false`` and why.
    Where this process already holds an accelerator of that platform (``doctor`` on a TPU: one
    process owns the chip), the child's work runs here instead."""
    if platform != "cpu" and _held_here(platform):
        return _run_here(folder, timeout_s)
    env = dict(os.environ, JAX_PLATFORMS=",".join(_PLATFORMS.get(platform, (platform,))), TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"))
    env = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}  # the allocator's state is chosen here
    env.update(extra_env or {})
    out = folder / out_name
    try:
        done = subprocess.run([sys.executable, "-m", "hlo_doctor.lint.replay.child", str(folder / "spec.json"), str(out)],
                              env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "reason": f"it ran past {timeout_s:.0f} s and was stopped"}
    if not out.exists():
        # An abort inside XLA (a CHECK) ends the process without a word on stdout: its last line says what.
        tail = [line for line in done.stderr.splitlines() if line.strip() and not line.lstrip().startswith("@")]
        reason = tail[0][:200] if tail and "Check failed" in tail[0] else (tail[-1][:200] if tail else "")
        return {"ok": False, "reason": f"the compiler stopped (exit {done.returncode}): {reason}"}
    doc: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def _held_here(platform: str) -> bool:
    """Whether jax in this process has started ``platform``'s backend (without importing jax)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    backends = getattr(bridge, "_backends", None)
    return isinstance(backends, dict) and any(p in backends for p in _PLATFORMS.get(platform, (platform,)))


def _run_here(folder: Path, timeout_s: float) -> dict[str, object]:
    """:func:`.child.document` in this process, waited for at most ``timeout_s`` (the bound a child
    has). A compile or run past it cannot be stopped from here (XLA's compiler holds no cancel): it
    is left to finish in a daemon thread, its result dropped, and the replay is said to have run past
    its bound, as a stopped child is."""
    from hlo_doctor.lint.replay.child import document

    got: list[dict[str, object]] = []
    worker = threading.Thread(target=lambda: got.append(document(folder / "spec.json")),
                              name="hlo-doctor-replay", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive() or not got:
        return {"ok": False, "reason": f"it ran past {timeout_s:.0f} s in this process (which holds the "
                                       "device) and was left to finish; its result is not used"}
    return got[0]
