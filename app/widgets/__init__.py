"""The window's widgets, one module each; each owns its display and emits requests, never runs the engine."""
