"""One schema out of many (datasets/_mixture_schema.py): key maps, padding and masks, missing
cameras, letterbox resize, delta stacking, the ConfigErrors of unmappable sources, inferred
schemas and statistics.

Samples are real ones: lerobot_sim5 (3 cameras 96x128, state and action of 6) opened with
EpisodeStreamDataset; other sources are its metadata with features changed.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as functional

from episodestream import EpisodeStreamDataset
from episodestream.datasets._mixture_schema import (
    KeySpec,
    MixtureSchema,
    aggregate_mapped_stats,
    infer_schema,
    letterbox,
    letterbox_geometry,
    map_source_features,
    map_stats,
)
from episodestream.errors import ConfigError, ConfigTypeError, SamplingError
from episodestream.lerobot import DatasetMeta

HIGH = "observation.images.cam_high"
LEFT = "observation.images.cam_left_wrist"
RIGHT = "observation.images.cam_right_wrist"
STATE = "observation.state"
HAND = "observation.images.hand"
DELTAS = {HIGH: [-0.1, 0.0], "action": [0.0, 1 / 30, 2 / 30], STATE: [-1 / 30, 0.0]}
FRAME = 3


def _open(root: Path, cache: Path, **kwargs: Any) -> EpisodeStreamDataset:
    return EpisodeStreamDataset(root, cache_dir=cache, **kwargs)


@pytest.fixture(scope="module")
def sim5(
    lerobot_fixture_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """lerobot_sim5's metadata and frame 3 as float32, uint8 and stacked by DELTAS."""
    cache = tmp_path_factory.mktemp("mixture-schema")
    with (
        _open(lerobot_fixture_root, cache) as plain,
        _open(lerobot_fixture_root, cache, image_dtype="uint8") as uint8,
        _open(lerobot_fixture_root, cache, delta_timestamps=DELTAS) as stacked,
    ):
        yield {
            "meta": plain.meta.dataset_meta,
            "sample": plain[FRAME],
            "uint8": uint8[FRAME],
            "stacked": stacked[FRAME],
        }


def _meta_with(meta: DatasetMeta, **changes: dict[str, Any] | None) -> DatasetMeta:
    """``meta`` with features changed: ``{key: {field: value}}`` edits one (``key`` renames
    it), ``{key: None}`` removes it."""
    features = []
    for feature in meta.features:
        change = changes.get(feature.key, {})
        if change is None:
            continue
        features.append(dataclasses.replace(feature, **change))
    return dataclasses.replace(meta, features=tuple(features))


def _schema(**extra: KeySpec) -> MixtureSchema:
    return MixtureSchema(
        {
            HIGH: KeySpec.camera(3, 96, 128),
            STATE: KeySpec.vector(6),
            "action": KeySpec.vector(6),
            **extra,
        }
    )


# --------------------------------------------------------------------------------------------
# renaming and dropping


def test_key_map_renames_a_camera_and_a_vector_and_drops_what_the_schema_lacks(sim5):
    schema = MixtureSchema(
        {
            HAND: KeySpec.camera(3, 96, 128),
            "state": KeySpec.vector(6),
            "action": KeySpec.vector(6),
            "timestamp": KeySpec.passthrough((1,), "float32"),
        }
    )
    mapper = map_source_features(
        sim5["meta"],
        {LEFT: HAND, STATE: "state", HIGH: None},
        schema,
        source_id="sim5",
        source_index=4,
    )
    sample = sim5["sample"]
    out = mapper(sample)
    assert torch.equal(out[HAND], sample[LEFT])
    assert out[f"{HAND}_mask"].dtype == torch.bool and bool(out[f"{HAND}_mask"])
    assert torch.equal(out["state"], sample[STATE])
    assert torch.equal(out["state_mask"], torch.ones(6, dtype=torch.bool))
    assert torch.equal(out["action"], sample["action"])
    assert torch.equal(out["timestamp"], sample["timestamp"])
    assert out["task"] == sample["task"]
    assert out["source_index"].dtype == torch.int64 and int(out["source_index"]) == 4
    assert out["source_id"] == "sim5"
    # everything else is dropped, so every source's samples have the same keys
    assert set(out) == {
        HAND,
        f"{HAND}_mask",
        "state",
        "state_mask",
        "action",
        "action_mask",
        "timestamp",
        "task",
        "source_index",
        "source_id",
    }
    assert mapper.key_map == {
        LEFT: HAND,
        STATE: "state",
        "action": "action",
        "timestamp": "timestamp",
    }
    assert HIGH in mapper.dropped_keys and RIGHT in mapper.dropped_keys
    assert "frame_index" in mapper.dropped_keys
    assert mapper.missing_keys == ()


def test_mapped_tensors_do_not_share_memory_with_the_mask_of_another_sample(sim5):
    mapper = map_source_features(sim5["meta"], None, _schema(), source_id="sim5")
    first, second = mapper(sim5["sample"]), mapper(sim5["sample"])
    first["action_mask"][0] = False  # a training step may edit a sample in place
    assert bool(second["action_mask"][0])


# --------------------------------------------------------------------------------------------
# vectors: pad and mask


def test_a_shorter_vector_is_padded_with_zeros_and_masked(sim5):
    schema = MixtureSchema({STATE: KeySpec.vector(8), "action": KeySpec.vector(9, dtype="float64")})
    out = map_source_features(sim5["meta"], None, schema, source_id="sim5")(sim5["sample"])
    state = sim5["sample"][STATE]
    assert out[STATE].shape == (8,) and out[STATE].dtype == torch.float32
    assert torch.equal(out[STATE][:6], state)
    assert torch.equal(out[STATE][6:], torch.zeros(2))
    assert out[f"{STATE}_mask"].tolist() == [True] * 6 + [False] * 2
    action = out["action"]
    assert action.dtype == torch.float64 and action.shape == (9,)
    assert torch.equal(action[:6], sim5["sample"]["action"].to(torch.float64))
    assert out["action_mask"].tolist() == [True] * 6 + [False] * 3


def test_a_scalar_column_maps_to_a_vector_of_one_entry_and_more(sim5):
    schema = MixtureSchema({"clock": KeySpec.vector(2, dtype="float64")})
    mapper = map_source_features(sim5["meta"], {"timestamp": "clock"}, schema, source_id="s")
    out = mapper(sim5["sample"])  # timestamp is a 0-d tensor in a sample
    assert out["clock"].tolist() == [float(sim5["sample"]["timestamp"]), 0.0]
    assert out["clock_mask"].tolist() == [True, False]


def test_an_optional_vector_the_source_lacks_is_zeros_with_a_false_mask(sim5):
    schema = _schema(**{"observation.environment_state": KeySpec.vector(4, required=False)})
    mapper = map_source_features(
        sim5["meta"],
        None,
        schema,
        source_id="sim5",
        delta_steps={"observation.environment_state": 2},
    )
    out = mapper(sim5["sample"])
    env = "observation.environment_state"
    assert torch.equal(out[env], torch.zeros(2, 4))
    assert torch.equal(out[f"{env}_mask"], torch.zeros(4, dtype=torch.bool))
    assert torch.equal(out[f"{env}_is_pad"], torch.ones(2, dtype=torch.bool))
    assert mapper.missing_keys == (env,)


# --------------------------------------------------------------------------------------------
# cameras: missing, dtypes, letterbox


def test_a_camera_the_source_lacks_is_zeros_with_its_mask_false(sim5):
    schema = _schema(**{"observation.images.top": KeySpec.camera(3, 96, 128)})
    mapper = map_source_features(sim5["meta"], None, schema, source_id="sim5")
    out = mapper(sim5["sample"])
    top = out["observation.images.top"]
    assert top.shape == (3, 96, 128) and top.dtype == torch.float32
    assert not top.any()
    assert out["observation.images.top_mask"].shape == () and not out["observation.images.top_mask"]
    assert bool(out[f"{HIGH}_mask"])
    assert "observation.images.top_is_pad" not in out
    assert mapper.missing_keys == ("observation.images.top",)


def test_a_missing_camera_stacked_over_time_has_every_step_padded(sim5):
    schema = _schema(**{"observation.images.top": KeySpec.camera(3, 96, 128, dtype="uint8")})
    mapper = map_source_features(
        sim5["meta"],
        None,
        schema,
        source_id="sim5",
        image_dtype="uint8",
        delta_steps={"observation.images.top": 2},
    )
    out = mapper(sim5["uint8"])
    assert out["observation.images.top"].shape == (2, 3, 96, 128)
    assert out["observation.images.top"].dtype == torch.uint8
    assert not out["observation.images.top"].any()
    assert out["observation.images.top_is_pad"].tolist() == [True, True]
    assert not out["observation.images.top_mask"]


def test_uint8_frames_stay_uint8_and_become_float32_as_the_dataset_would(sim5):
    uint8_schema = MixtureSchema({HIGH: KeySpec.camera(3, 96, 128, dtype="uint8")})
    float_schema = MixtureSchema({HIGH: KeySpec.camera(3, 96, 128)})
    meta = sim5["meta"]
    kept = map_source_features(meta, None, uint8_schema, source_id="s", image_dtype="uint8")
    out = kept(sim5["uint8"])
    assert out[HIGH].dtype == torch.uint8
    assert torch.equal(out[HIGH], sim5["uint8"][HIGH])
    converted = map_source_features(meta, None, float_schema, source_id="s", image_dtype="uint8")
    out = converted(sim5["uint8"])
    # x / 255 exactly, as the float32 dataset returns it
    assert out[HIGH].dtype == torch.float32
    assert torch.equal(out[HIGH], sim5["sample"][HIGH])


def test_letterbox_geometry_keeps_the_aspect_ratio_and_centres():
    assert letterbox_geometry(96, 128, 96, 128) == (96, 128, 0, 0)
    assert letterbox_geometry(48, 64, 96, 96) == (72, 96, 12, 0)
    assert letterbox_geometry(96, 128, 64, 64) == (48, 64, 8, 0)
    assert letterbox_geometry(100, 50, 60, 80) == (60, 30, 0, 25)
    assert letterbox_geometry(3, 1000, 8, 8) == (1, 8, 3, 0)  # at least one row


@pytest.mark.parametrize(
    ("dtype", "value"), [(torch.uint8, 200), (torch.float32, 0.25), (torch.float32, 0.7)]
)
def test_letterbox_of_a_constant_image_is_constant_inside_and_zero_outside(dtype, value):
    images = torch.full((2, 3, 48, 64), value, dtype=dtype)  # two time steps at once
    out = letterbox(images, 96, 96)  # scaled 1.5x to 72x96, rows 12..83
    assert out.shape == (2, 3, 96, 96) and out.dtype == dtype
    inside = out[:, :, 12:84, :]
    if dtype == torch.uint8:
        assert torch.equal(inside, torch.full_like(inside, value))
    else:  # interpolation weights sum to 1 within float32 rounding
        assert torch.allclose(inside, torch.full_like(inside, value), rtol=0, atol=1e-6)
    assert torch.equal(out[:, :, :12, :], torch.zeros(2, 3, 12, 96, dtype=dtype))
    assert torch.equal(out[:, :, 84:, :], torch.zeros(2, 3, 12, 96, dtype=dtype))


def test_letterbox_downscales_with_antialiasing():
    # a one-pixel checkerboard of 3x3 shrunk to 1x1: plain bilinear samples the centre pixel
    # (0) only; the antialiased filter weighs all nine, five of them 0 and four 1
    board = (torch.arange(9).reshape(1, 1, 3, 3) % 2).to(torch.float32)
    out = letterbox(board, 1, 1)
    assert out.shape == (1, 1, 1, 1)
    assert 0.4 < out.item() < 0.6
    plain = functional.interpolate(board, size=(1, 1), mode="bilinear", align_corners=False)
    assert plain.item() == 0.0


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_a_camera_of_another_size_is_letterboxed_into_the_schema(sim5, dtype):
    schema = MixtureSchema({HAND: KeySpec.camera(3, 96, 96, dtype=dtype)})
    sample = sim5["uint8"] if dtype == "uint8" else sim5["sample"]
    mapper = map_source_features(
        sim5["meta"], {HIGH: HAND}, schema, source_id="sim5", image_dtype=dtype
    )
    out = mapper(sample)[HAND]
    assert out.shape == (3, 96, 96) and out.dtype == sample[HIGH].dtype
    # 96x128 into 96x96: 72x96, rows 12..83
    expected = functional.interpolate(
        sample[HIGH][None], size=(72, 96), mode="bilinear", align_corners=False, antialias=True
    )[0]
    assert torch.equal(out[:, 12:84, :], expected)
    assert not out[:, :12].any() and not out[:, 84:].any()


def test_resize_none_refuses_a_camera_of_another_size(sim5):
    schema = MixtureSchema({HIGH: KeySpec.camera(3, 96, 96)}, resize="none")
    with pytest.raises(ConfigError, match=r"source 0 \(sim5\).*cam_high.*96x128.*resize is 'none'"):
        map_source_features(sim5["meta"], None, schema, source_id="sim5")


# --------------------------------------------------------------------------------------------
# delta stacking


def test_keys_stacked_over_time_are_mapped_for_every_step_at_once(sim5):
    schema = MixtureSchema(
        {
            "cam": KeySpec.camera(3, 64, 64),
            STATE: KeySpec.vector(8),
            "action": KeySpec.vector(7),
        }
    )
    mapper = map_source_features(sim5["meta"], {HIGH: "cam"}, schema, source_id="sim5")
    stacked = sim5["stacked"]
    out = mapper(stacked)
    assert out["cam"].shape == (2, 3, 64, 64)  # 96x128 -> 48x64, rows 8..55
    for step in range(2):
        alone = letterbox(stacked[HIGH][step], 64, 64)
        assert torch.equal(out["cam"][step], alone)
    assert not out["cam"][:, :, :8].any() and not out["cam"][:, :, 56:].any()
    assert torch.equal(out["cam_is_pad"], stacked[f"{HIGH}_is_pad"])
    assert out["action"].shape == (3, 7)
    assert torch.equal(out["action"][:, :6], stacked["action"])
    assert not out["action"][:, 6].any()
    assert out["action_mask"].tolist() == [True] * 6 + [False]
    assert torch.equal(out["action_is_pad"], stacked["action_is_pad"])
    assert out[STATE].shape == (2, 8)
    assert torch.equal(out[STATE][:, :6], stacked[STATE])
    assert f"{HIGH}_is_pad" not in out


def test_a_sample_that_contradicts_its_features_is_a_sampling_error(sim5):
    mapper = map_source_features(sim5["meta"], None, _schema(), source_id="sim5")
    sample = dict(sim5["sample"])
    sample["action"] = torch.zeros(7)
    with pytest.raises(SamplingError, match=r"source 0 \(sim5\).*'action' has 7 entries"):
        mapper(sample)
    del sample["action"]
    with pytest.raises(SamplingError, match=r"source 0 \(sim5\).*lacks 'action'"):
        mapper(sample)
    sample = dict(sim5["sample"])
    sample[HIGH] = torch.zeros(3, 48, 64)
    with pytest.raises(SamplingError, match=r"source 0 \(sim5\).*cam_high"):
        mapper(sample)


# --------------------------------------------------------------------------------------------
# ConfigErrors at construction, each naming the source and the key


def _error(meta: DatasetMeta, key_map: Any, schema: MixtureSchema, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        map_source_features(meta, key_map, schema, source_id="robot-x", source_index=2, **kwargs)
    message = str(caught.value)
    assert "source 2 (robot-x)" in message
    return message


def test_a_vector_longer_than_the_schema_is_refused(sim5):
    message = _error(sim5["meta"], None, _schema(**{STATE: KeySpec.vector(4)}))
    assert re.search(r"'observation.state' has 6 entries, more than the schema's 4", message)


def test_a_vector_of_the_wrong_rank_is_refused(sim5):
    meta = _meta_with(sim5["meta"], **{STATE: {"shape": (2, 3)}})
    message = _error(meta, None, _schema())
    assert "'observation.state'" in message and "rank 2" in message


def test_a_non_video_feature_into_a_camera_is_refused(sim5):
    schema = MixtureSchema({HAND: KeySpec.camera(3, 96, 128)})
    message = _error(sim5["meta"], {STATE: HAND}, schema)
    assert f"'observation.state' (mapped to '{HAND}')" in message
    assert "not a video" in message


def test_a_still_image_feature_into_a_camera_is_refused(sim5):
    meta = _meta_with(sim5["meta"], **{HIGH: {"kind": "image", "dtype": "image"}})
    message = _error(meta, None, _schema())
    assert "'observation.images.cam_high'" in message and "image feature" in message


def test_a_video_into_a_vector_is_refused(sim5):
    message = _error(sim5["meta"], {LEFT: "action", "action": None}, _schema())
    assert "cam_left_wrist' (mapped to 'action')" in message and "numeric" in message


def test_a_camera_of_other_channels_is_refused(sim5):
    meta = _meta_with(sim5["meta"], **{HIGH: {"channels": 1, "shape": (1, 96, 128)}})
    message = _error(meta, None, _schema())
    assert "'observation.images.cam_high' has 1 channel(s)" in message


def test_a_vector_dtype_the_schema_cannot_hold_is_refused(sim5):
    message = _error(sim5["meta"], None, _schema(action=KeySpec.vector(6, dtype="int64")))
    assert "'action' is float32, which int64 cannot hold" in message


def test_float_frames_into_a_uint8_camera_are_refused(sim5):
    schema = MixtureSchema({HIGH: KeySpec.camera(3, 96, 128, dtype="uint8")})
    message = _error(sim5["meta"], None, schema)
    assert "cam_high" in message and "image_dtype='uint8'" in message


def test_a_passthrough_of_another_shape_or_dtype_is_refused(sim5):
    message = _error(sim5["meta"], None, _schema(timestamp=KeySpec.passthrough((1,), "float64")))
    assert "'timestamp' is float32" in message
    message = _error(sim5["meta"], None, _schema(index=KeySpec.passthrough((2,), "int64")))
    assert "'index' has shape [1]" in message


def test_a_required_key_the_source_lacks_is_refused(sim5):
    message = _error(sim5["meta"], None, _schema(**{"observation.velocity": KeySpec.vector(6)}))
    assert "lacks vector key 'observation.velocity'" in message
    message = _error(sim5["meta"], None, _schema(wrist=KeySpec.camera(3, 96, 128, required=True)))
    assert "lacks camera key 'wrist'" in message


def test_bad_key_maps_are_refused(sim5):
    message = _error(sim5["meta"], {"observation.images.nope": HIGH}, _schema())
    assert "'observation.images.nope', which is not a feature of the source" in message
    message = _error(sim5["meta"], {LEFT: "observation.images.elsewhere"}, _schema())
    assert "maps 'observation.images.cam_left_wrist' to 'observation.images.elsewhere'" in message
    message = _error(sim5["meta"], {LEFT: HIGH}, _schema())
    assert f"'{HIGH}' and '{LEFT}' both map to '{HIGH}'" in message
    with pytest.raises(ConfigTypeError, match=r"source 2 \(robot-x\).*key_map"):
        map_source_features(sim5["meta"], {LEFT: 3}, _schema(), source_id="robot-x", source_index=2)


def test_delta_steps_must_name_schema_keys(sim5):
    message = _error(sim5["meta"], None, _schema(), delta_steps={"nope": 2})
    assert "delta_steps names 'nope'" in message
    with pytest.raises(ConfigError, match="delta_steps"):
        map_source_features(sim5["meta"], None, _schema(), delta_steps={"action": 0})


def test_schema_values_are_checked():
    with pytest.raises(ConfigError, match=r"KeySpec\.kind"):
        KeySpec("image", (3, 4, 4), "uint8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="camera must be"):
        KeySpec("camera", (4, 4), "uint8")
    with pytest.raises(ConfigError, match="dtype of a camera"):
        KeySpec.camera(3, 4, 4, dtype="float64")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="vector must be"):
        KeySpec("vector", (2, 3), "float32")
    with pytest.raises(ConfigError, match=r"KeySpec\.shape"):
        KeySpec.vector(0)
    with pytest.raises(ConfigError, match="passthrough"):
        KeySpec("passthrough", (1,), "int64", required=False)
    with pytest.raises(ConfigError, match="reserved"):
        MixtureSchema({"source_index": KeySpec.vector(1)})
    with pytest.raises(ConfigError, match="'action_mask' would collide"):
        MixtureSchema({"action": KeySpec.vector(2), "action_mask": KeySpec.vector(2)})
    with pytest.raises(ConfigTypeError, match="must be a KeySpec"):
        MixtureSchema({"action": (2,)})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="resize"):
        MixtureSchema({"action": KeySpec.vector(2)}, resize="stretch")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least one"):
        MixtureSchema({})


def test_schemas_are_values():
    one = MixtureSchema({"a": KeySpec.vector(2), "b": KeySpec.camera(3, 4, 4)})
    two = MixtureSchema({"a": KeySpec.vector(2), "b": KeySpec.camera(3, 4, 4)})
    assert one == two and hash(one) == hash(two)
    assert one != MixtureSchema({"a": KeySpec.vector(3), "b": KeySpec.camera(3, 4, 4)})
    assert one.cameras == ("b",) and one.vectors == ("a",) and one.passthrough == ()
    with pytest.raises(TypeError):
        one.keys["c"] = KeySpec.vector(1)  # type: ignore[index]
    assert one.info_features()["b"] == {
        "dtype": "video",
        "shape": [3, 4, 4],
        "names": ["channels", "height", "width"],
    }


# --------------------------------------------------------------------------------------------
# inferring a schema


def test_infer_schema_unions_cameras_and_takes_the_largest_sizes(sim5):
    meta = sim5["meta"]
    other = _meta_with(
        meta,
        **{
            LEFT: {
                "key": "observation.images.wrist",
                "height": 120,
                "width": 160,
                "shape": (3, 120, 160),
            },
            STATE: {"shape": (9,), "dtype": "float64"},
            "action": {"shape": (4,)},
            RIGHT: None,
            "task_index": None,
        },
    )
    schema = infer_schema(
        [meta, other], [None, {"observation.images.wrist": HAND}], source_ids=["a", "b"]
    )
    assert list(schema.keys)[:5] == [STATE, "action", HIGH, LEFT, RIGHT]
    assert schema.keys[HIGH] == KeySpec.camera(3, 96, 128)
    assert schema.keys[HAND] == KeySpec.camera(3, 120, 160)
    assert schema.keys[RIGHT] == KeySpec.camera(3, 96, 128)
    assert schema.keys[STATE] == KeySpec.vector(9, dtype="float64")
    assert schema.keys["action"] == KeySpec.vector(6)
    # bookkeeping columns every source has pass through; one a source lacks is left out
    assert schema.keys["timestamp"] == KeySpec.passthrough((1,), "float32")
    assert schema.keys["index"] == KeySpec.passthrough((1,), "int64")
    assert "task_index" not in schema.keys
    # every source maps onto it
    for number, (source, key_map) in enumerate(
        [(meta, None), (other, {"observation.images.wrist": HAND})]
    ):
        map_source_features(source, key_map, schema, source_index=number)
    declared = infer_schema([meta, other], image_size=(64, 64), image_dtype="uint8")
    assert declared.keys[HIGH] == KeySpec.camera(3, 64, 64, dtype="uint8")


def test_infer_schema_refuses_a_key_of_two_kinds_or_channel_counts(sim5):
    meta = sim5["meta"]
    clash = _meta_with(meta, **{STATE: {"key": "state_vec"}, HIGH: {"key": STATE}})
    with pytest.raises(
        ConfigError,
        match=r"source 0 \(a\): key 'observation.state' .*numeric feature, but a video in "
        r"source 1 \(b\)",
    ):
        infer_schema([meta, clash], source_ids=["a", "b"])
    mono = _meta_with(meta, **{HIGH: {"channels": 1, "shape": (1, 96, 128)}})
    with pytest.raises(ConfigError, match=r"source 1 \(b\).*cam_high.*1 channel"):
        infer_schema([meta, mono], source_ids=["a", "b"])
    with pytest.raises(ConfigError, match="2 key_maps for 1 sources"):
        infer_schema([meta], [None, None])


# --------------------------------------------------------------------------------------------
# statistics


def test_map_stats_renames_pads_and_drops(sim5):
    stats = sim5["meta"].stats
    schema = MixtureSchema(
        {
            HAND: KeySpec.camera(3, 96, 128),
            "state": KeySpec.vector(8),
            "observation.images.top": KeySpec.camera(3, 96, 128),
        }
    )
    mapped = map_stats(stats, {LEFT: HAND, STATE: "state"}, schema)
    assert set(mapped) == {HAND, "state"}  # a camera the source lacks contributes nothing
    for name, value in stats[LEFT].items():
        assert np.array_equal(mapped[HAND][name], np.array(value))
    state = mapped["state"]
    assert set(state) == set(stats[STATE])
    assert np.array_equal(state["count"], np.array([244]))
    for name in ("mean", "std", "min", "max", "q01", "q99"):
        assert state[name].shape == (8,)
        assert np.array_equal(state[name][:6], np.array(stats[STATE][name]))
        assert np.array_equal(state[name][6:], [0.0, 0.0]), name  # the zeros' statistics
    mapper = map_source_features(
        sim5["meta"], {LEFT: HAND, STATE: "state"}, MixtureSchema(dict(schema.keys)), source_id="s"
    )
    assert mapper.map_stats(stats).keys() == mapped.keys()


def test_map_stats_refuses_a_vector_longer_than_the_schema(sim5):
    with pytest.raises(
        ConfigError,
        match=r"sim5: stats\['observation.state'\]\['min'\] has 6 entries, more than the "
        r"schema's 4",
    ):
        map_stats(
            sim5["meta"].stats, None, MixtureSchema({STATE: KeySpec.vector(4)}), source="sim5"
        )


def _stats_of(values: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "count": np.array([len(values)]),
        "q50": np.median(values, axis=0),
        "extra": np.ones(values.shape[1:]),
    }


def test_aggregate_by_hand():
    one = {
        "a": {
            "mean": np.array([1.0]),
            "std": np.array([0.0]),
            "min": np.array([1.0]),
            "max": np.array([1.0]),
            "count": np.array([2]),
            "q50": np.array([1.0]),
        }
    }
    two = {
        "a": {
            "mean": np.array([3.0]),
            "std": np.array([1.0]),
            "min": np.array([2.0]),
            "max": np.array([4.0]),
            "count": np.array([2]),
            "q50": np.array([4.0]),
        }
    }
    three = {
        "b": {
            "mean": np.array([5.0]),
            "std": np.array([2.0]),
            "min": np.array([0.0]),
            "max": np.array([9.0]),
            "count": np.array([7]),
        }
    }
    pooled = aggregate_mapped_stats([one, two, three])
    # a: values {1, 1} and {2, 4}: mean 2, variance ((0 + 1) * 2 + (1 + 1) * 2) / 4 = 1.5
    assert pooled["a"]["mean"].tolist() == [2.0]
    assert pooled["a"]["std"].tolist() == [pytest.approx(1.5**0.5)]
    assert pooled["a"]["min"].tolist() == [1.0] and pooled["a"]["max"].tolist() == [4.0]
    assert pooled["a"]["count"].tolist() == [4]
    assert pooled["a"]["q50"].tolist() == [2.5]  # count-weighted mean of the medians
    # b: only the third source has it
    assert pooled["b"]["mean"].tolist() == [5.0] and pooled["b"]["std"].tolist() == [2.0]
    assert pooled["b"]["count"].tolist() == [7]


def test_aggregate_equals_the_statistics_of_the_concatenated_values():
    rng = np.random.default_rng(3)
    parts = [
        rng.normal(loc, scale, size=(n, 4))
        for loc, scale, n in ((0, 1, 50), (3, 0.5, 20), (-2, 2, 35))
    ]
    pooled = aggregate_mapped_stats([{"v": _stats_of(p)} for p in parts])["v"]
    every = np.concatenate(parts)
    assert np.allclose(pooled["mean"], every.mean(axis=0), rtol=1e-12, atol=1e-12)
    assert np.allclose(pooled["std"], every.std(axis=0), rtol=1e-12, atol=1e-12)
    assert np.array_equal(pooled["min"], every.min(axis=0))
    assert np.array_equal(pooled["max"], every.max(axis=0))
    assert pooled["count"].tolist() == [105]
    assert "extra" not in pooled  # LeRobot pools only mean/std/min/max/count and quantiles


def test_padded_entries_pool_as_the_zeros_the_mapper_emits():
    rng = np.random.default_rng(4)
    short, long = rng.normal(1, 1, size=(30, 2)), rng.normal(2, 1, size=(10, 3))
    schema = MixtureSchema({"v": KeySpec.vector(3)})
    pooled = aggregate_mapped_stats(
        [
            map_stats({"v": _stats_of(short)}, None, schema),
            map_stats({"v": _stats_of(long)}, None, schema),
        ]
    )["v"]
    # what the mapper yields: the short vectors padded with a zero
    emitted = np.concatenate([np.pad(short, ((0, 0), (0, 1))), long])
    assert np.allclose(pooled["mean"], emitted.mean(axis=0), rtol=1e-12, atol=1e-12)
    assert np.allclose(pooled["std"], emitted.std(axis=0), rtol=1e-12, atol=1e-12)
    assert np.array_equal(pooled["min"], emitted.min(axis=0))
    assert np.array_equal(pooled["max"], emitted.max(axis=0))


def test_aggregate_refuses_what_lerobot_refuses():
    good = {"mean": np.zeros(2), "std": np.ones(2), "min": np.zeros(2), "max": np.ones(2)}
    with pytest.raises(ConfigError, match="at least one"):
        aggregate_mapped_stats([])
    with pytest.raises(ConfigError, match=r"'v' \(entry 0\) lack \['count'\]"):
        aggregate_mapped_stats([{"v": good}])
    with pytest.raises(ConfigError, match=r"'count' must have shape \(1,\)"):
        aggregate_mapped_stats([{"v": {**good, "count": np.array([[3]])}}])
    with pytest.raises(ConfigError, match="'mean' must be a numpy array"):
        aggregate_mapped_stats([{"v": {**good, "mean": 0.0, "count": np.array([3])}}])


def test_schemas_and_mappers_pickle_for_dataloader_workers(sim5):
    schema = _schema(**{"observation.images.top": KeySpec.camera(3, 96, 128)})
    mapper = map_source_features(sim5["meta"], {LEFT: None}, schema, source_id="sim5")
    copy = pickle.loads(pickle.dumps(mapper))
    assert copy.schema == schema and copy.key_map == mapper.key_map
    assert copy.dropped_keys == mapper.dropped_keys and copy.missing_keys == mapper.missing_keys
    ours, theirs = mapper(sim5["sample"]), copy(sim5["sample"])
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        assert (
            torch.equal(value, theirs[key])
            if isinstance(value, torch.Tensor)
            else value == theirs[key]
        )


def test_samples_of_two_real_sources_batch_together(sim5, synthetic_av1, tmp_path):
    """sim5 (3 cameras 96x128) and synthetic_av1 (2 cameras 64x48), stacked by the same
    delta_timestamps, map onto one inferred schema and collate into one batch."""
    with _open(synthetic_av1, tmp_path, delta_timestamps=DELTAS) as other:
        schema = infer_schema([sim5["meta"], other.meta.dataset_meta], source_ids=["a", "b"])
        mappers = [
            map_source_features(meta, None, schema, source_id=sid, source_index=i)
            for i, (sid, meta) in enumerate([("a", sim5["meta"]), ("b", other.meta.dataset_meta)])
        ]
        theirs = other[5]
        samples = [mappers[0](sim5["stacked"]), mappers[1](theirs)]
    assert samples[0].keys() == samples[1].keys()
    batch = torch.utils.data.default_collate(samples)
    assert batch[HIGH].shape == (2, 2, 3, 96, 128)
    # 64x48 scaled 2x fills 128x96: no border, and every step resized alike
    assert torch.equal(batch[HIGH][1], letterbox(theirs[HIGH], 96, 128))
    assert batch[RIGHT].shape == (2, 3, 96, 128)
    assert batch[f"{RIGHT}_mask"].tolist() == [True, False]
    assert not batch[RIGHT][1].any()
    assert batch["action"].shape == (2, 3, 6)
    assert batch["source_index"].tolist() == [0, 1]
    assert batch["source_id"] == ["a", "b"]
    assert batch["action_is_pad"].shape == (2, 3)
