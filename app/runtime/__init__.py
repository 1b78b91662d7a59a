"""Work off the GUI thread: the engine's worker thread and its ``Bridge``, background tasks whose results come back
on the GUI thread, serving the loaded model over HTTP, one instance per data folder.

Widgets may use its types; it imports no widget and nothing of the window (tests/test_boundaries.py::APP_FLOORS).
"""
