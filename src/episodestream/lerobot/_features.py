"""Typed records for the ``features`` of ``meta/info.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from episodestream.errors import DatasetFormatError

__all__ = ["Feature", "FeatureKind", "parse_features"]

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
_STRING_DTYPES = frozenset({"string", "str"})
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
    if raw is None:
        return None
    if isinstance(raw, dict):
        # e.g. {"motors": ["a", "b"]}: one axis named by its list
        lists = [v for v in raw.values() if isinstance(v, list)]
        raw = lists[0] if len(lists) == 1 else None
        if raw is None:
            return None
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise DatasetFormatError(f"{file}: field features.{key}.names must be a list of strings")
    return tuple(raw)


def _shape(raw: Any, *, file: str, key: str) -> tuple[int, ...]:
    if (
        not isinstance(raw, list | tuple)
        or not raw
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in raw)
    ):
        raise DatasetFormatError(
            f"{file}: field features.{key}.shape must be a non-empty list of positive ints, "
            f"got {raw!r}"
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
    elif names is None or len(names) != 3:
        # no usable names: the channel axis is the one of size 1, 3 or 4 at either end
        channels_first = shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4)
        if not channels_first and shape[2] not in (1, 3, 4):
            raise DatasetFormatError(
                f"{file}: field features.{key}: cannot tell the channel axis of shape {shape}"
            )
    else:
        raise DatasetFormatError(
            f"{file}: field features.{key}.names must be {list(_CHW)} or {list(_HWC)}, "
            f"got {list(names)}"
        )
    if channels_first:
        channels, height, width = shape
    else:
        height, width, channels = shape
    info = raw.get("info") or {}
    if not isinstance(info, dict):
        raise DatasetFormatError(f"{file}: field features.{key}.info must be an object")
    for name, expected in (("video.height", height), ("video.width", width)):
        value = info.get(name)
        if value is not None and value != expected:
            raise DatasetFormatError(
                f"{file}: field features.{key}.info.{name} = {value} disagrees with shape "
                f"{list(shape)} (names {list(names) if names else None})"
            )
    fps = info.get("video.fps", 0.0)
    if not isinstance(fps, int | float) or isinstance(fps, bool) or fps < 0:
        raise DatasetFormatError(f"{file}: field features.{key}.info.video.fps is invalid")
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
