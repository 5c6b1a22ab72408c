"""Hugging Face Text Generation Inference's ``/generate_stream`` (``format="tgi"``); its tokens,
end and errors are docs/protocols.md's ("tgi")."""

from __future__ import annotations

import dataclasses

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    Frame,
    Reading,
    StreamFormat,
    parse_object,
    reason_of,
    text_reading,
)
from pytest_streamguard.formats.generic import error_message


class TGIFormat(StreamFormat):
    """TGI ``StreamResponse`` events."""

    name = "tgi"
    end_description = "an event with generated_text"
    unterminated_last_event = True

    def read(self, frame: Frame) -> Reading:
        """Non-special token text is a token; the event with ``generated_text`` ends."""
        obj = parse_object(frame.data, "the tgi stream sent a data event")
        if frame.event == "error" or obj.get("error"):
            raise ServerError(f"server sent an error: {error_message(obj)}")
        token = obj.get("token")
        text = ""
        if isinstance(token, dict) and not token.get("special"):
            value = token.get("text")
            text = value if isinstance(value, str) else ""
        done = obj.get("generated_text") is not None
        reading = text_reading(text, obj, end=done, last=done)
        if done:
            reason = reason_of(obj.get("details"), ("finish_reason",))
            reading = dataclasses.replace(reading, reason=reason)
        return reading
