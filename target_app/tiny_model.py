"""The offline tiny model: a random-init Llama with a word-level tokenizer trained in code.

It is written once to a cache directory and then loaded with ``from_pretrained`` like any
Hugging Face model, so the real loading path runs. Every token is a visible word and the
generation config suppresses the special tokens, so a request for N new tokens streams exactly
N words. Weights come from a fixed seed; decoding is greedy, so outputs are deterministic.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import torch

TINY_MODEL_VERSION = 1
"""Bump when the recipe changes, so caches built by an older recipe are not reused."""

CONTEXT_POSITIONS = 2048
_SEED = 1234
_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
_COMPLETE_MARKER = "streamguard-complete"


def cache_root() -> Path:
    """Where built models live: ``$STREAMGUARD_CACHE`` or ``~/.cache/pytest-streamguard``."""
    configured = os.environ.get("STREAMGUARD_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "pytest-streamguard"


def tiny_model_dir(root: Path | None = None) -> Path:
    """Where this version of the tiny model lives (whether or not it is built yet)."""
    return (root or cache_root()) / f"tiny-model-v{TINY_MODEL_VERSION}"


def vocabulary_words() -> list[str]:
    """The model's words: 600 pronounceable, letters-only syllable pairs, in a fixed order."""
    onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
    vowels = ["a", "e", "i", "o", "u"]
    syllables = [c + v for c, v in itertools.product(onsets, vowels)]
    words = [a + b for a, b in itertools.product(syllables, syllables)]
    return words[:600]


def ensure_tiny_model(root: Path | None = None) -> Path:
    """Return the tiny model's directory, building it first if it is not there yet.

    The build goes to a temporary directory next to the target and is renamed into place, so a
    reader never sees half a model and two processes building at once both end up with one
    complete copy (the loser of the rename discards its own).
    """
    final = tiny_model_dir(root)
    if (final / _COMPLETE_MARKER).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-model-build-", dir=final.parent))
    try:
        _build(staging)
        (staging / _COMPLETE_MARKER).write_text(f"{TINY_MODEL_VERSION}\n", encoding="utf-8")
        try:
            os.rename(staging, final)
        except OSError:
            if not (final / _COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _build(directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    vocab = {token: i for i, token in enumerate([*_SPECIAL_TOKENS, *vocabulary_words()])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    # WordPiece's decoder joins words with spaces, so decoding token by token gives " word".
    backend.decoder = decoders.WordPiece(prefix="##")
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=CONTEXT_POSITIONS,
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT_POSITIONS,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
    )
    # A private RNG stream: building the model must not disturb the caller's global seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    generation = model.generation_config
    generation.do_sample = False
    # A random model would sometimes pick <unk>, <s>, </s> or <pad>; suppressing them keeps
    # every streamed token a visible word and every stream exactly max_new_tokens long.
    generation.suppress_tokens = [vocab[token] for token in _SPECIAL_TOKENS]
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
