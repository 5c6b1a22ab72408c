"""Pure parts without a server: device selection, config checks, CLI flags, the tiny model.

Most of target_app's modules import torch (3 s of CPU): each test imports what it uses, so that
collecting this module does not cost every xdist worker that.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from target_app.config import TargetConfig
from target_app.slow_reader import DrainWatch


@pytest.mark.parametrize(
    ("requested", "cuda", "expected"),
    [("auto", True, "cuda"), ("auto", False, "cpu"), ("cpu", True, "cpu"), ("cuda", True, "cuda")],
)
def test_select_device(requested: str, cuda: bool, expected: str) -> None:
    from target_app.device import select_device

    assert select_device(requested, cuda_available=cuda) == expected  # type: ignore[arg-type]


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    from target_app.device import DeviceSelectionError, select_device

    with pytest.raises(DeviceSelectionError, match=r"--device cuda .*is_available\(\) is False"):
        select_device("cuda", cuda_available=False)


@pytest.mark.parametrize(
    ("requested", "device", "bf16", "expected"),
    [
        ("auto", "cpu", False, "float32"),
        ("auto", "cuda", True, "bfloat16"),
        ("auto", "cuda", False, "float16"),
        ("float16", "cuda", True, "float16"),
        ("bfloat16", "cpu", False, "bfloat16"),
        ("float32", "cuda", True, "float32"),
    ],
)
def test_select_dtype(requested: str, device: str, bf16: bool, expected: str) -> None:
    import torch

    from target_app.device import select_dtype

    got = select_dtype(requested, device=device, bf16_supported=bf16)  # type: ignore[arg-type]
    assert got == getattr(torch, expected)


def test_bfloat16_on_a_gpu_without_it_is_an_error() -> None:
    from target_app.device import DeviceSelectionError, select_dtype

    with pytest.raises(DeviceSelectionError, match="does not support it"):
        select_dtype("bfloat16", device="cuda", bf16_supported=False)


def test_config_problems_name_the_flag() -> None:
    from target_app.cli import build_parser, config_from_args

    problems = TargetConfig(
        max_concurrency=0, heartbeat=-1, send_timeout=0, send_buffer=-1
    ).problems()
    assert any("--max-concurrency" in p for p in problems)
    assert any("--send-buffer" in p for p in problems)
    assert any("--heartbeat" in p for p in problems)
    assert any("--send-timeout" in p for p in problems)
    assert TargetConfig().problems() == []
    (problem,) = TargetConfig(max_unsent_bytes=0).problems()
    assert problem == "--max-unsent-bytes must be >= 1 byte, got 0"
    (problem,) = TargetConfig(cpu_threads=-1).problems()
    assert problem == "--cpu-threads must be >= 0 (0: torch's own), got -1"
    assert config_from_args(build_parser().parse_args(["--cpu-threads", "0"])).cpu_threads == 0
    args = build_parser().parse_args(["--max-unsent-bytes", "4096", "--send-timeout", "2.5"])
    assert (config_from_args(args).max_unsent_bytes, config_from_args(args).send_timeout) == (
        4096,
        2.5,
    )


class _Connection:
    """What ``progress()`` of the target's protocol reports, set by hand: the bytes a client
    has taken and the bytes the server still holds for it."""

    def __init__(self) -> None:
        self.taken = 0
        self.held = 0

    def progress(self) -> tuple[int, int]:
        return self.taken, self.held

    def write(self, size: int) -> None:
        self.held += size

    def take(self, size: int) -> None:
        self.taken += size
        self.held -= size


def test_drain_watch_ages_the_oldest_byte_the_client_has_not_taken() -> None:
    connection = _Connection()
    watch = DrainWatch(connection.progress, max_wait_s=10.0, max_unsent_bytes=1000)
    for at in (0.0, 1.0, 2.0):
        watch.offer(at)
        connection.write(100)
        watch.written()
    assert watch.oldest_wait(5.0) == 5.0
    # Taking part of the first write does not make its bytes any younger.
    connection.take(50)
    assert watch.oldest_wait(5.0) == 5.0
    connection.take(100)
    assert watch.oldest_wait(5.0) == 4.0
    assert watch.time_left(5.0) == 6.0
    assert watch.problem(5.0) is None
    # A reader that keeps taking, but ever later: the second write's rest waits past 10 s.
    problem = watch.problem(11.5)
    assert problem is not None
    assert "10.5 s ago" in problem
    assert "--send-timeout 10" in problem
    connection.take(150)
    assert watch.oldest_wait(20.0) == 0.0
    # A write still waiting in send counts from when it was offered.
    watch.offer(20.0)
    assert watch.oldest_wait(23.0) == 3.0


def test_drain_watch_bounds_the_bytes_held_for_a_client() -> None:
    connection = _Connection()
    watch = DrainWatch(connection.progress, max_wait_s=10.0, max_unsent_bytes=1000)
    watch.offer(0.0)
    connection.write(1001)
    watch.written()
    assert watch.problem(0.0) == (
        "slow reader: 1001 bytes written were not taken by the client (--max-unsent-bytes 1000)"
    )
    connection.take(1)
    assert watch.problem(0.0) is None


def test_cli_maps_flags_and_rejects_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    from target_app.cli import build_parser, config_from_args, main

    args = build_parser().parse_args(
        ["--engine", "generate", "--max-concurrency", "8", "--heartbeat", "0", "--naive"]
    )
    config = config_from_args(args)
    assert (config.engine, config.max_concurrency, config.heartbeat, config.naive) == (
        "generate",
        8,
        0.0,
        True,
    )
    assert config.max_new_tokens_limit == 2000
    with pytest.raises(SystemExit) as exit_info:
        main(["--max-concurrency", "0"])
    assert exit_info.value.code == 2
    assert "--max-concurrency must be >= 1" in capsys.readouterr().err


def test_cache_is_sized_for_the_admission_bound() -> None:
    from target_app.engines.batch import cache_sizing

    sizing = cache_sizing(max_concurrency=64, context_length=2048)
    blocks_per_request = 2048 // sizing["page_size"]
    assert sizing["num_blocks"] >= 65 * blocks_per_request
    assert sizing["max_batch_tokens"] >= 64


def test_tiny_model_builds_once_and_concurrent_builds_agree(tmp_path: Path) -> None:
    from target_app.tiny_model import ensure_tiny_model, tiny_model_dir

    errors: list[BaseException] = []

    def build() -> None:
        try:
            ensure_tiny_model(tmp_path)
        except BaseException as exc:
            errors.append(exc)

    builders = [threading.Thread(target=build) for _ in range(2)]
    for thread in builders:
        thread.start()
    for thread in builders:
        thread.join()
    assert errors == []
    built = tiny_model_dir(tmp_path)
    assert {p.name for p in built.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    assert [p.name for p in tmp_path.iterdir()] == [built.name], "no staging directory left"
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(tmp_path) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp


def test_tiny_model_loads_through_from_pretrained(tiny_cache: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    from target_app.tiny_model import tiny_model_dir, vocabulary_words

    directory = tiny_model_dir(tiny_cache)
    config = AutoConfig.from_pretrained(directory)
    assert config.max_position_embeddings >= 2048
    tokenizer = AutoTokenizer.from_pretrained(directory)
    words = vocabulary_words()
    assert len(set(words)) == len(words)
    assert all(w.isalpha() for w in words)
    ids = tokenizer(" ".join(words[:5]), add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == " ".join(words[:5])


def test_send_buffer_is_inherited_by_accepted_connections() -> None:
    from target_app.cli import bind_listener

    listener = bind_listener("127.0.0.1", 0, 8192)
    listener.listen()
    with listener, socket.create_connection(listener.getsockname()):
        accepted, _ = listener.accept()
        with accepted:
            size = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    # Linux doubles the requested size for bookkeeping; the point is that it is fixed and
    # small, not the default that grows to megabytes.
    assert 8192 <= size <= 4 * 8192
