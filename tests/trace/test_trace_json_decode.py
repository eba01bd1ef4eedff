"""The two decoders of trace JSON events read every file alike.

msgspec decodes events into records holding only the keys the reader reads; the stdlib path (used
where msgspec is missing, and for a batch msgspec cannot type) wraps json's dicts in the same
attributes. Judged on the real files jax and xprof write, and on a batch cut inside a string.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from hlo_doctor.core.errors import InputError
from hlo_doctor.opstats import load_opstats
from hlo_doctor.trace.json_decode import _DECODER, ARG_FIELDS, BACKEND, EVENT_FIELDS, _stdlib, decode_events

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _fields(ev: Any) -> tuple[Any, ...]:
    if ev is None:
        return (None,)
    args = ev.args
    arg_values = tuple(getattr(args, k) for k in ARG_FIELDS) if args is not None else (None,) * len(ARG_FIELDS)
    return tuple(getattr(ev, k) for k in EVENT_FIELDS if k != "args") + arg_values


def test_msgspec_and_stdlib_decode_jax_own_file_alike() -> None:
    # jax's vm.trace.json.gz of the H200 seed capture: Python tracer, runtime and CUPTI events;
    # numeric stats written as text are numbers on both paths.
    path = next((SAMPLES / "gpu_h200_seed_b512").glob("plugins/profile/*/*.trace.json.gz"))
    events_text = json.dumps(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    assert BACKEND.startswith("msgspec")
    fast, slow = _DECODER.decode(events_text), _stdlib(events_text)  # msgspec itself, no fallback
    assert len(fast) == len(slow) > 1000
    assert [_fields(e) for e in fast] == [_fields(e) for e in slow]
    # The reader's records keep the op args and drop the rest (the tracer's own args).
    ops = [e for e in fast if e is not None and e.args is not None and e.args.hlo_op]
    assert ops and all(isinstance(e.args.hlo_module, str) for e in ops)
    assert not hasattr(fast[0], "__dict__")


def test_entries_msgspec_cannot_type_go_the_stdlib_way() -> None:
    text = json.dumps([{"ph": "X", "name": "a", "args": ["not", "an", "object"]}, 7,
                       {"ph": "X", "name": "b", "ts": 1, "dur": 2, "args": {"hlo_op": "copy", "extra": [1]}},
                       {"ph": "X", "name": "c", "args": {"run_id": "9", "step_num": "x", "group_id": str(2**64),
                                                         "device_offset_ps": "inf"}}])
    events = decode_events(text)
    assert events[0].args is None and events[1] is None
    assert events[2].args.hlo_op == "copy" and events[2].ts == 1
    # A stat that is not a number in 64 bits reads as absent in value, present in kind.
    args = events[3].args
    assert (args.run_id, args.step_num, args.group_id) == (9, -1, -(1 << 62))
    assert math.isnan(args.device_offset_ps)


def test_a_batch_cut_inside_a_string_is_read_one_event_at_a_time(tmp_path: Path) -> None:
    # The last event's HLO text holds "}, {": the batch cut there is not between two events, fails
    # to decode, and the events from there on are read one at a time; every op is still counted.
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 701, "tid": 5, "name": "thread_name", "args": {"name": "tf_XLAEigen/1"}},
    ]
    for i in range(6):
        events.append({"ph": "X", "pid": 701, "tid": 5, "ts": 100.0 * i, "dur": 40.0, "name": "tuple.3",
                       "args": {"hlo_module": "jit_f", "hlo_op": "tuple.3", "run_id": str(i),
                                "long_name": "%tuple.3 = (f32[8]{0}, {0}) tuple(%a, %b)" if i == 5 else "x"}})
    path = tmp_path / "cut.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    stats = load_opstats(path)
    assert list(stats.table["occurrences"]) == [6]


def _cpu_file(path: Path, events_extra: list[dict[str, Any]], head: dict[str, Any]) -> Path:
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 701, "tid": 5, "name": "thread_name", "args": {"name": "tf_XLAEigen/1"}},
    ]
    for i in range(4):
        events.append({"ph": "X", "pid": 701, "tid": 5, "ts": 10.0 * i, "dur": 4.0, "name": "copy",
                       "args": {"hlo_module": "jit_f", "hlo_op": "copy", "run_id": str(i)}})
    path.write_bytes(json.dumps({**head, "traceEvents": events + events_extra}, ensure_ascii=False).encode())
    return path


def test_non_ascii_text_is_read_and_bad_utf8_named(tmp_path: Path) -> None:
    # Keys before traceEvents are read on their own (decoded to text): non-ASCII there and in the
    # events must not shift the reader's place in the bytes.
    head = {"displayTimeUnit": "ns", "metadata": {"host": "hôte ✓ 主机" * 5000}}
    frame = {"ph": "X", "pid": 701, "tid": 5, "ts": 1.0, "dur": 1.0, "name": "façade.py:3 ✓", "args": {}}
    good = _cpu_file(tmp_path / "good.trace.json", [frame], head)
    assert list(load_opstats(good).table["occurrences"]) == [4]
    bad = tmp_path / "bad.trace.json"
    bad.write_bytes(good.read_bytes().replace("façade".encode(), b"fa\xff\xfeade"))
    with pytest.raises(InputError, match="not UTF-8"):
        load_opstats(bad)
