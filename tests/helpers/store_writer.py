"""A history writer for the kill -9 test: writes forever, printing each write after its commit returns.

Run as ``python -m tests.helpers.store_writer <db path>``. Each line on stdout is printed only after the
store's transaction committed, so every line the parent read names data that must survive a SIGKILL:
``m <id>`` for an added message, ``u <id> <length>`` for a streaming save of that many characters.
Owns nothing but this loop; it exists because the killed process must be a real, separate one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.history.perf import PerfRecord
from app.history.store import HistoryStore


def main(path: str) -> None:
    store = HistoryStore(Path(path))
    cid = store.create_conversation()
    n = 0
    while True:
        n += 1
        print(f"m {store.add_message(cid, 'user', f'question {n} 你好')}", flush=True)
        mid = store.add_message(cid, "assistant", "")
        print(f"m {mid}", flush=True)
        reply = ""
        for chunk in range(5):  # a reply saved as it grows, like the window does while streaming
            reply += f"token{chunk} " * 20
            store.update_message(mid, reply)
            print(f"u {mid} {len(reply)}", flush=True)
        store.update_message(mid, reply, "eos", PerfRecord(model="writer", generated_tokens=100))
        print(f"f {mid}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
