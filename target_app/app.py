"""The Starlette app factory: routes, lifespan (load, warm up, ready), metrics."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .config import TargetConfig
from .engines import GenerationRequest, make_engine
from .engines.incident import incident_response
from .engines.naive import NaiveRunner
from .errors import ApiError
from .formats import ChatFormat, CompletionFormat, NativeFormat, StreamFormat
from .json_input import decode_json_object
from .loading import LoadedModel, load_model
from .responses import SHUTTING_DOWN, GenerationResponse
from .state import TargetState
from .stream import Done, Failed, TokenStream
from .validation import (
    ClientGone,
    GenerationParams,
    check_prompt_chars,
    check_prompt_length,
    parse_chat,
    parse_completion,
    parse_generate,
    read_body,
)

WARM_UP_TIMEOUT_S = 120.0
"""The warm-up generation must finish within this; a real model's first CUDA call is slow."""


Parse = Callable[[dict[str, Any], int, bool], GenerationParams]


@dataclass(frozen=True)
class _Prepared:
    params: GenerationParams
    input_ids: list[int]


def create_app(config: TargetConfig | None = None) -> Starlette:
    """Build the target app. The model loads in the background after startup; ``/readyz`` says
    when it is loaded and warmed up."""
    config = config or TargetConfig()
    problems = config.problems()
    if problems:
        raise ValueError("; ".join(problems))
    state = TargetState(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        probe = asyncio.create_task(state.metrics.probe_loop_lag())
        loader = asyncio.create_task(_load_and_warm_up(state))
        try:
            yield
        finally:
            state.ready = False
            state.metrics.ready.set(0)
            probe.cancel()
            # Loading runs in a thread that cannot be interrupted; wait for it so the engine
            # it creates is closed rather than left running after shutdown.
            await loader
            await state.close_engine()

    routes = [
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", _bind(_readyz, state), methods=["GET"]),
        Route("/metrics", _bind(_metrics, state), methods=["GET"]),
        Route("/generate", _bind(_generate, state), methods=["POST"]),
        Route("/v1/completions", _bind(_completions, state), methods=["POST"]),
        Route("/v1/chat/completions", _bind(_chat, state), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.target = state
    return app


def _bind(
    handler: Callable[[Request, TargetState], Any], state: TargetState
) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Any:
        return await handler(request, state)

    endpoint.__name__ = handler.__name__
    return endpoint


async def _load_and_warm_up(state: TargetState) -> None:
    config = state.config
    try:
        loaded = await asyncio.to_thread(load_model, config)
        state.loaded = loaded
        if config.naive:
            state.naive = NaiveRunner(loaded, config.stream_timeout)
            state.metrics.track_engine(state.naive.threads, state.naive.threads)
        else:
            engine = make_engine(loaded, config)
            await asyncio.to_thread(engine.start)
            state.engine = engine
            state.metrics.track_engine(engine.in_flight, engine.threads, engine.queue_depths)
        if loaded.device == "cuda":
            state.metrics.track_cuda()
        await _warm_up(state, loaded)
    except Exception as exc:
        state.load_error = f"{type(exc).__name__}: {exc}"
        print(
            f"streamguard target: loading failed: {state.load_error}", file=sys.stderr, flush=True
        )
        return
    state.ready = True
    state.metrics.ready.set(1)


async def _warm_up(state: TargetState, loaded: LoadedModel) -> None:
    """One short generation through the chosen engine, so the first client does not pay for
    first-call costs (allocator, kernels, CUDA context)."""
    request = GenerationRequest(
        request_id=f"warmup-{uuid.uuid4().hex}",
        input_ids=loaded.encode("hello world") or [0],
        max_new_tokens=2,
        ignore_eos=True,
        raise_after=None,
    )
    if state.naive is not None:
        generation = state.naive.open(request)
        while not isinstance(await asyncio.to_thread(generation.next_item), Done):
            pass
        return
    assert state.engine is not None
    stream = TokenStream(request.request_id, max_backlog=16)
    state.engine.submit(request, stream)
    try:
        async with asyncio.timeout(WARM_UP_TIMEOUT_S):
            while True:
                item = await stream.get(WARM_UP_TIMEOUT_S)
                if isinstance(item, Failed):
                    raise RuntimeError(f"warm-up generation failed: {item.message}")
                if isinstance(item, Done):
                    return
    finally:
        stream.cancel()


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _readyz(request: Request, state: TargetState) -> Response:
    if state.draining:
        return JSONResponse({"status": "shutting_down", "error": SHUTTING_DOWN}, status_code=503)
    failure = state.engine.failure() if state.engine is not None else None
    if state.ready and failure is None:
        loaded = state.loaded
        assert loaded is not None
        return JSONResponse(
            {
                "status": "ready",
                "model": loaded.name,
                "engine": "naive" if state.config.naive else state.config.engine,
                "device": loaded.device,
                "dtype": str(loaded.dtype).removeprefix("torch."),
                "context_length": loaded.context_length,
                "max_new_tokens_limit": state.config.max_new_tokens_limit,
            }
        )
    error = failure or state.load_error
    status = "failed" if error else "loading"
    return JSONResponse({"status": status, "error": error}, status_code=503)


async def _metrics(request: Request, state: TargetState) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _generate(request: Request, state: TargetState) -> Any:
    return await _handle(request, state, parse_generate, "prompt", lambda model, n: NativeFormat(n))


async def _completions(request: Request, state: TargetState) -> Any:
    return await _handle(request, state, parse_completion, "prompt", CompletionFormat)


async def _chat(request: Request, state: TargetState) -> Any:
    return await _handle(request, state, parse_chat, "messages", ChatFormat)


async def _handle(
    request: Request,
    state: TargetState,
    parse: Parse,
    prompt_field: str,
    make_format: Callable[[str, int], StreamFormat],
) -> Any:
    arrival = time.perf_counter()
    config = state.config
    if state.draining:
        state.metrics.rejected.labels("shutting_down").inc()
        return JSONResponse(
            {"error": f"{SHUTTING_DOWN}: no new streams are admitted"},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    try:
        raw = await read_body(request, config.max_body_bytes, config.body_timeout)
        # Decoding a megabyte of JSON and tokenizing a long prompt take milliseconds of CPU
        # each; on the loop they would stall every open stream.
        prepared = await asyncio.to_thread(
            _prepare, raw, parse, config, state.loaded if state.ready else None, prompt_field
        )
    except ClientGone:
        state.metrics.rejected.labels("client_gone").inc()
        # Nothing can be sent on a closed connection; uvicorn drops what a handler returns.
        return Response(status_code=400)
    except ApiError as err:
        reason = "not_ready" if err.status == 503 else "bad_request"
        state.metrics.rejected.labels(reason).inc()
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)
    loaded = state.loaded
    assert loaded is not None
    params = prepared.params
    generation = GenerationRequest(
        request_id=uuid.uuid4().hex,
        input_ids=prepared.input_ids,
        max_new_tokens=params.max_new_tokens,
        ignore_eos=params.ignore_eos,
        raise_after=params.fault.raise_after,
    )
    fmt = make_format(params.model or loaded.name, len(prepared.input_ids))
    if config.text_streamer_timeout is not None and params.stream:
        return incident_response(
            loaded, generation, fmt, params.fault, config.text_streamer_timeout
        )
    return GenerationResponse(
        state,
        generation,
        fmt,
        streaming=params.stream,
        fault=params.fault,
        arrival=arrival,
    )


def _prepare(
    raw: bytes,
    parse: Parse,
    config: TargetConfig,
    loaded: LoadedModel | None,
    prompt_field: str,
) -> _Prepared:
    """Decode, check and tokenize a request body (runs in a worker thread)."""
    params = parse(decode_json_object(raw), config.max_new_tokens_limit, config.allow_fault_knobs)
    if loaded is None:
        raise ApiError(
            503,
            "the model is not loaded and warmed up yet; poll GET /readyz",
            headers={"Retry-After": "1"},
        )
    chars = len(params.prompt or "") + sum(len(m["content"]) for m in params.messages or [])
    check_prompt_chars(chars, loaded.context_length, prompt_field)
    input_ids = loaded.encode(_prompt_text(loaded, params))
    check_prompt_length(len(input_ids), params.max_new_tokens, loaded.context_length, prompt_field)
    return _Prepared(params, input_ids)


def _prompt_text(loaded: LoadedModel, params: GenerationParams) -> str:
    if params.messages is None:
        assert params.prompt is not None
        return params.prompt
    if getattr(loaded.tokenizer, "chat_template", None):
        rendered: str = loaded.tokenizer.apply_chat_template(
            params.messages, tokenize=False, add_generation_prompt=True
        )
        return rendered
    # Models without a chat template (the tiny one) see the turns' text in order.
    return "\n".join(message["content"] for message in params.messages)
