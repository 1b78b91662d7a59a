"""What every view shares: texts and their translation (``i18n``, ``engine_texts``, ``lab_names``, ``metric_help``,
``precision_reason``), the theme, Markdown rendering, accessibility helpers and rate limiting.

The floor just above ``app.history``: imports nothing else of the app (tests/test_boundaries.py::APP_FLOORS).
"""
