"""The data the views share: the settings, servers' API keys, the chat's messages as the controller reports them.

Imports only ``app.ui`` and ``app.history`` of the app (tests/test_boundaries.py::APP_FLOORS).
"""
