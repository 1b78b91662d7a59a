"""The headless sub-commands dispatched by ``engine/__main__.py``: ``chat``, ``complete``, ``info``, ``fetch``, ``bench``,
``lab``, ``models``, ``serve`` and ``docs`` (``replies``: what ``chat`` and ``complete`` share).

Each module parses its arguments, calls the engine and prints; none holds engine logic of its own.
"""

# What every command's ``--model`` takes (``engine.models.loader.resolve_source`` finds it).
MODEL_HELP = ("'default', a name from `models list`, a model folder, a .gguf file or a repo id (installed, or in the "
              "local Hugging Face cache)")
SERVED_MODEL_HELP = "; with --base-url the served model's name ('default': the server's only model)"
