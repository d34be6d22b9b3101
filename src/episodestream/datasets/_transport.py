"""uint8 transport: frames cross DataLoader workers as uint8 (4x less than float32) and become
LeRobot's float32 values on the training device, in one call after the loader."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any, TypeVar

import torch

from episodestream._checks import shown
from episodestream.decode import parse_device, to_float
from episodestream.errors import ConfigTypeError

__all__ = ["images_to_float"]

Batch = TypeVar("Batch", bound=MutableMapping[str, Any])


def images_to_float(
    batch: Batch,
    keys: Iterable[str] | None = None,
    *,
    device: torch.device | str | None = None,
    non_blocking: bool = True,
) -> Batch:
    """Turn a batch's uint8 image tensors into float32 in [0, 1] (``x / 255``, exactly the
    values ``image_dtype="float32"`` — and LeRobot — return), optionally moving them to
    ``device`` first so the conversion runs there. Replaces the entries in place and returns
    the batch::

        pool = EpisodePoolDataset(root, image_dtype="uint8")
        for batch in DataLoader(pool, batch_size=32, num_workers=8, pin_memory=True):
            batch = images_to_float(batch, device="cuda")

    Args:
        batch: a collated sample dict (or one sample).
        keys: the entries to convert (default: every uint8 tensor, which in our samples are the
            camera frames).
        device: where to convert; other entries stay where they are.

    Raises:
        ConfigTypeError: ``batch`` is not a dict of tensors.
        ConfigError: ``device`` is not one torch names.
    """
    if not isinstance(batch, MutableMapping):
        raise ConfigTypeError(f"batch must be a dict of tensors, got {shown(batch)}")
    if device is not None:
        device = parse_device(device)
    names = (
        [name for name, value in batch.items() if _is_uint8(value)] if keys is None else list(keys)
    )
    for name in names:
        value = batch[name]
        if not _is_uint8(value):
            continue  # already converted, or not an image
        if device is not None:
            value = value.to(device, non_blocking=non_blocking)
        batch[name] = to_float(value)  # LeRobot's x / 255 exactly, on any device
    return batch


def _is_uint8(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8
