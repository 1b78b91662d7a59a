"""Whether a model may run its own Python code when it loads: ``allowed``, the question the window asks.

A load is refused when the model ships code of its own (``ErrorKind.REMOTE_CODE_REFUSED``); the controller then offers
the load again (``ChatController.remote_code_offered``) and the window asks here, once per load. The answer is not
remembered: trusting a folder's code is a decision for each load, never a setting. Owns the question and its wording
(kept in the main window's translation context, where it was first written); the load itself is the window's.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QMessageBox, QWidget

from engine.inputs import LoadSpec


def allowed(parent: QWidget, spec: LoadSpec) -> bool:
    """Ask whether ``spec``'s model may run its own code; True only on an explicit Yes (No is the default)."""
    translate = QCoreApplication.translate
    answer = QMessageBox.warning(
        parent, translate("MainWindow", "Run this model's own code?"),
        translate("MainWindow", "{model}\n\nThis model ships Python code that would run on your computer with your "
                                "permissions when it loads. Allow it only for a model from someone you trust.").format(
            model=spec.model),
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes
