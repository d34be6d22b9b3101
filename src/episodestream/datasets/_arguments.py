"""The datasets' own arguments, checked as given, before the dataset is opened: a value no
dataset could take fails at once, typed, without a request to the store.

What only the dataset can tell (whether the episodes exist, whether the delta keys are
features and their offsets multiples of 1/fps, whether the budget holds an episode) is checked
once it is open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from episodestream._checks import shown
from episodestream.datasets._options import ImageDtype
from episodestream.errors import ConfigTypeError, SamplingError
from episodestream.sampling import check_delta_timestamps, episode_selection

__all__ = ["check_bool", "check_sample_arguments"]

_IMAGE_DTYPES = ("float32", "uint8")


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (a truthy string or number is not one)."""
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{name} must be a bool, got {shown(value)}")
    return value


def check_sample_arguments(
    *,
    episodes: object,
    delta_timestamps: object,
    image_dtype: object,
    return_uint8: object,
    image_transforms: object,
    depth_output_unit: object,
) -> tuple[np.ndarray | None, ImageDtype]:
    """What both dataset classes check before opening anything.

    Returns:
        The episodes asked for (int64, in the caller's order; None: all) and the image dtype
        samples carry (``return_uint8`` folded in).

    Raises:
        SamplingError: ``episodes`` or ``delta_timestamps`` no dataset could take
            (:func:`~episodestream.sampling.episode_selection`,
            :func:`~episodestream.sampling.check_delta_timestamps`), or an unknown
            ``image_dtype``.
        ConfigTypeError: ``return_uint8`` not a bool, ``image_transforms`` not callable,
            ``depth_output_unit`` not a str.
    """
    ids = episode_selection(episodes)
    check_delta_timestamps(delta_timestamps)
    if not isinstance(image_dtype, str) or image_dtype not in _IMAGE_DTYPES:
        raise SamplingError(f"image_dtype must be 'float32' or 'uint8', got {shown(image_dtype)}")
    check_bool("return_uint8", return_uint8)
    if image_transforms is not None and not isinstance(image_transforms, Callable):
        raise ConfigTypeError(
            f"image_transforms must be a callable (frames -> frames), got {shown(image_transforms)}"
        )
    if depth_output_unit is not None and not isinstance(depth_output_unit, str):
        raise ConfigTypeError(f"depth_output_unit must be a str, got {shown(depth_output_unit)}")
    dtype: ImageDtype = "uint8" if return_uint8 else image_dtype  # type: ignore[assignment]
    return ids, dtype
