"""Google Gemini's ``streamGenerateContent?alt=sse`` (``format="gemini"``); its tokens, end and
errors are docs/protocols.md's ("gemini")."""

from __future__ import annotations

import json
from typing import Any

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    REASONING,
    TEXT,
    TOOL,
    Frame,
    Piece,
    Reading,
    StreamFormat,
    indexed,
    parse_object,
    reason_of,
)
from pytest_streamguard.formats.generic import error_message

_UNSPECIFIED = "FINISH_REASON_UNSPECIFIED"


def _part_pieces(part: Any) -> list[Piece]:
    """A part's text (reasoning when ``thought``) and its function call's arguments: a part
    may carry both, and google-genai's ``response.text`` and ``response.function_calls`` each
    take theirs."""
    if not isinstance(part, dict):
        return []
    pieces = []
    text = part.get("text")
    if isinstance(text, str) and text:
        pieces.append(Piece(REASONING if part.get("thought") else TEXT, text))
    call = part.get("functionCall")
    if isinstance(call, dict):
        pieces.append(Piece(TOOL, json.dumps(call.get("args") or {}, separators=(",", ":"))))
    return pieces


class GeminiFormat(StreamFormat):
    """Gemini ``GenerateContentResponse`` chunks as server-sent events."""

    name = "gemini"
    end_description = "a finishReason on every candidate"
    raw_json_lines = True
    unterminated_last_event = True

    def read(self, frame: Frame) -> Reading:
        """Parts are tokens; a finishReason on every candidate (or a blocked prompt) is the end."""
        obj = parse_object(frame.data, "the gemini stream sent a data event")
        if obj.get("error"):
            raise ServerError(f"server sent an error: {error_message(obj)}")
        pieces: list[Piece] = []
        answers: list[int] = []
        finished: list[int] = []
        ended: str | None = None
        for index, candidate in indexed(obj.get("candidates")):
            answers.append(index)
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else []:
                pieces += _part_pieces(part)
            reason = candidate.get("finishReason")
            if reason and reason != _UNSPECIFIED:
                finished.append(index)
                ended = reason if isinstance(reason, str) else ended
        feedback = obj.get("promptFeedback")
        blocked = isinstance(feedback, dict) and bool(feedback.get("blockReason"))
        if blocked and ended is None:
            ended = reason_of(feedback, ("blockReason",))
        return Reading(
            pieces=tuple(pieces),
            end=blocked,
            data=obj,
            answers=tuple(answers),
            finished=tuple(finished),
            reason=ended,
        )
