"""An op's source line from a trace JSON's ``source`` / ``source_stack`` args, judged against its xplane.

libtpu writes both stats on each ``XLA Ops`` event metadata; xprof's ``trace_viewer`` export copies
them into every op event's args (XLA:CPU and GPU captures carry neither). The TPU capture here is
built the way libtpu writes one, from real modules compiled on CPU: each op's ``source`` is the
innermost frame of its HLO stack and ``source_stack`` that stack, innermost first. One op's
innermost frame is a framework's (a package the project's pyproject lists under ``frameworks``):
the line shown must be its caller's, as the xplane shows it from the HLO module. The same capture
read as the xplane and as xprof's JSON must give the same ``source`` per row, and diagnose the
same (rule, module, op, line) for every rule that runs on both: HD005 (programs compiled in the
window) and HD015 (the host's Python keeps the chips waiting; the Python tracer names its frames by
base name, which the op stacks' full paths resolve, as the HLO modules' do on the xplane).
"""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from test_trace_json import xprof_trace_json
from xspace_builder import RealModule, SpaceBuilder, TpuCore, compile_module

from hlo_doctor.cli import main
from hlo_doctor.hlo import parse_module
from hlo_doctor.opstats import load_opstats
from hlo_doctor.trace import json_events
from hlo_doctor.trace.json_decode import decode_sources
from hlo_doctor.trace.json_events import EventFile
from hlo_doctor.trace.source_args import op_source, parse_stack

_FRAMEWORK = "srcfw_layers"
_HELPER = "import jax\n\n\ndef dense(x, w):\n    return jax.nn.gelu(x @ w)\n"


def _compiled(fn: Any, *args: Any) -> tuple[RealModule, dict[str, tuple[str, ...]]]:
    """The module and each entry op's stack (``file:line``, innermost first) from its HLO metadata."""
    module = compile_module(fn, *args)
    text = jax.jit(fn).lower(*args).compile().runtime_executable().hlo_modules()[0].to_string()
    stacks = {i.name: tuple(f"{f.file}:{f.line}" for f in i.stack)
              for i in parse_module(text).entry.instructions if i.stack}
    return module, stacks


class _SourcedCore(TpuCore):
    """A TPU core whose op metadata carry ``source`` and ``source_stack``, as libtpu writes them."""

    stacks: dict[tuple[int, str], tuple[str, ...]] = {}

    def op_metadata(self, module: RealModule, program_id: int, op: str) -> int:
        new = (program_id, op) not in self._op_meta
        mid = super().op_metadata(module, program_id, op)
        stack = self.stacks.get((program_id, op))
        if new and stack:
            self.builder.set_stats(self.builder.plane.event_metadata[mid].stats,
                                   {"source": stack[0], "source_stack": "\n".join(stack)})
        return mid


def _capture(root: Path, dense: Any) -> Path:
    """Two chips run a layer (its matmul inside the framework's ``dense``) and a sampler head over 3
    steps, each dispatched by the host's Python while the chips wait; the layer is compiled on the
    host twice inside the window (HD005), the head once."""
    def layer(x: jax.Array, w: jax.Array) -> jax.Array:
        return dense(x, w) + x

    def head(x: jax.Array) -> jax.Array:
        return jnp.argmax(jax.nn.log_softmax(x * 0.5), axis=-1)

    layer_mod, layer_stacks = _compiled(layer, jnp.ones((8, 32)), jnp.ones((32, 32)))
    head_mod, head_stacks = _compiled(head, jnp.ones((8, 256)))
    ids = {"layer": 12190760917235803885, "layer again": 12190760917235803999, "head": 9000000000000000001}
    modules = {"layer": layer_mod, "layer again": layer_mod, "head": head_mod}
    _SourcedCore.stacks = {(ids[n], op): s for n in ids
                           for op, s in (head_stacks if n == "head" else layer_stacks).items()}
    space = SpaceBuilder("tpu-host")
    for name, pid in ids.items():
        space.add_module(modules[name], pid)
    host = space.plane("/host:CPU")
    python = host.line("python", 3, 0)
    cores = [_SourcedCore(space, i, line_start_ns=0) for i in range(2)]
    t, run = 1e6, 0
    for step in range(3):
        for name in ("layer again" if step == 2 else "layer", "head"):
            if step == 0 or name == "layer again":
                function = name.split()[0]
                host.event(python, host.event_metadata(f"PjitFunction({function})"), t, 320_000.0)
                host.event(python, host.event_metadata("backend_compile"), t + 10_000.0, 300_000.0)
                t += 330_000.0
            module = modules[name]
            # The host's Python (this file's frame, named by base name as the Python tracer names
            # it) dispatches each program while the chips wait: a host-bound step (HD015).
            frame = f"${Path(__file__).name}:{_capture.__code__.co_firstlineno} _capture"  # in every op's stack
            host.event(python, host.event_metadata(frame), t, 800_000.0)
            host.event(python, host.event_metadata(f"PjitFunction({name.split()[0]})"), t + 100_000.0, 600_000.0)
            t += 800_000.0
            # The layer's first op (the framework's matmul) runs longest: its line leads the program.
            ops = [(op.name, 30_000.0 - 2_000.0 * k) for k, op in enumerate(module.ops)]
            for core in cores:
                core.run(module, ids[name], t, ops, run)
            run += 1
            t += 200_000.0
    return space.write(root)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, str]:
    """The project folder (its pyproject lists the framework), the xplane, xprof's JSON of it, and
    the framework's file."""
    root = tmp_path_factory.mktemp("sourced")
    package = root / _FRAMEWORK
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(_HELPER)
    (root / "pyproject.toml").write_text(f'[tool.hlo-doctor]\nframeworks = ["{_FRAMEWORK}"]\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        helper = importlib.import_module(f"{_FRAMEWORK}.layers")
        xplane = _capture(root / "run", helper.dense)
    return root, xplane, xprof_trace_json(xplane, root), str(package / "layers.py")


def _diagnose(path: Path) -> tuple[set[str], list[tuple[str, str, str, str]]]:
    """The rules run and each finding's (rule, module, op, line)."""
    result = CliRunner().invoke(main, ["diagnose", str(path), "--format", "json", "-o", "-"])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    return set(doc["rules_run"]), sorted((f["code"], f["module"], f["op"], f["source"]) for f in doc["findings"])


def test_findings_name_the_same_lines_from_the_xplane_and_its_trace_json(
        capture: tuple[Path, Path, Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, xplane, trace, helper = capture
    monkeypatch.chdir(root)  # the pyproject that lists the framework
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    args = [e["args"] for e in events if e.get("ph") == "X" and "source_stack" in e.get("args", {})]
    # xprof copies the stats verbatim: the framework's line first, then its caller's.
    assert args and any(a["source"].startswith(helper) for a in args)
    assert all(a["source_stack"].split("\n")[0] == a["source"] for a in args)

    (ran_xplane, from_xplane), (ran_json, from_json) = _diagnose(xplane), _diagnose(trace)
    # Rules that read whole HLO modules run on the xplane only; the others must agree finding for finding.
    assert ran_json < ran_xplane and from_json
    assert [f for f in from_xplane if f[0] in ran_json] == from_json
    layer = next(f for f in from_json if f[1] == "jit_layer")
    # Not the framework's line the ``source`` arg names: the test's own line that called it.
    assert layer[0] == "HD005" and layer[3].startswith(__file__ + ":")
    assert {f[:2] for f in from_json} == {("HD005", "jit_layer"), ("HD005", "jit_head"), ("HD015", "")}
    # The Python tracer names a frame by its file's base name: the op stacks give the full path, as
    # the HLO modules' stacks do on the xplane.
    host_bound = next(f for f in from_json if f[0] == "HD015")
    assert host_bound[3] == f"{__file__}:{_capture.__code__.co_firstlineno}"

    def lines(path: Path) -> dict[tuple[str, str], str]:
        return {(r["module"], r["op"]): r["source"] for r in load_opstats(path).table.to_dict(orient="records")}

    expected = lines(xplane)
    assert lines(trace) == expected
    # Every row names a line but the reduce-windows XLA adds for the argmax (no stack in the HLO).
    assert all(line or op.startswith("wrapped_reduce-window") for (_, op), line in expected.items())
    assert not any(s.startswith(helper) for s in expected.values())


def test_stack_order_and_what_is_not_a_line() -> None:
    inner_first = "/venv/lib/python3.11/site-packages/flax/linen/linear.py:12\n/srv/app/model.py:40 forward\n/srv/app/main.py:9"
    outer_first = "/srv/app/main.py:9\n/srv/app/model.py:40:7\n/venv/lib/python3.11/site-packages/flax/linen/linear.py:12"
    source = "/venv/lib/python3.11/site-packages/flax/linen/linear.py:12"
    assert [f[:2] for f in parse_stack(source, inner_first)] == [f[:2] for f in parse_stack(source, outer_first)]
    assert op_source(source, inner_first)[0] == op_source(source, outer_first)[0] == "/srv/app/model.py:40"
    assert op_source(source, None)[0] == source  # only a framework's line: shown as it is
    assert op_source(None, None) == ("", ()) and op_source("no line here", "")[0] == ""


def test_source_args_read_alike_by_both_decoders_and_any_chunk(
        capture: tuple[Path, Path, Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, trace, _ = capture
    text = json.dumps(json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"])
    fast = decode_sources(text.encode())
    # An entry msgspec cannot type sends the batch the stdlib's way.
    slow = decode_sources((text[:-1] + ", 7]").encode())
    assert slow[-1] is None and slow[:-1] == fast and sum(p is not None for p in fast) > 30

    def sources(f: EventFile) -> dict[tuple[Any, ...], tuple[str | None, str | None]]:
        return {f.infos.values[code]: pair for code, pair in f.sources.items()}

    whole = sources(EventFile(trace).read())
    assert whole and all(source and stack and stack.split("\n")[0] == source for source, stack in whole.values())
    # Small chunks: ops met first in many batches, each decoded again for its source args.
    monkeypatch.setattr(json_events, "_CHUNK", 2048)
    assert sources(EventFile(trace).read()) == whole
