"""An executable Python script standing in for a child process's interpreter, for tests of code that talks to a child
over pipes (engine/bench/peer.py's ``PeerProcess``): the real process and pipes, a scripted other end.

Owns writing that script; not what it says (each test's body).
"""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path


def scripted_child(tmp_path: Path, body: str) -> str:
    """The path of an executable running ``body`` (dedented) with this interpreter; its arguments are ignored."""
    path = tmp_path / "child.py"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)
