"""python3 -m kfab_worker: serves runner-protocol requests on fd 3, replies on fd 4, until end of input
or {"op": "quit"}."""
from __future__ import annotations

import os
import sys

from .protocol import ProtocolError, read_message, write_message


def main() -> int:
    # The candidate's prints must not reach the protocol: fds 3 and 4 carry it, stdout goes to the log.
    from . import jobs  # imports torch: seconds, after the process is up

    if "--trusted" in sys.argv[1:]:
        jobs.set_trusted()

    while True:
        try:
            req = read_message()
        except (ProtocolError, ValueError) as e:
            print(f"kfab_worker: {e}", file=sys.stderr)
            return 3
        if req is None or req.get("op") == "quit":
            return 0
        reply = jobs.handle(req)
        if "nonce" in req:  # the job's, echoed: kfab refuses a reply without it (RunnerClient::run)
            reply["nonce"] = req["nonce"]
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            try:
                write_message(reply)
            except ValueError as e:  # a NaN or Inf in a reply: JSON has no such numbers
                write_message({"ok": False, "kind": "protocol_error", "detail": f"the worker's reply is not JSON: {e}",
                               "nonce": req.get("nonce")})
        except OSError:
            return 4
        if reply.get("fatal"):
            os._exit(5)  # a lost CUDA context: kfab starts another worker


if __name__ == "__main__":
    sys.exit(main())
