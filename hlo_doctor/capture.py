"""Capture a trace of a JAX program into a run directory that xprof can open unchanged.

A run directory::

    RUN_DIR/
      plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb   (+ <host>.trace.json.gz)
      run.json        target, backend, device kind, versions, steps, warm-up, time, config
      opstats.csv     the op-stats table
      opstats.json    the table plus per-step samples, step times, compile events, run info

It is built in a temporary directory beside ``RUN_DIR`` and renamed into place at the end, so a
failure never leaves a directory that looks like a complete run.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from hlo_doctor.capture_guard import call_target
from hlo_doctor.core import outdir
from hlo_doctor.core.atomic import write_atomically
from hlo_doctor.core.errors import HloDoctorError, InputError, NoOpsError
from hlo_doctor.core.machine import machine_here
from hlo_doctor.core.model import ProgressFn, RunInfo
from hlo_doctor.core.sources import RECORD_KEY, fingerprint
from hlo_doctor.opstats import OpStats, build_opstats, run_info_to_dict, write_exports
from hlo_doctor.trace import find_xplanes, read_trace

"""``progress(phase, done, total)``: phase is ``warmup``, ``capture`` or ``analyze``."""

StepFn = Callable[[], Any]


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------

def resolve_target(spec: str) -> StepFn:
    """The step function named by ``path/to/file.py:func`` or ``package.module:func``.

    The function takes no arguments and runs one step, returning JAX arrays. Import errors and
    missing names become :class:`InputError` (one line: what, which file, what to do).
    """
    module_part, sep, func_name = spec.rpartition(":")
    if not sep or not module_part or not func_name:
        raise InputError(f"TARGET {spec!r} is not FILE.py:FUNC or package.module:FUNC",
                         "name the function that runs one step, e.g. tests/step.py:step")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise InputError(f"TARGET file {path} does not exist", "check the path before ':'")
        module = _import_file(path)
        where = str(path)
    else:
        try:
            module = importlib.import_module(module_part)
        except ModuleNotFoundError as exc:
            raise InputError(f"TARGET module {module_part!r} cannot be imported ({exc})",
                             "install it or pass a file path (path/to/file.py:func)") from exc
        except SystemExit as exc:
            raise InputError(f"TARGET module {module_part} called sys.exit({exc.code!r}) on import",
                             "guard the module's script code with if __name__ == '__main__'") from None
        except Exception as exc:  # noqa: BLE001 - the user's import-time code may raise anything
            raise InputError(f"TARGET module {module_part} raised {type(exc).__name__} on import: {exc}",
                             "fix the module so that importing it works") from exc
        where = module_part
    func = getattr(module, func_name, None)
    if func is None or not callable(func):
        raise InputError(f"TARGET {where} has no function {func_name!r}",
                         "name a function that takes no arguments and runs one step")
    return func  # type: ignore[no-any-return]


def _import_file(path: Path) -> Any:
    name = f"_hlo_doctor_target_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"TARGET file {path} is not a Python module", "pass a .py file")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as the import system does: dataclasses (and typing.get_type_hints)
    # look the defining module up in sys.modules to resolve string annotations, which every
    # annotation is under `from __future__ import annotations`.
    sys.modules[name] = module
    # The file's own directory on sys.path lets it import its neighbours, as `python file.py` would.
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        where = Path(exc.filename).resolve() if exc.filename else path.resolve()
        if where != path.resolve():  # a module the target imports failed to compile: name it
            raise InputError(f"TARGET file {path} imports {where}, which has a syntax error (line "
                             f"{exc.lineno}): {exc.msg}", "fix or reinstall that package for this Python") from exc
        raise InputError(f"TARGET file {path} has a syntax error (line {exc.lineno}): {exc.msg}",
                         "fix the file") from exc
    except SystemExit as exc:
        raise InputError(f"TARGET file {path} called sys.exit({exc.code!r}) on import",
                         "guard the file's script code with if __name__ == '__main__'") from None
    except Exception as exc:  # noqa: BLE001 - the user's import-time code may raise anything
        sys.modules.pop(name, None)
        raise InputError(f"TARGET file {path} raised {type(exc).__name__} on import: {exc}",
                         "fix the file so that importing it works") from exc
    finally:
        try:
            sys.path.remove(str(path.parent.resolve()))
        except ValueError:
            pass
    return module


def keep_gpu_ops_visible() -> bool:
    """Turn XLA:GPU command buffers off for this process unless the user set the flag already.

    Command buffers replay whole sequences of kernels as one graph, which hides per-op events from
    the trace. XLA reads ``XLA_FLAGS`` when the backend starts, so this must run before the first
    JAX computation (before the target is imported). Returns True when it changed ``XLA_FLAGS``.
    The flag is harmless on CPU and TPU.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_command_buffer" in flags:
        return False
    os.environ["XLA_FLAGS"] = (flags + " --xla_gpu_enable_command_buffer=").strip()
    return True


# ---------------------------------------------------------------------------------------------
# Run directories
# ---------------------------------------------------------------------------------------------

def default_run_dir(base: Path = Path("runs")) -> Path:
    """``runs/profile-<UTC time>``: a fresh name for each capture."""
    return base / ("profile-" + _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S"))


@contextmanager
def staged_run_dir(out_dir: Path) -> Iterator[Path]:
    """A temporary directory beside ``out_dir`` that becomes ``out_dir`` when the block succeeds.

    An existing ``out_dir`` is replaced only when it is empty or an earlier run directory (it holds the
    marker ``profile`` writes, :mod:`hlo_doctor.core.outdir`); anything else is refused, so a typo in
    ``--out`` never deletes a user's files.
    """
    out_dir = out_dir.absolute()
    outdir.check_replaceable(out_dir, "profile")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
    except OSError as exc:
        raise InputError(f"--out {out_dir}: cannot create it ({outdir.os_reason(exc)})",
                         "choose a writable --out folder") from None
    try:
        outdir.write_marker(tmp, "profile")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:6]}"
        out_dir.rename(old)
    tmp.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def versions() -> dict[str, str]:
    """Versions of what produced a capture."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("jax", "jaxlib", "xprof", "hlo-doctor"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = ""
    return out


def _device_info() -> tuple[str, str]:
    import jax

    dev = jax.devices()[0]
    return jax.default_backend(), str(getattr(dev, "device_kind", dev.platform))


RUN_JSON_SCHEMA = "hlo-doctor.run/1"
"""The ``schema`` tag of a run directory's run.json."""


def _write_run_json(directory: Path, run: RunInfo, sources: dict[str, str] | None = None, *,
                    machine: str = "") -> None:
    doc = {"schema": RUN_JSON_SCHEMA, **run_info_to_dict(run)}
    if machine:
        # The machine the program ran on (the measurement store's line for it): a later diagnosis here
        # promises a replay's saving at this machine's own, untraced pace (lint/replay/run.py).
        doc["machine"] = machine
    if sources:
        # The files the ops' lines are in, as they were when captured (diagnose says which changed since).
        doc[RECORD_KEY] = sources
    write_atomically(directory / "run.json", json.dumps(doc, indent=1, default=str) + "\n")


def _finish(directory: Path, final: Path, run: RunInfo, progress: ProgressFn | None) -> OpStats:
    """Read the capture back, write run.json and the table into the staged directory.

    ``final`` is where the directory will live once renamed (the exports name it as their source).
    """
    if progress:
        progress("analyze", 0, 1)
    xplanes = find_xplanes(directory)
    trace = read_trace(xplanes)
    stats = build_opstats(trace, run=run, source_path=str(final))
    # A program profile ran here; an attached capture ran elsewhere (or nobody knows where).
    machine = machine_here() if run.backend else ""
    if run.backend == "":
        # An attached capture: what ran is only known from the trace.
        run = RunInfo(target=run.target, backend=trace.backend, device_kind=trace.device_kind,
                      steps=stats.num_steps, warmup=run.warmup, created=run.created,
                      versions=run.versions, config=run.config)
        stats = replace(stats, run=run)
    sources = stats.table["source"] if "source" in stats.table else ()
    _write_run_json(directory, run, fingerprint(str(v) for v in sources if isinstance(v, str) and v),
                    machine=machine)
    write_exports(stats, directory)
    if progress:
        progress("analyze", 1, 1)
    return stats


def _block(result: Any) -> bool:
    """Wait for ``result``'s arrays; whether it held any (a step that returns None holds none)."""
    import jax

    jax.block_until_ready(result)
    return bool(jax.tree_util.tree_leaves(result))


def _call_step(step_fn: StepFn, target: str, phase: str, i: int, *, timeout_s: float | None = None,
               staged: Path | None = None) -> bool:
    """Call the step once and wait for what it returns; whether it returned any value to wait for."""
    try:
        held: list[bool] = []
        call_target(lambda: held.append(_block(step_fn())), what=f"TARGET {target}, {phase} step {i},",
                    timeout_s=timeout_s, staged=staged)
        return any(held)
    except HloDoctorError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's step may raise anything
        raise InputError(f"TARGET {target} raised {type(exc).__name__} in {phase} step {i}: {exc}",
                         "make the step function run on its own (python -c 'import ...; step()')") from exc


# ---------------------------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------------------------

def capture_run(
    step_fn: StepFn, *, steps: int, warmup: int, out_dir: Path, target: str,
    config: dict[str, Any] | None = None, warmup_fn: Callable[[], Any] | None = None,
    progress: ProgressFn | None = None, timeout_s: float | None = None,
) -> tuple[Path, OpStats]:
    """:func:`capture_callable`, also returning the op stats it built.

    ``timeout_s``: the longest the warm-up call or any one step may take (None: no limit); past it,
    :class:`~hlo_doctor.capture_guard.StepTimeout` and nothing is written.
    """
    if timeout_s is not None and not timeout_s > 0:
        raise InputError(f"--timeout {timeout_s}: must be a positive number of seconds", "e.g. --timeout 600")
    import jax

    if steps < 1:
        raise InputError(f"--steps {steps}: need at least one step", "pass --steps 1 or more")
    if warmup < 0:
        raise InputError(f"--warmup {warmup}: cannot be negative", "pass --warmup 0 or more")
    created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    final = Path(out_dir)  # as the user named it: that is how the table header shows it
    with staged_run_dir(final) as tmp:
        if progress:
            progress("warmup", 0, warmup)
        if warmup_fn is not None:
            try:
                call_target(warmup_fn, what=f"TARGET {target}, warming up,", timeout_s=timeout_s,
                            staged=tmp)
            except HloDoctorError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise InputError(f"TARGET {target} raised {type(exc).__name__} while warming up: {exc}",
                                 "check the target's configuration") from exc
        for i in range(warmup):
            _call_step(step_fn, target, "warm-up", i, timeout_s=timeout_s, staged=tmp)
            if progress:
                progress("warmup", i + 1, warmup)
        backend, device_kind = _device_info()
        if progress:
            progress("capture", 0, steps)
        returned: list[bool] = []
        jax.profiler.start_trace(str(tmp))
        try:
            for i in range(steps):
                with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                    returned.append(_call_step(step_fn, target, "traced", i, timeout_s=timeout_s, staged=tmp))
                if progress:
                    progress("capture", i + 1, steps)
        finally:
            jax.profiler.stop_trace()
        run = RunInfo(target=target, backend=backend, device_kind=device_kind, steps=steps, warmup=warmup,
                      created=created, versions=tuple(sorted(versions().items())),
                      config=tuple(sorted((config or {}).items())))
        try:
            stats = _finish(tmp, final, run, progress)
        except NoOpsError:
            raise _no_ops(target, steps, returned_values=any(returned)) from None
    return final, stats


def _no_ops(target: str, steps: int, *, returned_values: bool) -> InputError:
    """Why a target's capture holds no compiled op, in terms of the target (the staged folder the
    trace was read from is gone by the time this is printed)."""
    if not returned_values:
        return InputError(f"TARGET {target} returned None in each of its {steps} traced step(s), and no "
                          "compiled JAX op ran inside them",
                          "return the arrays the step computes (hlo-doctor waits for what the step returns), "
                          "or call .block_until_ready() on them inside the step")
    return InputError(f"TARGET {target}: no compiled JAX op ran in its {steps} traced step(s)",
                      "profile a function that runs jitted or jax.numpy code")


def capture_callable(
    step_fn: StepFn, *, steps: int, warmup: int, out_dir: Path, target: str,
    config: dict[str, Any] | None = None, warmup_fn: Callable[[], Any] | None = None,
    progress: ProgressFn | None = None,
) -> Path:
    """Profile ``step_fn`` and write a run directory; return its path.

    Calls ``warmup_fn()`` (when given) and ``step_fn()`` ``warmup`` times untraced, then ``steps``
    times under ``jax.profiler``, each inside ``StepTraceAnnotation("decode", step_num=i)`` and
    blocking on the results. Writes ``out_dir`` atomically (see :func:`staged_run_dir`).
    """
    path, _ = capture_run(step_fn, steps=steps, warmup=warmup, out_dir=out_dir, target=target,
                          config=config, warmup_fn=warmup_fn, progress=progress)
    return path


def attach_run(
    address: str, *, duration_ms: int, out_dir: Path, progress: ProgressFn | None = None,
) -> tuple[Path, OpStats]:
    """Capture ``duration_ms`` from a program that called ``jax.profiler.start_server(PORT)``.

    ``address`` is ``HOST:PORT``. Steps come from the program's own step annotations when it has
    them, else from the executions of its main module.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"--attach {address!r} is not HOST:PORT", "e.g. --attach 127.0.0.1:9999")
    if duration_ms <= 0:
        raise InputError(f"--duration-ms {duration_ms}: must be positive", "e.g. --duration-ms 2000")
    try:
        from xprof.convert import _pywrap_profiler_plugin
    except ImportError as exc:  # pragma: no cover - xprof is a dependency
        raise InputError("--attach needs xprof's profiler client", "pip install xprof") from exc
    created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    final = Path(out_dir)
    with staged_run_dir(final) as tmp:
        if progress:
            progress("capture", 0, 1)
        options = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 1}
        with _captured_fds() as chatter:
            try:
                _pywrap_profiler_plugin.trace(address, str(tmp), "", True, int(duration_ms), 3, options)
                error = None
            except Exception as exc:  # noqa: BLE001 - the client raises plain errors for a dead server
                error = exc
        if error is not None:
            reason = _connect_reason(chatter.getvalue()) or (
                str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
            raise InputError(f"cannot capture from {address}: {reason}",
                             "is the program running and did it call jax.profiler.start_server(PORT)?")
        if progress:
            progress("capture", 1, 1)
        run = RunInfo(target=f"attach:{address}", backend="", device_kind="", steps=0, warmup=0,
                      created=created, versions=tuple(sorted(versions().items())),
                      config=(("duration_ms", int(duration_ms)),))
        stats = _finish(tmp, final, run, progress)
    return final, stats


@contextmanager
def _captured_fds() -> Iterator[io.StringIO]:
    """Collect what C++ code writes to file descriptors 1 and 2 (the profiler client prints its
    retries there, which would corrupt machine output on stdout)."""
    sink = io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield sink
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            sink.write(tmp.read().decode("utf-8", errors="replace"))


def _connect_reason(text: str) -> str:
    """The most telling line of the profiler client's output (why it got no trace)."""
    for marker in ("failed to connect", "Connection refused", "DEADLINE_EXCEEDED", "No trace event"):
        for line in text.splitlines():
            if marker in line:
                # Log lines carry a "file.cc:123] " prefix: keep the message.
                return line.split("] ", 1)[-1].strip()
    return ""
