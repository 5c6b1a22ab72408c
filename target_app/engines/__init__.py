"""Generation engines behind one interface: continuous batching or one generate() per request."""

from __future__ import annotations

from ..config import TargetConfig
from ..loading import LoadedModel
from .base import Engine, GenerationRequest
from .batch import BatchEngine
from .generate import GenerateEngine

__all__ = ["BatchEngine", "Engine", "GenerateEngine", "GenerationRequest", "make_engine"]


def make_engine(loaded: LoadedModel, config: TargetConfig) -> Engine:
    """The engine ``--engine`` names, for ``loaded``."""
    if config.engine == "batch":
        return BatchEngine(loaded, config)
    return GenerateEngine(loaded, config)
