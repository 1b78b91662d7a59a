"""``python -m app``: start the desktop app (see ``app.main`` for the options). Owns nothing else."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())
