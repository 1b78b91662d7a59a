"""Entry script of the frozen Miaohui (what PyInstaller runs): the desktop app or the engine's CLI.

``miaohui [options]`` runs ``app.main:main`` (``--version``, ``--self-test``, ``--screenshot`` ...);
``miaohui engine <command> ...`` runs the headless engine CLI (``python -m engine``) from the same
bundle, so an installed copy can chat or benchmark without a Python installation. Owns only this
dispatch; every option belongs to the module it is passed to.
"""

from __future__ import annotations

import multiprocessing
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-m"], ["-c"]):
        # A library re-running sys.executable as a Python interpreter (e.g. ``sys.executable -m pip``)
        # would start another copy of the app instead: refuse in one line rather than fork the GUI.
        print(f"miaohui: this is the packaged app, not a Python interpreter ({' '.join(args[:2])} is not "
              "available here)", file=sys.stderr)
        return 2
    if args[:1] == ["engine"]:
        from engine.__main__ import main as engine_main

        return engine_main(args[1:])
    from app.main import main as app_main

    return int(app_main() or 0)


if __name__ == "__main__":
    # Any library using multiprocessing (spawn) re-executes this file; freeze_support routes those
    # children to their worker code instead of a second app.
    multiprocessing.freeze_support()
    sys.exit(main())
