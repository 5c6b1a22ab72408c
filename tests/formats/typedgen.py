"""A second seeded generator for the differential harness: events built from the SDKs' own typed
models, not from a list of shapes written here (``streamgen.py`` is that list).

``generate_typed(protocol, seed, index)`` returns a :class:`streamgen.Transcript` from
``random.Random(f"typed:{seed}:{protocol}:{index}")``, so a stream replays from its seed,
protocol and index alone. Each event is an instance of a model the installed SDK declares,
filled by polyfactory from the model's own fields (random strings, numbers, None for optional
fields, lists of zero to three items, every member of a union or a ``Literal``):

- ``openai``: ``openai.types.chat.ChatCompletionChunk``, and the same protocol as the vendors'
  SDKs model it (``groq``'s ``ChatCompletionChunk``, ``mistralai``'s ``CompletionChunk``,
  ``huggingface_hub``'s ``ChatCompletionStreamOutput``);
- ``openai-responses``: ``response.created`` then members of
  ``openai.types.responses.ResponseStreamEvent`` (every member of the annotated union, found
  with ``typing.get_args``), then one of its terminal members (``response.completed``,
  ``response.incomplete``, ``response.failed``, ``error``) or none;
- ``anthropic``: ``message_start``, then content blocks (``content_block_start``, deltas,
  ``content_block_stop``) and ``message_delta`` from ``anthropic.types.RawMessageStreamEvent``'s
  members, and ``message_stop`` or not;
- ``gemini``: ``google.genai.types.GenerateContentResponse`` (its wire fields: the SDK-only
  ``sdk_http_response``, ``automatic_function_calling_history`` and ``parsed`` are left out);
- ``ollama``: ``ollama.ChatResponse`` lines, the last one ``done`` or not;
- ``tgi``: ``huggingface_hub.TextGenerationStreamOutput``, the last one carrying
  ``generated_text`` or not.

Only what the protocol fixes is set by hand: the event's ``type`` discriminator (a member's
``Literal``), the Responses API's response status at ``response.created``, Anthropic's block
``index`` (the open block's), Ollama's ``done`` and TGI's ``generated_text`` (both mark the
end). Fields are serialised by the model (by alias, as on the wire), with nulls kept or left out
per stream; events go out as server-sent events (with ``event:`` lines where the protocol names
its events) or JSON lines (Ollama), the body sometimes cut at a random byte and always split
into random pieces.
"""

from __future__ import annotations

import base64
import datetime
import enum
import itertools
import json
import random
import typing
from collections.abc import Callable
from typing import Any

import ollama
from faker import Faker
from polyfactory.factories import DataclassFactory
from polyfactory.factories.base import BaseFactory
from polyfactory.factories.pydantic_factory import ModelFactory
from polyfactory.field_meta import FieldMeta
from polyfactory.utils.helpers import unwrap_annotation
from polyfactory.utils.predicates import is_union
from pydantic import BaseModel
from streamgen import PROTOCOLS, Transcript

# Strings a field is drawn from besides faker's random letters: empty, whitespace, non-ASCII,
# a character str.splitlines() ends a line at, JSON punctuation.
STRINGS = ("", "", " ", "Hel", "lo", " é", "你好", " 🙂", "\n", "\u2028", '{"a":', "null")

SDK_ONLY = {"sdk_http_response", "automatic_function_calling_history", "parsed"}
"""google-genai fields the SDK fills in itself; a server never sends them."""

# One random and one faker for every factory, seeded again for each transcript (polyfactory
# binds them into its providers once).
_RANDOM = random.Random()
_FAKER = Faker()
_FACTORIES: dict[type[Any], type[BaseFactory[Any]]] = {}
_PROVIDERS: dict[type[Any], dict[Any, Callable[[], Any]]] = {}


def _string(factory: type[BaseFactory[Any]]) -> str:
    rng = factory.__random__
    if rng.random() < 0.5:
        return rng.choice(STRINGS)
    return str(factory.__faker__.pystr(min_chars=1, max_chars=12))


def _scalar(factory: type[BaseFactory[Any]]) -> Any:
    """A value of a field typed ``Any`` or ``object`` (hashable: it may be a mapping's key)."""
    rng = factory.__random__
    return rng.choice((None, 0, 1.5, True, "x", _string(factory)))


_EPOCH = datetime.datetime(2020, 1, 1)


def _seconds(factory: type[BaseFactory[Any]]) -> datetime.timedelta:
    return datetime.timedelta(seconds=factory.__random__.randrange(10**9))


def _image(factory: type[BaseFactory[Any]]) -> ollama.Image:
    """ollama's ``Image`` reads its value as a file path if one exists (and refuses one ending
    in an image's extension, as ``WEbp`` does): always base64 of six bytes here."""
    return ollama.Image(value=base64.b64encode(factory.__random__.randbytes(6)).decode())


class _Fields:
    """What both bases fill differently from polyfactory's defaults (a mixin of both)."""

    __check_model__ = False
    __randomize_collection_length__ = True
    __min_collection_length__ = 0
    __max_collection_length__ = 3
    __faker__ = _FAKER
    __random__ = _RANDOM

    @classmethod
    def get_provider_map(cls) -> dict[Any, Callable[[], Any]]:
        # Made once per factory (polyfactory makes it again for every field).
        if cls not in _PROVIDERS:
            _PROVIDERS[cls] = {
                **super().get_provider_map(),  # type: ignore[misc]
                str: lambda: _string(cls),
                object: lambda: _scalar(cls),
                Any: lambda: _scalar(cls),
                # A field typed as pydantic's BaseModel itself (google-genai has some): no fields.
                BaseModel: lambda: None,
                ollama.Image: lambda: _image(cls),
                # faker draws dates relative to today: a transcript would change every second.
                datetime.datetime: lambda: _EPOCH + _seconds(cls),
                datetime.date: lambda: (_EPOCH + _seconds(cls)).date(),
            }
        return _PROVIDERS[cls]

    @classmethod
    def _get_or_create_factory(cls, model: type[Any]) -> type[BaseFactory[Any]]:
        # Made once per model (polyfactory makes a nested model's factory at every build: most
        # of a build's time).
        if model not in _FACTORIES:
            _FACTORIES[model] = super()._get_or_create_factory(model)  # type: ignore[misc]
        return _FACTORIES[model]

    @classmethod
    def get_field_value(cls, field_meta: FieldMeta, *args: Any, **kwargs: Any) -> Any:
        # A field typed as enum.Enum itself (google-genai has some) has no member to draw.
        annotation = unwrap_annotation(field_meta.annotation)
        if annotation is enum.Enum:
            return None
        if field_meta.children and (is_union(annotation) or is_union(field_meta.annotation)):
            # typing caches a union by its members as a set: Union[A, B] made after Union[B, A]
            # is that one, members in its order, so the order depends on what was imported
            # first. Drawn from a stable order, a transcript does not.
            field_meta.children.sort(key=lambda child: repr(child.annotation))
        if typing.get_args(annotation) == (ollama.Image,):  # a list of images
            return [_image(cls) for _ in range(cls.__random__.randint(0, 2))]  # type: ignore[attr-defined]
        return super().get_field_value(field_meta, *args, **kwargs)  # type: ignore[misc]


class _Models(_Fields, ModelFactory[Any]):
    """The base of every pydantic model's factory (nested models' factories too)."""

    __is_base_factory__ = True


class _Dataclasses(_Fields, DataclassFactory[Any]):
    """The base of every dataclass's factory (huggingface_hub's types are dataclasses)."""

    __is_base_factory__ = True


def _factory(model: type[Any]) -> type[BaseFactory[Any]]:
    if model not in _FACTORIES:
        base: type[BaseFactory[Any]] = _Models if issubclass(model, BaseModel) else _Dataclasses
        _FACTORIES[model] = base.create_factory(model)
    return _FACTORIES[model]


def members(union: Any) -> list[type[Any]]:
    """Every class of a (possibly annotated, possibly nested) union, in its order."""
    if typing.get_origin(union) is typing.Annotated:
        return members(typing.get_args(union)[0])
    if isinstance(union, type):
        return [union]
    return [m for arg in typing.get_args(union) for m in members(arg)]


class _Draw:
    """The draws of one transcript: the structure's and every field's, from one random seeded
    by the transcript's seed, protocol and index (one transcript at a time)."""

    def __init__(self, protocol: str, seed: int, index: int, damage: bool = False) -> None:
        self.rng = _RANDOM
        self.rng.seed(f"typed:{seed}:{protocol}:{index}" + (":damaged" if damage else ""))
        _FAKER.seed_instance(self.rng.getrandbits(32))
        self.notes: list[str] = []
        self.drop_nulls = self.chance(0.5, "no-nulls")
        self.damage = damage

    def chance(self, p: float, note: str) -> bool:
        if self.rng.random() < p:
            self.notes.append(note)
            return True
        return False

    def build(self, model: type[Any], **fixed: Any) -> dict[str, Any]:
        """An instance of ``model`` filled by polyfactory, as the JSON object a server sends
        (``fixed``: the fields the protocol fixes)."""
        made = _factory(model).build(**fixed)
        if isinstance(made, BaseModel):
            data = made.model_dump(mode="json", by_alias=True, exclude=SDK_ONLY)
        else:
            data = json.loads(json.dumps(made))
        self.notes.append(model.__name__)
        data = _without_nulls(data) if self.drop_nulls else data
        return self._damaged(data, frozenset(fixed)) if self.damage else data  # type: ignore[no-any-return]

    def _damaged(self, value: Any, keep: frozenset[str] = frozenset()) -> Any:
        """``value`` with fields missing, null and unknown at random, at every depth (but the
        ``keep`` fields of the top object): what a server the SDK's model does not foresee
        sends."""
        if isinstance(value, list):
            return [self._damaged(item) for item in value]
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for key, item in value.items():
            roll = self.rng.random()
            if key in keep or key == "type" or roll >= 0.3:
                out[key] = self._damaged(item)
            elif roll < 0.15:
                out[key] = None
        if self.rng.random() < 0.2:
            out["x_unknown"] = self.rng.choice((None, 1, "x", [], {"a": None}))
        return out


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


# An event of the logical stream: (its event: name or None, its JSON object).
Event = tuple[str | None, dict[str, Any]]


def _chat_models() -> list[type[Any]]:
    from groq.types.chat import ChatCompletionChunk as GroqChunk
    from huggingface_hub import ChatCompletionStreamOutput
    from mistralai.client.models import CompletionChunk
    from openai.types.chat import ChatCompletionChunk

    return [ChatCompletionChunk, GroqChunk, CompletionChunk, ChatCompletionStreamOutput]


def _chat(d: _Draw) -> tuple[list[Event], bool]:
    models = _chat_models()
    model = models[0] if d.rng.random() < 0.5 else d.rng.choice(models[1:])
    return [(None, d.build(model)) for _ in range(d.rng.randint(1, 6))], True


_RESPONSES_ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def _responses(d: _Draw) -> tuple[list[Event], bool]:
    from openai.types.responses import ResponseCreatedEvent, ResponseStreamEvent

    by_type = {_type_of(m): m for m in members(ResponseStreamEvent)}
    middle = [m for t, m in by_type.items() if t not in _RESPONSES_ENDS]
    created = d.build(ResponseCreatedEvent)
    if isinstance(created.get("response"), dict):
        created["response"]["status"] = "in_progress"
    events: list[Event] = [("response.created", created)]
    for _ in range(d.rng.randint(0, 8)):
        event = d.build(d.rng.choice(middle))
        events.append((event["type"], event))
    end = d.rng.choice((*_RESPONSES_ENDS, "response.completed", None))
    if end is not None:
        events.append((end, d.build(by_type[end])))
    return events, True


def _type_of(model: type[Any]) -> str:
    """The ``type`` discriminator's one value (the member's ``Literal``)."""
    (value,) = typing.get_args(model.model_fields["type"].annotation)
    return str(value)


def _anthropic(d: _Draw) -> tuple[list[Event], bool]:
    from anthropic.types import RawMessageStreamEvent

    by_type = {_type_of(m): m for m in members(RawMessageStreamEvent)}

    def ev(kind: str, **fixed: Any) -> None:
        events.append((kind, d.build(by_type[kind], **fixed)))

    events: list[Event] = []
    ev("message_start")
    for index in range(d.rng.randint(0, 3)):
        ev("content_block_start", index=index)
        for _ in range(d.rng.randint(0, 4)):
            ev("content_block_delta", index=index)
        if d.chance(0.9, "block-stop"):
            ev("content_block_stop", index=index)
    if d.chance(0.9, "message_delta"):
        ev("message_delta")
    if d.chance(0.85, "message_stop"):
        ev("message_stop")
    return events, False


def _gemini(d: _Draw) -> tuple[list[Event], bool]:
    from google.genai.types import GenerateContentResponse

    return [(None, d.build(GenerateContentResponse)) for _ in range(d.rng.randint(1, 4))], False


def _tgi(d: _Draw) -> tuple[list[Event], bool]:
    from huggingface_hub import TextGenerationStreamOutput

    events: list[Event] = []
    for _ in range(d.rng.randint(0, 5)):
        events.append((None, d.build(TextGenerationStreamOutput, generated_text=None)))
    if d.chance(0.85, "final"):
        final = d.build(TextGenerationStreamOutput)
        if final.get("generated_text") is None:
            final["generated_text"] = ""
        events.append((None, final))
    return events, False


def _ollama(d: _Draw) -> list[dict[str, Any]]:
    from ollama import ChatResponse

    lines = [d.build(ChatResponse, done=False) for _ in range(d.rng.randint(0, 5))]
    if d.chance(0.85, "done"):
        lines.append(d.build(ChatResponse, done=True))
    return lines


def _j(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _sse(d: _Draw, events: list[Event], done_ok: bool) -> str:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name is not None else ""
        out.append(f"{head}data: {_j(data)}\n\n")
    if done_ok and d.chance(0.7, "[DONE]"):
        out.append("data: [DONE]\n\n")
    return "".join(out)


_SSE: dict[str, Callable[[_Draw], tuple[list[Event], bool]]] = {
    "openai": _chat,
    "openai-responses": _responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "tgi": _tgi,
}


def generate_typed(protocol: str, seed: int, index: int, damage: bool = False) -> Transcript:
    """Transcript ``index`` of ``protocol`` for ``seed`` from the SDKs' typed models (the same
    arguments give the same bytes); ``damage``: with fields missing, null and unknown at random
    (but the ``type`` discriminators and the fields the protocol fixes)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    d = _Draw(protocol, seed, index, damage)
    if protocol == "ollama":
        text = "".join(_j(line) + "\n" for line in _ollama(d))
        content_type = "application/x-ndjson"
    else:
        events, done_ok = _SSE[protocol](d)
        text = _sse(d, events, done_ok)
        content_type = "text/event-stream"
    body = text.encode()
    if d.chance(0.1, "cut"):
        body = body[: d.rng.randrange(len(body) + 1)]
    cuts = (
        sorted({d.rng.randrange(1, len(body)) for _ in range(d.rng.randint(0, 3))})
        if len(body) > 1
        else []
    )
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    return Transcript(protocol, seed, index, pieces, content_type, notes=d.notes, generator="typed")
