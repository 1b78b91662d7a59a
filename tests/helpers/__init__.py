"""Shared test helpers (tiny model factory, data-dir isolation)."""
