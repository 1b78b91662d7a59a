"""Render Miaohui's SVG icon to a square PNG with Qt's own SVG renderer (no extra tool needed).

Used at build time only: by ``miaohui.spec`` (PyInstaller turns the PNG into Windows' .ico / macOS'
.icns) and by ``build.sh`` (the .deb's 256x256 hicolor icon). The repository keeps the SVG alone, so
no generated binary is committed. Owns nothing else.

Usage: ``python packaging/render_icon.py assets/miaohui.svg OUT.png [SIZE]``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def render(svg: Path, png: Path, size: int = 256) -> Path:
    """Write ``svg`` as a ``size`` x ``size`` PNG with a transparent background; return ``png``."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # a build machine may have no display
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])  # QPainter on QImage needs a Gui app for fonts
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"not a valid SVG: {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    png.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(png), "PNG"):
        raise OSError(f"could not write {png}")
    return png


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1])
    render(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) == 4 else 256)
