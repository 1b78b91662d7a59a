"""Where Miaohui's own files beside the code are (``assets/``: the icons and the translations) and its icons as
``QIcon``s. One home for the folder's path, the same from a checkout and inside the frozen bundle
(packaging/miaohui.spec copies ``assets/`` whole next to the ``app`` package). Owns no file's content.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QIcon

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def icon(name: str) -> QIcon:
    """``assets/<name>.svg`` as an icon (drawn by Qt's SVG plug-in at any size; a null icon if the file is missing)."""
    return QIcon(str(ASSETS / f"{name}.svg"))


__all__ = ["ASSETS", "icon"]
