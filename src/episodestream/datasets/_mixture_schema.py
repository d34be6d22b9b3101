"""One schema out of many: each source's keys, shapes and statistics mapped onto a declared
output schema, so samples of different datasets batch together.

A :class:`MixtureSchema` declares every output key: its kind (``camera``, ``vector`` or
``passthrough``), shape and dtype. :func:`infer_schema` derives one from several sources'
features for users who do not declare it. :func:`map_source_features` checks one source
against the schema when the mixture is built and returns its :class:`SourceMapper`, which
turns that source's samples into schema-shaped ones and maps its statistics.

Key rules (one source at a time):

- ``key_map`` renames source keys: ``{"observation.images.wrist": "observation.images.hand"}``.
  A key it does not name keeps its own name; a key mapped to ``None`` is dropped. Each name
  in ``key_map`` must be a feature of the source, each target a key of the schema.
- After renaming, a key the schema declares is mapped by its kind; **every other key is
  dropped** (with its ``{key}_is_pad``), so every sample of the mixture has the same keys,
  which a DataLoader's collate needs. Two exceptions: ``task`` (LeRobot's task string) is
  kept as is, and ``source_index`` (int64 0-d tensor) and ``source_id`` (str) are added.
- ``camera`` (C, H, W): only a video feature maps to it, with the same channels. Frames come
  out in the schema's dtype (uint8 frames become float32 as ``x / 255`` when the schema says
  float32; float32 frames never become uint8) and, when the source's size differs, resized
  with bilinear interpolation (antialiased) to fit inside (H, W) keeping the aspect ratio,
  centred, the rest zero (a letterbox; ``resize="none"`` refuses a different size instead).
  ``{camera}_mask`` is a 0-d bool tensor: True when the source has the camera. A camera the
  source lacks is zeros of the schema's shape with the mask False (and ``{camera}_is_pad``
  all True when the camera is stacked over time).
- ``vector`` (D,): a numeric feature of rank 1 and at most D entries, cast to the schema's
  dtype (a float schema takes any numeric source, an integer or bool one only what it holds
  exactly), padded with zeros to D; ``{key}_mask`` is a (D,) bool tensor, True for the
  source's own entries. A vector declared ``required=False`` may be missing from a source:
  zeros, mask all False.
- ``passthrough``: the same shape and dtype in the source as declared; passed unchanged.
- Keys stacked over time by ``delta_timestamps`` (a leading time axis, and ``{key}_is_pad``
  in the sample) are mapped for all their steps at once; ``{key}_is_pad`` is renamed with
  its key. The mapper sees stacking by the presence of ``{key}_is_pad``. For keys the source
  lacks, ``delta_steps`` (steps per output key) says how many zero steps to emit.

Statistics (``meta/stats.json``: per key ``mean``, ``std``, ``min``, ``max``, ``count`` and
quantiles such as ``q01``): :func:`map_stats` renames a source's statistics as its samples
are renamed; a padded vector entry gets the statistics of the zeros the mapper puts there
(every statistic 0, the source's count), so the mixture's statistics are exactly those of
the values it yields: no invented unit scale drags the normalisation of the sources that
do have the entry. An entry padded in every source has a zero spread, which LeRobot's
normaliser (0.4) meets with an epsilon: it normalises to a constant (0 under MEAN_STD, -1
under MIN_MAX and the quantile modes) and unnormalises to about 0, so a policy's output in
a padded action entry decodes to zero. A key the source lacks entirely (a missing
camera, a missing optional vector) contributes no statistics: LeRobot's ``aggregate_stats``
pools each key over the sources that have it, so real frames are normalised by statistics
of real frames and not pulled towards the zeros that stand in (the mask flags those). Camera
statistics describe the source's picture; the letterbox's zero border is not counted.
:func:`aggregate_mapped_stats` pools the sources' mapped statistics exactly as LeRobot's
``aggregate_stats`` does.
"""

from __future__ import annotations

import logging
import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as functional

from episodestream._checks import check_choice, check_int, shown
from episodestream.decode import to_float
from episodestream.errors import ConfigError, ConfigTypeError, SamplingError
from episodestream.lerobot import DatasetMeta, Feature

__all__ = [
    "BOOKKEEPING_KEYS",
    "KeySpec",
    "MixtureSchema",
    "SourceMapper",
    "aggregate_mapped_stats",
    "infer_schema",
    "letterbox",
    "letterbox_geometry",
    "map_source_features",
    "map_stats",
]

logger = logging.getLogger(__name__)

KeyKind = Literal["camera", "vector", "passthrough"]
ResizeMode = Literal["letterbox", "none"]
KeyMap = Mapping[str, "str | None"]

_KINDS = ("camera", "vector", "passthrough")
_RESIZE_MODES = ("letterbox", "none")
_CAMERA_DTYPES = ("float32", "uint8")
_NUMERIC_DTYPES = (
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
)
_STRING = "string"
_STRING_DTYPES = frozenset({"string", "str", "large_string"})
#: vector and camera dtypes torch holds (a sample's tensors are torch tensors)
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
}
#: LeRobot's per-frame bookkeeping columns: passed through, never vectors
BOOKKEEPING_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
MASK_SUFFIX = "_mask"
IS_PAD_SUFFIX = "_is_pad"
TASK_KEY = "task"
SOURCE_INDEX_KEY = "source_index"
SOURCE_ID_KEY = "source_id"
_RESERVED_KEYS = frozenset({TASK_KEY, SOURCE_INDEX_KEY, SOURCE_ID_KEY})
#: largest output dimension (a vector's size, an image side): far above any real one
MAX_SCHEMA_DIM = 1 << 16
#: the statistics that are not per-entry values
_COUNT = "count"


# --------------------------------------------------------------------------------------------
# the schema


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One output key of a :class:`MixtureSchema`.

    Attributes:
        kind: ``camera`` (video frames, shape ``(C, H, W)``), ``vector`` (shape ``(D,)``,
            shorter sources padded with a mask) or ``passthrough`` (identical in every source).
        shape: as above; a passthrough key's shape as ``info.json`` writes it.
        dtype: ``float32`` or ``uint8`` for cameras; a numeric dtype name for vectors; a
            numeric dtype or ``string`` for passthrough keys.
        required: whether every source must have the key (a ``ConfigError`` otherwise).
            A camera or vector not required may be missing from a source: zeros, its mask
            False (:meth:`camera` makes cameras not required unless asked); passthrough keys
            are always required.
    """

    kind: KeyKind
    shape: tuple[int, ...]
    dtype: str
    required: bool = True

    def __post_init__(self) -> None:
        check_choice("KeySpec.kind", self.kind, _KINDS)
        if not isinstance(self.shape, tuple | list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in self.shape
        ):
            raise ConfigTypeError(f"KeySpec.shape must be a tuple of ints, got {shown(self.shape)}")
        object.__setattr__(self, "shape", tuple(self.shape))
        for dim in self.shape:
            check_int("KeySpec.shape", dim, minimum=1, maximum=MAX_SCHEMA_DIM)
        if not isinstance(self.required, bool):
            raise ConfigTypeError(f"KeySpec.required must be a bool, got {shown(self.required)}")
        if self.kind == "camera":
            if len(self.shape) != 3:
                raise ConfigError(
                    f"KeySpec.shape of a camera must be (channels, height, width), got {self.shape}"
                )
            check_choice("KeySpec.dtype of a camera", self.dtype, _CAMERA_DTYPES)
        elif self.kind == "vector":
            if len(self.shape) != 1:
                raise ConfigError(f"KeySpec.shape of a vector must be (size,), got {self.shape}")
            check_choice("KeySpec.dtype of a vector", self.dtype, tuple(_TORCH_DTYPES))
        else:
            check_choice("KeySpec.dtype", self.dtype, (*_NUMERIC_DTYPES, _STRING))
            if not self.required:
                raise ConfigError("KeySpec.required must be True for a passthrough key")

    @classmethod
    def camera(
        cls,
        channels: int,
        height: int,
        width: int,
        *,
        dtype: Literal["float32", "uint8"] = "float32",
        required: bool = False,
    ) -> KeySpec:
        """A camera of ``(channels, height, width)`` frames."""
        return cls("camera", (channels, height, width), dtype, required)

    @classmethod
    def vector(cls, size: int, *, dtype: str = "float32", required: bool = True) -> KeySpec:
        """A vector of ``size`` entries (shorter sources are padded and masked)."""
        return cls("vector", (size,), dtype, required)

    @classmethod
    def passthrough(cls, shape: Sequence[int], dtype: str) -> KeySpec:
        """A key passed unchanged (same shape and dtype in every source)."""
        return cls("passthrough", tuple(shape), dtype, True)

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype of the tensors a camera or vector key comes out as."""
        return _TORCH_DTYPES[self.dtype]


@dataclass(frozen=True, slots=True, eq=False)
class MixtureSchema:
    """The declared output schema of a mixture: every key its samples carry (besides the
    masks, ``{key}_is_pad``, ``task``, ``source_index`` and ``source_id``).

    Attributes:
        keys: output key → :class:`KeySpec`, in output order (kept read-only).
        resize: ``letterbox`` fits a camera of another size inside the schema's (aspect kept,
            zero border); ``none`` refuses a source whose camera size differs.
    """

    keys: Mapping[str, KeySpec]
    resize: ResizeMode = "letterbox"

    def __post_init__(self) -> None:
        if not isinstance(self.keys, Mapping):
            raise ConfigTypeError(
                f"MixtureSchema.keys must be a mapping of key to KeySpec, got {shown(self.keys)}"
            )
        keys = dict(self.keys)
        if not keys:
            raise ConfigError("MixtureSchema.keys must declare at least one key")
        for name, spec in keys.items():
            if not isinstance(name, str) or not name:
                raise ConfigTypeError(f"MixtureSchema.keys: {shown(name)} is not a key name")
            if not isinstance(spec, KeySpec):
                raise ConfigTypeError(
                    f"MixtureSchema.keys[{name!r}] must be a KeySpec, got {shown(spec)}"
                )
            if name in _RESERVED_KEYS:
                raise ConfigError(f"MixtureSchema.keys: {name!r} is reserved for the mapper")
            for derived in (name + MASK_SUFFIX, name + IS_PAD_SUFFIX):
                if derived in keys:
                    raise ConfigError(
                        f"MixtureSchema.keys: {derived!r} would collide with {name!r}'s "
                        f"{derived[len(name) :]}"
                    )
        check_choice("MixtureSchema.resize", self.resize, _RESIZE_MODES)
        object.__setattr__(self, "keys", types.MappingProxyType(keys))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MixtureSchema):
            return NotImplemented
        return list(self.keys.items()) == list(other.keys.items()) and (self.resize == other.resize)

    def __hash__(self) -> int:
        return hash((tuple(self.keys.items()), self.resize))

    def __reduce__(self) -> tuple[Any, ...]:
        # a read-only mapping does not pickle; DataLoader workers receive a plain dict
        return (MixtureSchema, (dict(self.keys), self.resize))

    def _of_kind(self, kind: KeyKind) -> tuple[str, ...]:
        return tuple(name for name, spec in self.keys.items() if spec.kind == kind)

    @property
    def cameras(self) -> tuple[str, ...]:
        """Camera keys, in schema order."""
        return self._of_kind("camera")

    @property
    def vectors(self) -> tuple[str, ...]:
        """Vector keys, in schema order."""
        return self._of_kind("vector")

    @property
    def passthrough(self) -> tuple[str, ...]:
        """Passthrough keys, in schema order."""
        return self._of_kind("passthrough")

    def info_features(self) -> dict[str, dict[str, Any]]:
        """The schema as ``info.json`` ``features`` (for a LeRobot-shaped ``meta``): cameras
        as ``video`` of ``[C, H, W]`` with channel-first names, the rest as declared."""
        features: dict[str, dict[str, Any]] = {}
        for name, spec in self.keys.items():
            if spec.kind == "camera":
                features[name] = {
                    "dtype": "video",
                    "shape": list(spec.shape),
                    "names": ["channels", "height", "width"],
                }
            else:
                features[name] = {"dtype": spec.dtype, "shape": list(spec.shape), "names": None}
        return features


# --------------------------------------------------------------------------------------------
# key maps


def _check_key_map(key_map: Any, where: str) -> dict[str, str | None]:
    if key_map is None:
        return {}
    if not isinstance(key_map, Mapping):
        raise ConfigTypeError(
            f"{where}: key_map must be a mapping of source key to output key, got {shown(key_map)}"
        )
    for source_key, output_key in key_map.items():
        if not isinstance(source_key, str) or not (
            output_key is None or isinstance(output_key, str)
        ):
            raise ConfigTypeError(
                f"{where}: key_map entries must be str -> str or None, got "
                f"{shown(source_key)} -> {shown(output_key)}"
            )
    return dict(key_map)


def _renamed_features(
    meta: DatasetMeta, key_map: Mapping[str, str | None], where: str
) -> dict[str, Feature]:
    """Output key → the source feature that becomes it (``key_map`` applied, dropped keys
    left out)."""
    features = {f.key: f for f in meta.features}
    unknown = [key for key in key_map if key not in features]
    if unknown:
        raise ConfigError(
            f"{where}: key_map names {unknown[0]!r}, which is not a feature of the source "
            f"(its features: {sorted(features)})"
        )
    renamed: dict[str, Feature] = {}
    for key, feature in features.items():
        output = key_map.get(key, key)
        if output is None:
            continue
        if output in renamed:
            raise ConfigError(
                f"{where}: source keys {renamed[output].key!r} and {key!r} both map to "
                f"{output!r}; map one of them elsewhere or to None"
            )
        renamed[output] = feature
    return renamed


# --------------------------------------------------------------------------------------------
# letterbox


def letterbox_geometry(
    height: int, width: int, out_height: int, out_width: int
) -> tuple[int, int, int, int]:
    """Where a ``height`` x ``width`` picture lands inside ``out_height`` x ``out_width``,
    scaled to fit with its aspect ratio kept and centred.

    Returns:
        ``(inner_height, inner_width, top, left)``: the scaled size and its offset.
    """
    scale = min(out_height / height, out_width / width)
    inner_height = min(out_height, max(1, math.floor(height * scale + 0.5)))
    inner_width = min(out_width, max(1, math.floor(width * scale + 0.5)))
    return (
        inner_height,
        inner_width,
        (out_height - inner_height) // 2,
        (out_width - inner_width) // 2,
    )


def _resize(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bilinear, antialiased resize of (N, C, h, w) images; uint8 stays uint8."""
    if images.dtype == torch.uint8 and images.device.type != "cpu":
        # torch's uint8 bilinear kernels are CPU ones: elsewhere, float32 then rounded
        resized = functional.interpolate(
            images.to(torch.float32),
            size=(height, width),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        return resized.round_().clamp_(0, 255).to(torch.uint8)
    return functional.interpolate(
        images, size=(height, width), mode="bilinear", align_corners=False, antialias=True
    )


def letterbox(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``images`` (``(..., C, h, w)``, float or uint8) fitted inside ``height`` x ``width``:
    resized with their aspect ratio kept (bilinear, antialiased), centred, the border zero.

    Every leading axis (time, batch) is done in one call. Images already of the size are
    returned as they are.
    """
    *lead, channels, source_height, source_width = images.shape
    if (source_height, source_width) == (height, width):
        return images
    inner_height, inner_width, top, left = letterbox_geometry(
        source_height, source_width, height, width
    )
    flat = images.reshape(-1, channels, source_height, source_width)
    if (inner_height, inner_width) != (source_height, source_width):
        flat = _resize(flat, inner_height, inner_width)
    if (inner_height, inner_width) == (height, width):
        return flat.reshape(*lead, channels, height, width)
    out = flat.new_zeros((flat.shape[0], channels, height, width))
    out[:, :, top : top + inner_height, left : left + inner_width] = flat
    return out.reshape(*lead, channels, height, width)


# --------------------------------------------------------------------------------------------
# one source


def _castable(source_dtype: str, target_dtype: str) -> bool:
    """A float target takes any numeric source (as a cast does); an integer or bool target
    only sources whose every value it holds exactly."""
    source, target = np.dtype(source_dtype), np.dtype(target_dtype)
    if target.kind == "f":
        return bool(np.can_cast(source, target, "same_kind"))
    return bool(np.can_cast(source, target, "safe"))


@dataclass(frozen=True, slots=True)
class _Route:
    """How one output key is filled from one source."""

    output_key: str
    spec: KeySpec
    source_key: str | None  # None: the source lacks the key
    source_size: int = 0  # vectors: the source's entries
    source_hw: tuple[int, int] = (0, 0)  # cameras: the source's (height, width)
    steps: int | None = None  # missing keys: time steps to emit (from delta_steps)


def _source_feature_error(where: str, feature: Feature, output_key: str, why: str) -> ConfigError:
    named = (
        repr(feature.key)
        if feature.key == output_key
        else f"{feature.key!r} (mapped to {output_key!r})"
    )
    return ConfigError(f"{where}: key {named} {why}")


def _camera_route(
    where: str,
    output_key: str,
    spec: KeySpec,
    feature: Feature,
    schema: MixtureSchema,
    image_dtype: str,
) -> _Route:
    if feature.kind != "video":
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"is a {feature.kind} feature ({feature.dtype}), not a video: only a video "
            "feature maps to a camera",
        )
    channels, height, width = spec.shape
    if feature.channels != channels:
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"has {feature.channels} channel(s); the schema's camera has {channels}",
        )
    if (feature.height, feature.width) != (height, width) and schema.resize == "none":
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"is {feature.height}x{feature.width}; the schema's camera is {height}x{width} "
            "and resize is 'none'",
        )
    if spec.dtype == "uint8" and image_dtype != "uint8":
        raise _source_feature_error(
            where,
            feature,
            output_key,
            "comes as float32 frames (image_dtype); the schema's camera is uint8: open the "
            "source with image_dtype='uint8'",
        )
    return _Route(output_key, spec, feature.key, source_hw=(feature.height, feature.width))


def _vector_route(where: str, output_key: str, spec: KeySpec, feature: Feature) -> _Route:
    if feature.kind != "numeric":
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"is a {feature.kind} feature ({feature.dtype}); a vector needs a numeric one",
        )
    if len(feature.shape) != 1:
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"has shape {list(feature.shape)} (rank {len(feature.shape)}); a vector needs rank 1",
        )
    (size,) = spec.shape
    if feature.shape[0] > size:
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"has {feature.shape[0]} entries, more than the schema's {size}",
        )
    if not _castable(feature.dtype, spec.dtype):
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"is {feature.dtype}, which {spec.dtype} cannot hold exactly",
        )
    return _Route(output_key, spec, feature.key, source_size=feature.shape[0])


def _passthrough_route(where: str, output_key: str, spec: KeySpec, feature: Feature) -> _Route:
    dtype = _STRING if feature.kind == "string" else feature.dtype
    if feature.kind not in ("numeric", "string") or dtype != spec.dtype:
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"is {feature.dtype}; the schema passes {output_key!r} through as {spec.dtype}",
        )
    if feature.shape != spec.shape:
        raise _source_feature_error(
            where,
            feature,
            output_key,
            f"has shape {list(feature.shape)}; the schema passes it through as {list(spec.shape)}",
        )
    return _Route(output_key, spec, feature.key)


def map_source_features(
    meta: DatasetMeta,
    key_map: KeyMap | None,
    schema: MixtureSchema,
    *,
    source_id: str | None = None,
    source_index: int = 0,
    image_dtype: Literal["float32", "uint8"] = "float32",
    delta_steps: Mapping[str, int] | None = None,
) -> SourceMapper:
    """Check one source against ``schema`` and return the mapper of its samples.

    Args:
        meta: the source's metadata (its ``features`` are checked).
        key_map: source key → output key (``None`` drops the key); unnamed keys keep their
            name. See the module docstring for the rules.
        schema: the output schema.
        source_id: how samples and errors name the source (default: ``meta.root``).
        source_index: the source's position in the mixture (``source_index`` of its samples).
        image_dtype: the dtype of the frames the source's dataset yields.
        delta_steps: output key → time steps that ``delta_timestamps`` stack for it; used to
            shape the zeros of keys the source lacks (default: not stacked).

    Raises:
        ConfigError: a key that cannot be mapped (wrong kind, rank, size, channels, dtype),
            a required key the source lacks, or a bad ``key_map``; the message names the
            source and the key.
    """
    if not isinstance(schema, MixtureSchema):
        raise ConfigTypeError(f"schema must be a MixtureSchema, got {shown(schema)}")
    source_index = check_int("source_index", source_index, minimum=0)
    if source_id is None:
        source_id = str(meta.root)
    if not isinstance(source_id, str):
        raise ConfigTypeError(f"source_id must be a str, got {shown(source_id)}")
    check_choice("image_dtype", image_dtype, _CAMERA_DTYPES)
    where = f"source {source_index} ({source_id})"
    key_map = _check_key_map(key_map, where)
    for source_key, output_key in key_map.items():
        if output_key is not None and output_key not in schema.keys:
            raise ConfigError(
                f"{where}: key_map maps {source_key!r} to {output_key!r}, which the schema "
                f"does not declare (it has {list(schema.keys)})"
            )
    steps: dict[str, int] = {}
    for output_key, count in (delta_steps or {}).items():
        if output_key not in schema.keys:
            raise ConfigError(
                f"{where}: delta_steps names {output_key!r}, which the schema does not declare"
            )
        steps[output_key] = check_int(f"delta_steps[{output_key!r}]", count, minimum=1)
    renamed = _renamed_features(meta, key_map, where)
    routes: list[_Route] = []
    for output_key, spec in schema.keys.items():
        feature = renamed.get(output_key)
        if feature is None:
            if spec.required:
                raise ConfigError(
                    f"{where}: lacks {spec.kind} key {output_key!r}, which the schema requires "
                    f"(no feature maps to it; the source has {sorted(renamed)} after key_map)"
                )
            routes.append(_Route(output_key, spec, None, steps=steps.get(output_key)))
        elif spec.kind == "camera":
            routes.append(_camera_route(where, output_key, spec, feature, schema, image_dtype))
        elif spec.kind == "vector":
            routes.append(_vector_route(where, output_key, spec, feature))
        else:
            routes.append(_passthrough_route(where, output_key, spec, feature))
    dropped = tuple(f.key for key, f in renamed.items() if key not in schema.keys)
    dropped += tuple(key for key, output in key_map.items() if output is None)
    effective = {route.source_key: route.output_key for route in routes if route.source_key}
    return SourceMapper(
        source_id=source_id,
        source_index=source_index,
        schema=schema,
        key_map=types.MappingProxyType(effective),
        dropped_keys=tuple(sorted(dropped)),
        routes=tuple(routes),
    )


@dataclass(frozen=True, slots=True, eq=False)
class SourceMapper:
    """Maps one source's samples (and statistics) onto the schema; built by
    :func:`map_source_features`, which has checked every key.

    Attributes:
        source_id, source_index: as every mapped sample carries them.
        schema: the output schema.
        key_map: source key → output key of every key that is mapped.
        dropped_keys: source keys left out (not in the schema after renaming, or mapped to
            None), sorted.
    """

    source_id: str
    source_index: int
    schema: MixtureSchema
    key_map: Mapping[str, str]
    dropped_keys: tuple[str, ...]
    routes: tuple[_Route, ...] = field(repr=False)

    @property
    def missing_keys(self) -> tuple[str, ...]:
        """Output keys the source lacks (zeros with their mask False)."""
        return tuple(r.output_key for r in self.routes if r.source_key is None)

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """The schema-shaped sample of one source sample (torch tensors as the datasets
        return them, stacked over time where ``delta_timestamps`` ask for several steps).

        Raises:
            SamplingError: the sample lacks a key or has a shape its features did not
                declare (naming the source and the key).
        """
        out: dict[str, Any] = {}
        for route in self.routes:
            if route.source_key is None:
                self._missing(route, out)
                continue
            try:
                value = sample[route.source_key]
            except KeyError:
                raise SamplingError(
                    f"{self._where()}: the sample lacks {route.source_key!r}"
                ) from None
            is_pad = sample.get(route.source_key + IS_PAD_SUFFIX)
            if route.spec.kind == "camera":
                out[route.output_key] = self._camera(route, value, stacked=is_pad is not None)
                out[route.output_key + MASK_SUFFIX] = torch.tensor(True)
            elif route.spec.kind == "vector":
                out[route.output_key] = self._vector(route, value, stacked=is_pad is not None)
                mask = torch.zeros(route.spec.shape, dtype=torch.bool)
                mask[: route.source_size] = True
                out[route.output_key + MASK_SUFFIX] = mask
            else:
                out[route.output_key] = value
            if is_pad is not None:
                out[route.output_key + IS_PAD_SUFFIX] = is_pad
        if TASK_KEY in sample:
            out[TASK_KEY] = sample[TASK_KEY]
        out[SOURCE_INDEX_KEY] = torch.tensor(self.source_index, dtype=torch.int64)
        out[SOURCE_ID_KEY] = self.source_id
        return out

    def map_stats(self, stats: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
        """This source's statistics on the output keys (see :func:`map_stats`)."""
        return map_stats(stats, self.key_map, self.schema, source=self._where())

    def __reduce__(self) -> tuple[Any, ...]:
        # sent to DataLoader workers: the read-only key map goes as a plain dict
        return (
            _rebuild_mapper,
            (
                self.source_id,
                self.source_index,
                self.schema,
                dict(self.key_map),
                self.dropped_keys,
                self.routes,
            ),
        )

    def _where(self) -> str:
        return f"source {self.source_index} ({self.source_id})"

    def _missing(self, route: _Route, out: dict[str, Any]) -> None:
        lead = () if route.steps is None else (route.steps,)
        out[route.output_key] = torch.zeros(
            (*lead, *route.spec.shape), dtype=route.spec.torch_dtype
        )
        if route.spec.kind == "camera":
            out[route.output_key + MASK_SUFFIX] = torch.tensor(False)
        else:
            out[route.output_key + MASK_SUFFIX] = torch.zeros(route.spec.shape, dtype=torch.bool)
        if route.steps is not None:
            out[route.output_key + IS_PAD_SUFFIX] = torch.ones(route.steps, dtype=torch.bool)

    def _camera(self, route: _Route, value: Any, *, stacked: bool) -> torch.Tensor:
        channels, height, width = route.spec.shape
        expected = (channels, *route.source_hw)
        if (
            not isinstance(value, torch.Tensor)
            or tuple(value.shape[-3:]) != expected
            or (value.ndim != (4 if stacked else 3))
        ):
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else shown(value)
            raise SamplingError(
                f"{self._where()}: {route.source_key!r} should be {'(T, ' if stacked else '('}"
                f"{', '.join(map(str, expected))}) frames, got {got}"
            )
        images = value if stacked else value.unsqueeze(0)
        if images.dtype != route.spec.torch_dtype:
            if images.dtype == torch.uint8 and route.spec.dtype == "float32":
                images = to_float(images)
            else:
                raise SamplingError(
                    f"{self._where()}: {route.source_key!r} frames are {images.dtype}; the "
                    f"schema's camera is {route.spec.dtype}"
                )
        images = letterbox(images, height, width)
        return images if stacked else images[0]

    def _vector(self, route: _Route, value: Any, *, stacked: bool) -> torch.Tensor:
        tensor = torch.as_tensor(value)
        (size,) = route.spec.shape
        try:
            tensor = tensor.reshape(tensor.shape[0], -1) if stacked else tensor.reshape(-1)
        except (IndexError, RuntimeError):
            tensor = tensor.reshape(-1, 0)  # a 0-d "stacked" value: refused below
        if tensor.shape[-1] != route.source_size:
            raise SamplingError(
                f"{self._where()}: {route.source_key!r} has {tensor.shape[-1]} entries per "
                f"step; its feature declares {route.source_size}"
            )
        dtype = route.spec.torch_dtype
        if route.source_size == size:
            return tensor.to(dtype)
        padded = tensor.new_zeros((*tensor.shape[:-1], size), dtype=dtype)
        padded[..., : route.source_size] = tensor
        return padded


def _rebuild_mapper(
    source_id: str,
    source_index: int,
    schema: MixtureSchema,
    key_map: dict[str, str],
    dropped_keys: tuple[str, ...],
    routes: tuple[_Route, ...],
) -> SourceMapper:
    return SourceMapper(
        source_id, source_index, schema, types.MappingProxyType(key_map), dropped_keys, routes
    )


# --------------------------------------------------------------------------------------------
# inferring a schema


def _vector_candidate(feature: Feature) -> bool:
    return (
        feature.kind == "numeric"
        and len(feature.shape) == 1
        and feature.key not in BOOKKEEPING_KEYS
    )


def infer_schema(
    metas: Sequence[DatasetMeta],
    key_maps: Sequence[KeyMap | None] | None = None,
    *,
    image_size: tuple[int, int] | None = None,
    image_dtype: Literal["float32", "uint8"] = "float32",
    source_ids: Sequence[str] | None = None,
) -> MixtureSchema:
    """A schema that every source maps onto, from their features after ``key_maps``.

    - cameras: every mapped video key of any source (not required); the channels must
      agree; the size is ``image_size`` (height, width), else the largest (by area, the first
      source's on a tie) of the sources' sizes; dtype ``image_dtype``.
    - vectors: rank-1 numeric keys other than LeRobot's bookkeeping columns
      (``BOOKKEEPING_KEYS``), sized to the longest source, of the dtype that holds every
      source's (numpy's promotion); required when every source has the key.
    - passthrough: the other numeric and string keys that every source has with the same
      shape and dtype; others are left out (logged). Still-image features are left out.

    Raises:
        ConfigError: a key that is a camera in one source and something else in another,
            or cameras of different channel counts (naming the sources and the key).
    """
    if not isinstance(metas, Sequence) or not metas:
        raise ConfigError("infer_schema: metas must be a non-empty sequence of DatasetMeta")
    if key_maps is None:
        key_maps = [None] * len(metas)
    if len(key_maps) != len(metas):
        raise ConfigError(
            f"infer_schema: {len(key_maps)} key_maps for {len(metas)} sources (one each)"
        )
    if source_ids is None:
        source_ids = [str(meta.root) for meta in metas]
    if len(source_ids) != len(metas):
        raise ConfigError(f"infer_schema: {len(source_ids)} source_ids for {len(metas)} sources")
    check_choice("image_dtype", image_dtype, _CAMERA_DTYPES)
    if image_size is not None:
        if not isinstance(image_size, tuple | list) or len(image_size) != 2:
            raise ConfigTypeError(f"image_size must be (height, width), got {shown(image_size)}")
        for side in image_size:
            check_int("image_size", side, minimum=1, maximum=MAX_SCHEMA_DIM)
    wheres = [f"source {i} ({sid})" for i, sid in enumerate(source_ids)]
    per_source = [
        _renamed_features(meta, _check_key_map(key_map, where), where)
        for meta, key_map, where in zip(metas, key_maps, wheres, strict=True)
    ]
    # output key → (source number, feature) of every source that has it, in first-seen order
    seen: dict[str, list[tuple[int, Feature]]] = {}
    for number, renamed in enumerate(per_source):
        for output_key, feature in renamed.items():
            seen.setdefault(output_key, []).append((number, feature))
    keys: dict[str, KeySpec] = {}
    for output_key, found in seen.items():
        spec = _inferred_spec(output_key, found, len(metas), wheres, image_size, image_dtype)
        if spec is not None:
            keys[output_key] = spec
    return MixtureSchema(keys)


def _inferred_spec(
    output_key: str,
    found: list[tuple[int, Feature]],
    sources: int,
    wheres: list[str],
    image_size: tuple[int, int] | None,
    image_dtype: str,
) -> KeySpec | None:
    first_number, first = found[0]
    videos = [(n, f) for n, f in found if f.kind == "video"]
    if videos:
        if len(videos) != len(found):
            other_number, other = next((n, f) for n, f in found if f.kind != "video")
            raise ConfigError(
                f"{wheres[other_number]}: key {other.key!r} (as {output_key!r}) is a "
                f"{other.kind} feature, but a video in {wheres[videos[0][0]]}"
            )
        channels = {f.channels for _, f in videos}
        if len(channels) > 1:
            number, odd = next((n, f) for n, f in videos if f.channels != first.channels)
            raise ConfigError(
                f"{wheres[number]}: key {odd.key!r} (as {output_key!r}) has {odd.channels} "
                f"channel(s), {wheres[first_number]} has {first.channels}"
            )
        if image_size is None:
            # the largest area; max() keeps the first of equals
            _, largest = max(videos, key=lambda item: item[1].height * item[1].width)
            height, width = largest.height, largest.width
        else:
            height, width = image_size
        return KeySpec.camera(first.channels, height, width, dtype=image_dtype)  # type: ignore[arg-type]
    if all(_vector_candidate(f) for _, f in found):
        dtype = np.result_type(*(np.dtype(f.dtype) for _, f in found)).name
        if dtype not in _TORCH_DTYPES:
            dtype = "float64" if np.dtype(dtype).kind == "f" else "int64"
        size = max(f.shape[0] for _, f in found)
        return KeySpec.vector(size, dtype=dtype, required=len(found) == sources)
    if any(_vector_candidate(f) for _, f in found):
        number, odd = next((n, f) for n, f in found if not _vector_candidate(f))
        logger.info(
            "infer_schema: %r is a vector in some sources but %s %s in %s; left out",
            output_key,
            odd.kind,
            list(odd.shape),
            wheres[number],
        )
        return None
    if first.kind not in ("numeric", "string"):
        logger.info("infer_schema: %r is a %s feature; left out", output_key, first.kind)
        return None
    dtypes = {_STRING if f.kind == "string" else f.dtype for _, f in found}
    shapes = {f.shape for _, f in found}
    if len(found) != sources or len(dtypes) != 1 or len(shapes) != 1:
        logger.info(
            "infer_schema: %r is not in every source with one shape and dtype; left out",
            output_key,
        )
        return None
    return KeySpec.passthrough(first.shape, dtypes.pop())


# --------------------------------------------------------------------------------------------
# statistics


def map_stats(
    stats: Mapping[str, Mapping[str, Any]],
    key_map: KeyMap | None,
    schema: MixtureSchema,
    *,
    source: str = "the source",
) -> dict[str, dict[str, np.ndarray]]:
    """One source's statistics (``meta/stats.json`` as parsed, or as LeRobot loads it) on the
    output keys: renamed as its samples are, vectors padded with the zeros' statistics (every
    statistic 0 for a padded entry; ``count`` unchanged), keys outside the schema dropped,
    keys the source lacks absent. Values come back as numpy arrays, as LeRobot holds them
    (``np.array`` of the JSON: floats float64, ints int64).

    Raises:
        ConfigError: a vector's statistics longer than the schema's size or not of rank 1,
            naming ``source`` and the key.
    """
    if not isinstance(stats, Mapping):
        raise ConfigTypeError(f"{source}: stats must be a mapping, got {shown(stats)}")
    key_map = _check_key_map(key_map, source)
    mapped: dict[str, dict[str, np.ndarray]] = {}
    for key, values in stats.items():
        output_key = key_map.get(key, key)
        if output_key is None or output_key not in schema.keys:
            continue
        if output_key in mapped:
            raise ConfigError(f"{source}: two statistics keys map to {output_key!r}")
        if not isinstance(values, Mapping):
            raise ConfigTypeError(f"{source}: stats[{key!r}] must be a mapping of statistics")
        spec = schema.keys[output_key]
        entry: dict[str, np.ndarray] = {}
        for name, value in values.items():
            array = np.array(value)
            if spec.kind == "vector" and name != _COUNT:
                array = _padded_stat(array, spec.shape[0], f"{source}: stats[{key!r}][{name!r}]")
            entry[name] = array
        mapped[output_key] = entry
    return mapped


def _padded_stat(array: np.ndarray, size: int, where: str) -> np.ndarray:
    if array.ndim != 1:
        raise ConfigError(f"{where} has shape {array.shape}; a vector's statistics are 1-D")
    if array.shape[0] > size:
        raise ConfigError(f"{where} has {array.shape[0]} entries, more than the schema's {size}")
    if array.shape[0] == size:
        return array
    padded = np.zeros(size, dtype=array.dtype)
    padded[: array.shape[0]] = array
    return padded


def _stacked(entries: list[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    return np.stack([np.asarray(entry[name]) for entry in entries])


def _is_quantile(name: str) -> bool:
    """``q01``, ``q50``, ...: the quantile names LeRobot pools."""
    return name.startswith("q") and name[1:].isdigit()


def _aggregate_key(entries: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One key's statistics pooled over the sources that have it: means weighted by count,
    variances pooled (each source's variance plus its mean's squared distance from the pooled
    mean, weighted by count), min of mins, max of maxes, counts summed; each quantile
    (``q`` and digits) of the first source that every source has, averaged weighted by
    count. Other statistics are not carried over."""
    means = _stacked(entries, "mean")
    variances = _stacked(entries, "std") ** 2
    counts = _stacked(entries, _COUNT)
    total_count = counts.sum(axis=0)
    weights = counts.reshape(counts.shape + (1,) * max(0, means.ndim - counts.ndim))
    total_mean = (means * weights).sum(axis=0) / total_count
    spread = (variances + (means - total_mean) ** 2) * weights
    pooled: dict[str, np.ndarray] = {
        "min": np.min(_stacked(entries, "min"), axis=0),
        "max": np.max(_stacked(entries, "max"), axis=0),
        "mean": total_mean,
        "std": np.sqrt(spread.sum(axis=0) / total_count),
        _COUNT: total_count,
    }
    for name in entries[0]:
        if _is_quantile(name) and all(name in entry for entry in entries):
            values = _stacked(entries, name)
            pooled[name] = (values * weights).sum(axis=0) / total_count
    return pooled


def _check_entry(key: str, number: int, entry: Mapping[str, Any]) -> None:
    """What LeRobot's ``aggregate_stats`` refuses (numpy arrays of rank 1 or more, a count
    of shape (1,)), and the five statistics it reads."""
    where = f"aggregate_mapped_stats: statistics of {key!r} (entry {number})"
    lacking = [name for name in ("mean", "std", "min", "max", _COUNT) if name not in entry]
    if lacking:
        raise ConfigError(f"{where} lack {lacking}")
    for name, value in entry.items():
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            raise ConfigError(f"{where}: {name!r} must be a numpy array of rank 1 or more")
    if entry[_COUNT].shape != (1,):
        raise ConfigError(f"{where}: 'count' must have shape (1,), got {entry[_COUNT].shape}")


def aggregate_mapped_stats(
    stats_list: Sequence[Mapping[str, Mapping[str, Any]]],
) -> dict[str, dict[str, np.ndarray]]:
    """The mixture's statistics from its sources' mapped ones (:func:`map_stats`), computed
    as LeRobot's ``aggregate_stats`` computes them: per key, over the sources that have it.

    Raises:
        ConfigError: no statistics, a key whose entries lack mean, std, min, max or count,
            or values LeRobot refuses (not numpy arrays, 0-d, a count not of shape (1,)).
    """
    if not isinstance(stats_list, Sequence) or not stats_list:
        raise ConfigError("aggregate_mapped_stats: needs the statistics of at least one source")
    keys: dict[str, None] = {}
    for stats in stats_list:
        keys.update(dict.fromkeys(stats))
    pooled: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        entries = [stats[key] for stats in stats_list if key in stats]
        for number, entry in enumerate(entries):
            _check_entry(key, number, entry)
        pooled[key] = _aggregate_key(entries)
    return pooled
