"""Reads at an offset of one capture file (or its bytes in memory), each bounded by the file's size.

The XSpace reader (:mod:`hlo_doctor.trace.stream`) walks the protobuf wire format from the file
through :class:`Source`: a field's head read from a small window kept from the last read, a message's
fields walked a window at a time (by the compiled reader where it is built), a line's events read
at an offset into bytes or into a buffer a thread keeps. Reads share no file position, so a line's
events may be read in another thread (``DevicePlaneReader.prefetch``). A read that would reach past
the end of the file is :meth:`Source.corrupt`, an input error naming the file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from hlo_doctor.core.errors import InputError
from hlo_doctor.trace.cwire import COMPILED, walk_fields

__all__ = ["HINT", "WINDOW", "Field", "Source", "varint"]

WINDOW = 1 << 20
"""The most bytes a small read (a field's head, a metadata entry) keeps for the next one."""
HINT = "the file may be truncated or corrupt; capture again"


def varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
    """A base-128 varint at ``buf[i]``: its value and the index after it (IndexError past the end)."""
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    start: int
    """Offset of the field's tag."""
    value: int
    """Offset of a length-delimited field's payload (its varint value otherwise)."""
    end: int


class Source:
    """A seekable binary file (a path opened for reading, or bytes) read at offsets.

    Small reads (field heads, metadata entries) come from a window of up to :data:`WINDOW` bytes
    kept from the last read; a line's events are read straight from the file.
    """

    def __init__(self, f: IO[bytes], size: int, origin: str) -> None:
        self.f, self.size, self.origin = f, size, origin
        self._lo, self._buf = 0, b""
        # Reads at an offset share no file position (os.pread, or a slice of the bytes in memory),
        # so a line's events may be read in another thread (DevicePlaneReader.prefetch).
        self._fd = f.fileno() if not isinstance(f, io.BytesIO) else -1
        self._mem = f.getbuffer() if isinstance(f, io.BytesIO) else None

    def corrupt(self, what: str) -> InputError:
        return InputError(f"{self.origin}: not a readable xplane (truncated or corrupt: {what})", HINT)

    def read_at(self, offset: int, n: int) -> bytes:
        """``n`` bytes at ``offset`` (any thread may call it)."""
        if self._mem is not None:
            data = bytes(self._mem[offset:offset + n]) if offset >= 0 else b""
        else:
            parts, got = [], 0
            while got < n:
                part = os.pread(self._fd, n - got, offset + got) if offset >= 0 else b""
                if not part:
                    break
                parts.append(part)
                got += len(part)
            data = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(data) != n:
            raise self.corrupt(f"{n} bytes at offset {offset} reach past the end of the file")
        return data

    def read_into(self, offset: int, n: int, buf: bytearray) -> memoryview:
        """:meth:`read_at` into ``buf`` (at least ``n`` bytes; any thread may call it): a view of
        the ``n`` bytes, valid until ``buf`` is written again. No block is allocated per read."""
        view = memoryview(buf)[:n]
        got = 0
        if offset >= 0 and self._mem is not None:
            part = self._mem[offset:offset + n]
            got = len(part)
            view[:got] = part
        elif offset >= 0:
            while got < n:
                k = os.preadv(self._fd, [view[got:]], offset + got)
                if not k:
                    break
                got += k
        if got != n:
            raise self.corrupt(f"{n} bytes at offset {offset} reach past the end of the file")
        return view

    def release(self) -> None:
        """Drop the view of the bytes in memory (the file object can then be closed)."""
        if self._mem is not None:
            self._mem.release()
            self._mem = None

    def piece(self, offset: int, n: int) -> bytes:
        """``n`` bytes at ``offset``, through the window when they fit in one."""
        if n > WINDOW:
            return self.read_at(offset, n)
        if not (self._lo <= offset and offset + n <= self._lo + len(self._buf)):
            self._lo, self._buf = offset, self.read_at(offset, max(n, min(WINDOW, self.size - offset)))
        start = offset - self._lo
        return self._buf[start:start + n]

    def field_at(self, pos: int, end: int) -> Field:
        """The protobuf field whose tag is at ``pos`` (it must end by ``end``)."""
        head = self.piece(pos, min(20, end - pos))
        try:
            tag, i = varint(head, 0)
            number, wire = tag >> 3, tag & 7
            if number == 0:
                raise ValueError("field number 0")
            if wire == 0:
                value, i = varint(head, i)
                stop = pos + i
            elif wire == 2:
                length, i = varint(head, i)
                value, stop = pos + i, pos + i + length
            elif wire in (1, 5):
                value, stop = pos + i, pos + i + (8 if wire == 1 else 4)
            else:
                raise ValueError(f"wire type {wire}")
        except (IndexError, ValueError) as exc:
            raise self.corrupt(f"bad field at offset {pos}: {exc}") from None
        if stop > end:
            raise self.corrupt(f"field {number} at offset {pos} reaches past its message")
        return Field(number, pos, value, stop)

    def fields(self, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """The fields (number, start, value, stop) of the message at ``[pos, end)``, in order, as
        :meth:`field_at` reads them (a field it refuses raises there). The compiled reader walks a
        window of them at a time (a plane's metadata is tens of thousands of small fields)."""
        while pos < end:
            if COMPILED:
                rows, stopped = walk_fields(self.piece(pos, min(WINDOW, end - pos)), pos, end)
                if len(rows):
                    yield from map(tuple, rows.tolist())  # type: ignore[misc]
                    pos = stopped
                    continue
            f = self.field_at(pos, end)
            yield f.number, f.start, f.value, f.end
            pos = f.end
