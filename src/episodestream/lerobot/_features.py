"""Typed records for the ``features`` of ``meta/info.json``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from episodestream.errors import DatasetFormatError
from episodestream.lerobot._json import shown_value

__all__ = ["Feature", "FeatureKind", "parse_features"]

logger = logging.getLogger(__name__)

FeatureKind = Literal["numeric", "string", "video", "image"]

_NUMERIC_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    }
)
_STRING_DTYPES = frozenset({"string", "str", "large_string"})
# bounds on a feature's shape: its dimensions are sizes something may allocate
_MAX_DIMS = 32
_MAX_DIM = (1 << 31) - 1
# other spellings of numeric dtypes that Hugging Face datasets' ``Value`` (which LeRobot
# builds its features with) accepts
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "boolean": "bool"}
_CHW = ("channels", "height", "width")
_HWC = ("height", "width", "channels")
# spellings seen in published datasets ("channel" is common for image features)
_AXIS_ALIASES = {
    "channel": "channels",
    "channels": "channels",
    "c": "channels",
    "rgb": "channels",
    "height": "height",
    "h": "height",
    "width": "width",
    "w": "width",
}


@dataclass(frozen=True, slots=True)
class Feature:
    """One entry of ``info.json`` ``features``.

    Attributes:
        key: the feature name, e.g. ``observation.images.cam_high``.
        dtype: as written in ``info.json`` (``float32``, ``int64``, ``video``, ``image``, ...).
        kind: ``numeric`` and ``string`` live in the data Parquet files; ``video`` in MP4
            files; ``image`` (still images inside Parquet) is parsed but not streamed.
        shape: as written in ``info.json``.
        names: per-axis or per-element names when given (a dict of lists is flattened to
            its first list, as LeRobot writes ``{"motors": [...]}``).
        height, width, channels: image geometry of video/image features, taken from
            ``names`` (both ``[channels, height, width]`` and ``[height, width, channels]``
            occur) and cross-checked with ``info``; 0 for other kinds.
        channels_first: whether ``shape`` is channels-first.
        codec, pix_fmt: ``video.codec`` / ``video.pix_fmt`` from ``info`` ("" if absent).
        fps_from_info: ``video.fps`` from the feature's ``info`` (0.0 if absent).
        is_depth_map: ``video.is_depth_map``.
    """

    key: str
    dtype: str
    kind: FeatureKind
    shape: tuple[int, ...]
    names: tuple[str, ...] | None = None
    height: int = 0
    width: int = 0
    channels: int = 0
    channels_first: bool = True
    codec: str = ""
    pix_fmt: str = ""
    fps_from_info: float = 0.0
    is_depth_map: bool = False

    @property
    def is_visual(self) -> bool:
        """True for ``video`` and ``image`` features."""
        return self.kind in ("video", "image")


def _names(raw: Any, *, file: str, key: str) -> tuple[str, ...] | None:
    """Names as writers store them: a list, a nested list, a dict of lists, or null.

    LeRobot's reader never reads them, so what cannot be made a flat list of strings is
    dropped (logged), never refused.
    """
    if isinstance(raw, dict):
        # e.g. {"motors": ["a", "b"]}: one axis named by its list
        lists = [v for v in raw.values() if isinstance(v, list)]
        raw = lists[0] if len(lists) == 1 else None
    if isinstance(raw, list) and raw and all(isinstance(n, list) for n in raw):
        raw = [n for part in raw for n in part]  # [["x", "y", "z"]]: one axis, nested
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        logger.info("%s: features.%s.names is not a list of names; ignored", file, key)
        return None
    return tuple(raw)


def _shape(raw: Any, *, file: str, key: str) -> tuple[int, ...]:
    if (
        not isinstance(raw, list | tuple)
        or not raw
        or len(raw) > _MAX_DIMS
        or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 < d <= _MAX_DIM for d in raw
        )
    ):
        raise DatasetFormatError(
            f"{file}: field features.{key}.shape must be a list of 1 to {_MAX_DIMS} ints in "
            f"[1, 2**31 - 1], got {shown_value(raw)}"
        )
    return tuple(raw)


def _visual(
    key: str,
    dtype: str,
    shape: tuple[int, ...],
    names: tuple[str, ...] | None,
    raw: dict,
    file: str,
) -> Feature:
    if len(shape) != 3:
        raise DatasetFormatError(
            f"{file}: field features.{key}.shape must have 3 axes for a {dtype}, got {shape}"
        )
    axes = tuple(_AXIS_ALIASES.get(n.lower(), n) for n in names) if names is not None else None
    if axes == _CHW:
        channels_first = True
    elif axes == _HWC:
        channels_first = False
    else:
        # no usable names (LeRobot decodes the video whatever they say): the channel axis is
        # the one of size 1, 3 or 4 at either end, the last when neither or both are
        channels_first = shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4)
        if names is not None:
            logger.info(
                "%s: features.%s.names %s do not name the axes of shape %s; channels %s",
                file,
                key,
                list(names),
                list(shape),
                "first" if channels_first else "last",
            )
    if channels_first:
        channels, height, width = shape
    else:
        height, width, channels = shape
    info = raw.get("info") or {}
    if not isinstance(info, dict):
        logger.info("%s: features.%s.info is not an object; ignored", file, key)
        info = {}
    for name, expected in (("video.height", height), ("video.width", width)):
        value = info.get(name)
        if value is not None and value != expected:
            # the decoder reports the video's own size; LeRobot reads neither
            logger.warning(
                "%s: features.%s.info.%s = %s disagrees with shape %s (names %s)",
                file,
                key,
                name,
                value,
                list(shape),
                list(names) if names else None,
            )
    fps = info.get("video.fps", 0.0)
    if (
        not isinstance(fps, int | float)
        or isinstance(fps, bool)
        or (isinstance(fps, int) and fps.bit_length() > _MAX_DIM.bit_length())
        or not 0 <= fps < float("inf")
    ):
        logger.info("%s: features.%s.info.video.fps %s ignored", file, key, shown_value(fps))
        fps = 0.0
    return Feature(
        key=key,
        dtype=dtype,
        kind="video" if dtype == "video" else "image",
        shape=shape,
        names=names,
        height=height,
        width=width,
        channels=channels,
        channels_first=channels_first,
        codec=str(info.get("video.codec") or ""),
        pix_fmt=str(info.get("video.pix_fmt") or ""),
        fps_from_info=float(fps),
        is_depth_map=bool(info.get("video.is_depth_map", False)),
    )


def parse_features(raw: Any, *, file: str) -> tuple[Feature, ...]:
    """Parse ``info.json`` ``features`` into :class:`Feature` records, in file order.

    Raises:
        DatasetFormatError: naming ``file`` and the offending ``features.<key>`` field.
    """
    if not isinstance(raw, dict) or not raw:
        raise DatasetFormatError(f"{file}: field 'features' must be a non-empty object")
    features: list[Feature] = []
    for key, spec in raw.items():
        if not isinstance(key, str) or not key:
            raise DatasetFormatError(f"{file}: field 'features' has an empty or non-string key")
        if not isinstance(spec, dict):
            raise DatasetFormatError(f"{file}: field features.{key} must be an object")
        dtype = spec.get("dtype")
        if not isinstance(dtype, str):
            raise DatasetFormatError(f"{file}: field features.{key}.dtype is missing")
        dtype = _DTYPE_ALIASES.get(dtype, dtype)
        shape = _shape(spec.get("shape"), file=file, key=key)
        names = _names(spec.get("names"), file=file, key=key)
        if dtype in ("video", "image"):
            features.append(_visual(key, dtype, shape, names, spec, file))
        elif dtype in _NUMERIC_DTYPES:
            features.append(Feature(key=key, dtype=dtype, kind="numeric", shape=shape, names=names))
        elif dtype in _STRING_DTYPES:
            features.append(Feature(key=key, dtype=dtype, kind="string", shape=shape, names=names))
        else:
            raise DatasetFormatError(
                f"{file}: field features.{key}.dtype {dtype!r} is not supported (expected "
                f"video, image, string or one of {sorted(_NUMERIC_DTYPES)})"
            )
    return tuple(features)
