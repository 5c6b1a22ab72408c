"""The API's error type and the error texts Toxiproxy 2.12 answers with."""

from __future__ import annotations

from typing import Final


class ApiError(Exception):
    """An API failure carrying the message and HTTP status the real server would answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def joined(self, detail: str) -> ApiError:
        """Return ``"<message>: <detail>"`` with the same status (Go's ``joinError``)."""
        return ApiError(f"{self.message}: {detail}", self.status)


BAD_REQUEST_BODY: Final = ApiError("bad request body", 400)
MISSING_FIELD: Final = ApiError("missing required field", 400)
PROXY_NOT_FOUND: Final = ApiError("proxy not found", 404)
PROXY_EXISTS: Final = ApiError("proxy already exists", 409)
INVALID_STREAM: Final = ApiError("stream was invalid, can be either upstream or downstream", 400)
INVALID_TOXIC_TYPE: Final = ApiError("invalid toxic type", 400)
TOXIC_EXISTS: Final = ApiError("toxic already exists", 409)
TOXIC_NOT_FOUND: Final = ApiError("toxic not found", 404)


def invalid_input(message: str) -> ApiError:
    """A 400 for input the real server would accept and then panic or hang on."""
    return ApiError(message, 400)
