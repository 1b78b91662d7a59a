"""One interpreter workaround every Qt-using process of this app needs on Python 3.11 (applied on import).

PySide6/shiboken 6.12 returns None (from every void Qt call) and True/False (e.g. ``Signal.emit``)
without taking a new reference, which is only correct where those objects are immortal (Python >= 3.12).
On 3.11 each such call drops one reference for good (measured: -1 reference of None per
``QTextDocument.clear()``), and a long chat session ends in "Fatal Python error: none_dealloc".
Raising their counts by 2**60 once makes them as immortal as 3.12 does; no other object is touched.
Owns nothing else. Imported by ``app/__init__`` and, for runs where the package is resolved as a
namespace (an editable install made before ``app/__init__.py`` existed), by ``app.main`` and ``app.bridge``.
"""

from __future__ import annotations

import sys

IMMORTAL_BOOST = 1 << 60  # far more decrefs than a process can make, far below ssize_t's limit


def immortalize_singletons() -> bool:
    """Apply the workaround once per process; True if it was needed (Python < 3.12)."""
    if sys.version_info >= (3, 12):
        return False
    import ctypes

    if sys.getrefcount(None) > IMMORTAL_BOOST // 2:
        return True  # already applied
    for singleton in (None, True, False):
        # ob_refcnt is the first field of every CPython object (Include/object.h, non-debug builds).
        ctypes.c_ssize_t.from_address(id(singleton)).value += IMMORTAL_BOOST
    return True


immortalize_singletons()
