"""huggingface_hub reads its environment (``HF_ENDPOINT``, ``HF_HOME``, ``HF_TOKEN_PATH``,
``HF_HUB_DISABLE_IMPLICIT_TOKEN``, ``HUGGINGFACE_CO_STAGING``…) once, when it is imported, and
episodestream asks it for those settings. A test that changes the environment calls
:func:`reread_hf_environment` afterwards: huggingface_hub's own ``constants`` module is run again
on the current environment, as a freshly started process would run it, and its values replace
the imported ones for this test only (``monkeypatch`` restores them)."""

from __future__ import annotations

import importlib.util

import pytest
from huggingface_hub import constants


def reread_hf_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.find_spec("huggingface_hub.constants")
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    for name, value in vars(fresh).items():
        if name.lstrip("_").isupper() and not callable(value):
            monkeypatch.setattr(constants, name, value)
