"""The bundled streaming target: a transformers model served as SSE by Starlette on uvicorn."""

from .app import create_app
from .config import TINY_MODEL, TargetConfig

__all__ = ["TINY_MODEL", "TargetConfig", "create_app"]
