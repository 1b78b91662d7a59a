"""The headless sub-commands dispatched by ``engine/__main__.py``: ``chat``, ``info``, ``fetch``, ``bench``, ``lab``,
``models`` and ``serve``.

Each module parses its arguments, calls the engine and prints; none holds engine logic of its own.
"""
