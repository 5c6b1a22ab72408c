"""Loading a model and tokenizer through ``from_pretrained`` on the selected device."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from .config import TINY_MODEL, TargetConfig
from .device import probe_device
from .tiny_model import ensure_tiny_model


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for generation, with what the request validation needs to know about it."""

    name: str
    model: Any
    tokenizer: Any
    device: str
    dtype: torch.dtype
    context_length: int
    eos_token_ids: frozenset[int]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens added (the prompt as written)."""
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids


def load_model(config: TargetConfig) -> LoadedModel:
    """Load ``config.model`` (the tiny model by default) onto the selected device, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    device, dtype = probe_device(config.device, config.dtype)
    # The tiny model's ops take microseconds: a second thread only adds its hand-offs (and spins
    # on a core the proxy and the client need). 8 streams of 48 tokens on a 2-core machine: 0.34 s
    # and 1.5 s of CPU on torch's 2 threads, 0.19 s and 1.0 s on 1.
    threads = 1 if config.cpu_threads is None and config.model == TINY_MODEL else config.cpu_threads
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    if config.model == TINY_MODEL:
        # The tiny model never needs the network; make sure nothing tries.
        os.environ["HF_HUB_OFFLINE"] = "1"
        source = str(ensure_tiny_model())
    else:
        source = config.model
    tokenizer = AutoTokenizer.from_pretrained(source)
    model: Any = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    model = model.to(device).eval()
    if model.generation_config.pad_token_id is None and tokenizer.eos_token_id is not None:
        model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.generation_config.do_sample = False
    return LoadedModel(
        name=config.model,
        model=model,
        tokenizer=tokenizer,
        device=device,
        dtype=dtype,
        context_length=_context_length(model.config),
        eos_token_ids=_eos_ids(model.generation_config.eos_token_id),
    )


def _context_length(model_config: Any) -> int:
    text_config = model_config.get_text_config()
    for attribute in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(text_config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def _eos_ids(value: int | list[int] | None) -> frozenset[int]:
    if value is None:
        return frozenset()
    if isinstance(value, int):
        return frozenset({value})
    return frozenset(value)
