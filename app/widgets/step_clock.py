"""How long the step now running has taken, in a label: ``StepClock``.

Some steps report no progress of their own while they run (the Lab's A/B experiment loading a precision: a bar that
sits at 50 % for minutes, issue 41 point 6), so the label says the step and the seconds it has run, "… (12 s)",
updated every second by a QTimer until ``stop``. Owns that suffix and its timer; not the step's wording.
"""

from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Slot
from PySide6.QtWidgets import QLabel

TICK_MS = 1000  # whole seconds are shown: a finer tick would only repaint the same text


class StepClock(QObject):
    """Shows ``step (N s)`` in ``label`` while a step runs; ``step(text)`` starts one, ``stop()`` ends. No signals."""

    def __init__(self, label: QLabel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._label = label
        self._text = ""
        self._elapsed = QElapsedTimer()
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.on_timer_timeout)

    def step(self, text: str) -> None:
        """A step named ``text`` runs from now (the same text again is the same step: its seconds go on)."""
        if text != self._text or not self._timer.isActive():
            self._text = text
            self._elapsed.start()
            self._timer.start()
        self.on_timer_timeout()

    def stop(self) -> None:
        """No step runs any more: the label is left to whoever sets it next."""
        self._timer.stop()
        self._text = ""

    def running(self) -> bool:
        return self._timer.isActive()

    @Slot()
    def on_timer_timeout(self) -> None:
        self._label.setText(self.tr("{step} ({seconds} s)").format(step=self._text,
                                                                    seconds=self._elapsed.elapsed() // 1000))
