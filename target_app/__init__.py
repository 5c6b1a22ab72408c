"""The bundled streaming target: a transformers model served as SSE by Starlette on uvicorn.

``create_app`` loads on first access (PEP 562), so ``python -m target_app`` can say which of its
packages are missing in one line before anything imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import TINY_MODEL, TargetConfig

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["TINY_MODEL", "TargetConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
