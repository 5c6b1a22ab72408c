"""The one error type of the request edge: a status plus a JSON body that names the field and
what it accepts."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A client error with the HTTP status and a JSON body naming the field and accepted values."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        accepted: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.accepted = accepted
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON error object sent to the client."""
        payload: dict[str, Any] = {"error": self.message}
        if self.field is not None:
            payload["field"] = self.field
        if self.accepted is not None:
            payload["accepted"] = self.accepted
        return payload
