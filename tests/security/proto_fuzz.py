"""A structure-aware mutator of serialized protobuf messages (helpers, not tests).

It reads the wire format alone (no schema): a length-delimited field that parses whole as fields is
taken for a message and may be mutated inside, at any depth. A mutation is one of: a varint set to a
value that hurts (0, 1, -1, 2^31, 2^32, 2^63, a random one), a field dropped, a field repeated, two
fields' values swapped, a length-delimited value cut or grown. Everything else is written back as it
was, so each mutant differs from a real XLA module in one place, as an attacker with a protobuf
library would make it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

HURTING = (0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


@dataclass
class Field:
    number: int
    wire: int
    value: int | bytes
    sub: list[Field] | None = field(default=None)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    out, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, pos


def _put_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def parse(data: bytes, depth: int = 0) -> list[Field]:
    """The fields of ``data``; raises ValueError when it is not a message."""
    out: list[Field] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append(Field(number, wire, value))
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ValueError("cut")
            out.append(Field(number, wire, data[pos:pos + size]))
            pos += size
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("cut")
            raw = data[pos:pos + size]
            pos += size
            sub = None
            if depth < 12 and raw and not _looks_like_text(raw):
                try:
                    sub = parse(raw, depth + 1)
                except ValueError:
                    sub = None
            out.append(Field(number, wire, raw, sub))
        else:
            raise ValueError("wire type")
    return out


def _looks_like_text(raw: bytes) -> bool:
    return len(raw) < 256 and all(32 <= b < 127 for b in raw)


def serialize(fields: list[Field]) -> bytes:
    out = bytearray()
    for f in fields:
        out += _put_varint(f.number << 3 | f.wire)
        if f.wire == 0:
            out += _put_varint(int(f.value))  # type: ignore[arg-type]
        elif f.wire == 2:
            raw = serialize(f.sub) if f.sub is not None else bytes(f.value)  # type: ignore[arg-type]
            out += _put_varint(len(raw)) + raw
        else:
            out += bytes(f.value)  # type: ignore[arg-type]
    return bytes(out)


def _all(fields: list[Field], into: list[tuple[list[Field], int]]) -> None:
    for i, f in enumerate(fields):
        into.append((fields, i))
        if f.sub is not None:
            _all(f.sub, into)


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """``data`` with one mutation, and what it was."""
    fields = parse(data)
    places: list[tuple[list[Field], int]] = []
    _all(fields, places)
    owner, i = rng.choice(places)
    f = owner[i]
    kind = rng.choice(("varint", "varint", "varint", "drop", "repeat", "swap", "resize"))
    if kind == "varint" and f.wire == 0:
        f.value = rng.choice(HURTING) if rng.random() < 0.8 else rng.getrandbits(rng.choice((8, 16, 40, 64)))
        what = f"field {f.number} set to {f.value}"
    elif kind == "drop" or (kind == "varint" and f.wire != 0):
        del owner[i]
        what = f"field {f.number} dropped"
    elif kind == "repeat":
        owner.insert(i, Field(f.number, f.wire, f.value, f.sub))
        what = f"field {f.number} repeated"
    elif kind == "swap":
        j = rng.randrange(len(owner))
        owner[i], owner[j] = Field(f.number, owner[j].wire, owner[j].value, owner[j].sub), \
            Field(owner[j].number, f.wire, f.value, f.sub)
        what = f"fields {f.number} and {owner[i].number} swapped values"
    else:
        raw = serialize(f.sub) if f.sub is not None else bytes(f.value) if f.wire == 2 else b""
        raw = raw[:rng.randrange(len(raw) + 1)] if rng.random() < 0.5 else raw + bytes(rng.getrandbits(8) for _ in range(8))
        owner[i] = Field(f.number, 2, raw)
        what = f"field {f.number} resized to {len(raw)} bytes"
    return serialize(fields), what


def with_opcode(hlo_proto: bytes, old: bytes, new: bytes) -> bytes | None:
    """The ``HloProto`` with its module's first ``old`` instruction made a ``new`` one, None without one.

    ``convert`` made ``recv`` passes every id check (ids, operands, computations are untouched) and
    makes XLA's printer abort (a failed CHECK, SIGABRT) in this jaxlib: the crash the printer's own
    process is there for.
    """
    outer = parse(hlo_proto)
    for module in (f for f in outer if f.number == 1 and f.sub is not None):
        for comp in (f for f in module.sub or () if f.number == 3 and f.sub is not None):
            for ins in (f for f in comp.sub or () if f.number == 2 and f.sub is not None):
                for opcode in (f for f in ins.sub or () if f.number == 2 and f.wire == 2):
                    if opcode.value == old:
                        opcode.value = new
                        return serialize(outer)
    return None


def crashing_xplane(source: Path, dest: Path, host_module: str = "jit_convert_element_type") -> Path:
    """A copy of the real xplane ``source`` at ``dest`` whose module ``host_module`` crashes XLA's
    printer (:func:`with_opcode`); every other byte of the capture is the real one."""
    from hlo_doctor.trace import xplane_pb2 as xp

    space = xp.XSpace.FromString(source.read_bytes())
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for meta in plane.event_metadata.values():
            if not meta.name.startswith(host_module):
                continue
            for stat in meta.stats:
                if names.get(stat.metadata_id) == "Hlo Proto" and stat.bytes_value:
                    bad = with_opcode(stat.bytes_value, b"convert", b"recv")
                    if bad is not None:
                        stat.bytes_value = bad
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(space.SerializeToString())
                        return dest
    raise AssertionError(f"{source}: no module {host_module} with a convert")
