"""Comparing samples of two readers (ours against LeRobot's, or against a twin dataset)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["assert_samples_equal"]


def assert_samples_equal(ours: Mapping[str, Any], theirs: Mapping[str, Any], where: str) -> None:
    """Same keys; tensors of the same dtype, shape and values (bit for bit); other values
    equal."""
    assert set(ours) == set(theirs), f"{where}: keys {sorted(set(ours) ^ set(theirs))}"
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype, f"{where}: {key} dtype"
            assert ours[key].shape == value.shape, f"{where}: {key} shape"
            assert torch.equal(ours[key], value), f"{where}: {key} differs"
        else:
            assert ours[key] == value, f"{where}: {key} differs"
