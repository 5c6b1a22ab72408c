"""Fixtures for the live check against ``transformers serve``: the tiny model, chat-ready."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# The tiny tokenizer is word-level and turns anything that is not one of its words into <unk>,
# so the template adds no role markers: it joins the messages' text. transformers serve needs a
# template of some kind (it renders every chat request with apply_chat_template).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """A private copy of the bundled tiny model, with a chat template, for ``transformers serve``
    (session scope). The shared cache's copy stays as the bundled target expects it."""
    # Imported here, not at collection: torch and transformers cost every xdist worker seconds.
    from transformers import AutoTokenizer

    from target_app.tiny_model import ensure_tiny_model

    directory = tmp_path_factory.mktemp("served") / "tiny-chat-model"
    shutil.copytree(ensure_tiny_model(model_cache), directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return directory
