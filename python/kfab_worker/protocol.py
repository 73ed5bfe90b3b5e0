"""The runner protocol's framing (docs/runner-protocol.md): each message is one JSON object preceded by
its length as a 4-byte little-endian unsigned integer. Requests arrive on fd 3, replies leave on fd 4."""
from __future__ import annotations

import json
import os
import struct

REQUEST_FD = 3
REPLY_FD = 4
MAX_MESSAGE = 64 << 20


class ProtocolError(Exception):
    pass


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    got = 0
    while got < n:
        b = os.read(fd, n - got)
        if not b:
            if got == 0:
                return None
            raise ProtocolError(f"end of input inside a message ({got} of {n} bytes)")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_message(fd: int = REQUEST_FD) -> dict | None:
    """The next request, or None at end of input."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack("<I", head)
    if n > MAX_MESSAGE:
        raise ProtocolError(f"message of {n} bytes is over the limit of {MAX_MESSAGE}")
    body = _read_exact(fd, n)
    if body is None:
        raise ProtocolError("end of input after a length prefix")
    msg = json.loads(body.decode("utf-8"))
    if not isinstance(msg, dict):
        raise ProtocolError("a message must be a JSON object")
    return msg


def write_message(msg: dict, fd: int = REPLY_FD) -> None:
    body = json.dumps(msg, allow_nan=False, default=str).encode("utf-8")
    data = struct.pack("<I", len(body)) + body
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
