"""Device and dtype selection as pure functions, so the CUDA path is tested without a GPU."""

from __future__ import annotations

import torch

from .config import DeviceChoice, DtypeChoice


class DeviceSelectionError(ValueError):
    """The requested device or dtype cannot be used on this machine."""


_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def select_device(requested: DeviceChoice, *, cuda_available: bool) -> str:
    """Return ``"cpu"`` or ``"cuda"`` for the ``--device`` choice.

    ``auto`` takes CUDA when torch can see a GPU. Asking for ``cuda`` on a machine without one is
    an error that says so, instead of a late failure inside the first forward pass.
    """
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested == "cuda":
        if not cuda_available:
            raise DeviceSelectionError(
                "--device cuda was requested but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); "
                "use --device cpu or --device auto"
            )
        return "cuda"
    raise DeviceSelectionError(f"--device {requested!r} is not one of auto, cpu, cuda")


def select_dtype(requested: DtypeChoice, *, device: str, bf16_supported: bool) -> torch.dtype:
    """Return the torch dtype for the ``--dtype`` choice on ``device``.

    ``auto`` is float32 on CPU (half precision is slow there) and bfloat16 on CUDA where the GPU
    supports it, else float16. An explicit bfloat16 on a CUDA GPU without support is an error.
    """
    if requested == "auto":
        if device == "cuda":
            return torch.bfloat16 if bf16_supported else torch.float16
        return torch.float32
    if requested not in _DTYPES:
        raise DeviceSelectionError(
            f"--dtype {requested!r} is not one of auto, {', '.join(sorted(_DTYPES))}"
        )
    if requested == "bfloat16" and device == "cuda" and not bf16_supported:
        raise DeviceSelectionError(
            "--dtype bfloat16 was requested but this GPU does not support it; "
            "use --dtype float16 or --dtype auto"
        )
    return _DTYPES[requested]


def probe_device(requested: DeviceChoice, dtype: DtypeChoice) -> tuple[str, torch.dtype]:
    """Select device and dtype for this machine by asking torch what it has."""
    cuda = torch.cuda.is_available()
    device = select_device(requested, cuda_available=cuda)
    bf16 = bool(cuda and torch.cuda.is_bf16_supported())
    return device, select_dtype(dtype, device=device, bf16_supported=bf16)
