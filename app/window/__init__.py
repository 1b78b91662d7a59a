"""The main window and what it constructs and connects: the chat's controller, the per-conversation model, forks,
the composer's forecast, the remote source. The only floor that knows the widgets together
(tests/test_boundaries.py::APP_FLOORS); the entry points (``app.main``) are above it.
"""
