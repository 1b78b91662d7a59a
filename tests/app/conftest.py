"""After each GUI test: delete the closed widgets and collect their Python wrappers on the GUI thread.

Why: pytest-qt closes a test's widgets with ``deleteLater``; the C++ objects then go at the next event
loop, but pyqtgraph's graphics items (the latency chart) sit in reference cycles, so their Python
wrappers wait for the cyclic garbage collector. That collector runs in whichever thread happens to
allocate: twice in clean-clone CI it ran on the next test's engine thread (loading a model) while the
GUI thread painted a new window's chart, and the process died in ``AxisItem.boundingRect``. Deleting
and collecting here, on the GUI thread, leaves no Qt garbage for another thread to find.
"""

from __future__ import annotations

import gc
from typing import Iterator

import pytest


@pytest.fixture(autouse=True)
def _collect_qt_garbage_on_the_gui_thread() -> Iterator[None]:
    yield
    from PySide6.QtCore import QCoreApplication, QEvent

    if QCoreApplication.instance() is not None:
        QCoreApplication.sendPostedEvents(None, int(QEvent.Type.DeferredDelete.value))
        QCoreApplication.processEvents()
    gc.collect()
