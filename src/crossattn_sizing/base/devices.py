"""Device checks: a run that asks for CUDA without one stops with one clear error."""

from __future__ import annotations

from crossattn_sizing.base.errors import DeviceError


def require_device(device: str) -> None:
    """Raise :class:`DeviceError` unless ``device`` can run torch kernels here."""
    if device == "cpu":
        return
    if device != "cuda":
        raise DeviceError(f"--device {device!r}: use cpu or cuda")
    try:
        import torch
    except ImportError as exc:
        raise DeviceError("--device cuda: torch is not installed") from exc
    if not torch.cuda.is_available():
        raise DeviceError(
            "--device cuda: no CUDA device is available (torch.cuda.is_available() is False; "
            f"torch {torch.__version__}). Run on a GPU machine with a CUDA build of torch."
        )
