"""The printer process of :mod:`hlo_doctor.hlo.printer`: module protos in on stdin, HLO text out on stdout.

Each request is a header (origin's length, proto's length), the origin, the proto; each reply a
status (``T`` text, ``E`` an input error: what, NUL, hint) and its UTF-8 bytes. It ends at the end
of its input; Ctrl-C is the command's to handle, not this process's.
"""

from __future__ import annotations

import signal
import struct
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from hlo_doctor.core.errors import InputError
    from hlo_doctor.hlo.proto import module_text_from_proto

    head, reply = struct.Struct(">IQ"), struct.Struct(">cQ")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        raw = stdin.read(head.size)
        if len(raw) < head.size:
            return
        name_len, proto_len = head.unpack(raw)
        origin = stdin.read(name_len).decode("utf-8", "replace")
        proto = stdin.read(proto_len)
        try:
            status, body = b"T", module_text_from_proto(proto, origin=origin)
        except InputError as exc:
            status, body = b"E", f"{exc.what}\0{exc.hint}"
        except Exception as exc:  # noqa: BLE001 - any refusal of XLA's is the module's fault
            status, body = b"E", f"{origin}: not printed by XLA ({type(exc).__name__})\0capture it again"
        data = body.encode("utf-8", "replace")
        stdout.write(reply.pack(status, len(data)) + data)
        stdout.flush()


if __name__ == "__main__":
    main()
