"""OpenAI-shaped errors: ``ApiError`` (raised anywhere on the request path) and the JSON body it becomes.

The body is ``{"error": {"message", "type", "param", "code"}}`` as OpenAI's API sends it, so the official
clients raise their own typed exceptions (``BadRequestError``, ``AuthenticationError``, ...) with our
message. Messages are one line (``engine.errors.printable``). This module owns the shape and the status
codes' types; deciding which error applies is the caller's.
"""

from __future__ import annotations

from typing import Any

from engine.errors import printable

# OpenAI's error "type" for each status this server sends.
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(Exception):
    """An HTTP error with an OpenAI error body; ``headers`` (``Retry-After``) go out with it."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = printable(message)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, param=self.param, code=self.code)


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The JSON OpenAI sends with an error status."""
    return {"error": {"message": printable(message), "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}
