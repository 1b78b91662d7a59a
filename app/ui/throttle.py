"""A tiny rate limiter for GUI setters: call it as often as you like, the target runs at most every N ms.

Used where an update can arrive faster than a screen can usefully show it (chart redraws, panel
refreshes). The latest arguments win; a trailing call always runs so the final state is shown.
Owns no data and knows nothing about what it throttles.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Slot


class Throttle(QObject):
    """Calls ``func`` at most once per ``interval_ms``; the last call's arguments are never dropped."""

    def __init__(self, func: Callable[..., Any], interval_ms: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._func = func
        self._interval_s = interval_ms / 1000.0
        self._pending: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._last_run = 0.0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.on_timer_expired)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._pending = (args, kwargs)
        elapsed = time.monotonic() - self._last_run
        if elapsed >= self._interval_s and not self._timer.isActive():
            self._run()
        elif not self._timer.isActive():
            self._timer.start(max(0, int((self._interval_s - elapsed) * 1000)))

    def flush(self) -> None:
        """Run the pending call now (e.g. when a reply ends, so the final numbers are drawn)."""
        self._timer.stop()
        if self._pending is not None:
            self._run()

    def cancel(self) -> None:
        self._timer.stop()
        self._pending = None

    @Slot()
    def on_timer_expired(self) -> None:
        if self._pending is not None:
            self._run()

    def _run(self) -> None:
        args, kwargs = self._pending  # type: ignore[misc]
        self._pending = None
        self._last_run = time.monotonic()
        self._func(*args, **kwargs)
