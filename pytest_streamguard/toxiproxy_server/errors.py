"""The API's error types and the error texts Toxiproxy 2.12 answers with.

Each kind of error is a class, so every ``raise`` makes a fresh exception: re-raising one
module-level instance would chain each request's traceback onto it, and its memory would grow
with every error answered.
"""

from __future__ import annotations

from typing import ClassVar


class ApiError(Exception):
    """An API failure carrying the message and HTTP status the real server would answer."""

    default_message: ClassVar[str] = "internal server error"
    default_status: ClassVar[int] = 500

    def __init__(self, message: str | None = None, status: int | None = None) -> None:
        self.message = self.default_message if message is None else message
        self.status = self.default_status if status is None else status
        super().__init__(self.message)

    @classmethod
    def joined(cls, detail: str) -> ApiError:
        """A new error ``"<message>: <detail>"`` with the same status (Go's ``joinError``)."""
        return cls(f"{cls.default_message}: {detail}")


def _kind(message: str, status: int) -> type[ApiError]:
    return type("ApiError", (ApiError,), {"default_message": message, "default_status": status})


BAD_REQUEST_BODY = _kind("bad request body", 400)
MISSING_FIELD = _kind("missing required field", 400)
PROXY_NOT_FOUND = _kind("proxy not found", 404)
PROXY_EXISTS = _kind("proxy already exists", 409)
INVALID_STREAM = _kind("stream was invalid, can be either upstream or downstream", 400)
INVALID_TOXIC_TYPE = _kind("invalid toxic type", 400)
TOXIC_EXISTS = _kind("toxic already exists", 409)
TOXIC_NOT_FOUND = _kind("toxic not found", 404)


def invalid_input(message: str) -> ApiError:
    """A 400 for input the real server would accept and then panic or hang on."""
    return ApiError(message, 400)
