import subprocess
import sys

import episodestream
from episodestream import errors

PUBLIC_NAMES = [
    "BudgetError",
    "CacheError",
    "ConfigError",
    "ConfigTypeError",
    "DatasetFormatError",
    "DecodeError",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "EpisodeStreamError",
    "FrameNotFoundError",
    "InvalidResponse",
    "Location",
    "LocationError",
    "ManifestError",
    "Mp4FormatError",
    "NotFound",
    "ProxyError",
    "PublishError",
    "RangeNotSupported",
    "ReaderOptions",
    "SamplingError",
    "ServingError",
    "StaleSourceError",
    "StorageError",
    "StorageTimeout",
    "StreamOptions",
    "UnsupportedMp4Error",
    "__version__",
    "open_reader",
]


def test_public_names_are_pinned():
    # adding a public name is a deliberate act: update this list with it
    assert episodestream.__all__ == PUBLIC_NAMES


def test_root_error_is_the_base_of_every_error():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, episodestream.EpisodeStreamError), name
        assert getattr(episodestream, name) is cls


def test_builtin_bases_keep_generic_handlers_working():
    assert issubclass(episodestream.NotFound, FileNotFoundError)
    assert issubclass(episodestream.StorageTimeout, TimeoutError)
    assert issubclass(episodestream.Mp4FormatError, ValueError)
    assert issubclass(episodestream.ConfigError, ValueError)
    assert issubclass(episodestream.ConfigTypeError, episodestream.ConfigError)
    assert issubclass(episodestream.ConfigTypeError, TypeError)
    assert issubclass(episodestream.BudgetError, ValueError)


def test_every_public_name_resolves():
    for name in episodestream.__all__:
        assert hasattr(episodestream, name), name
    from episodestream.mp4 import clip_file

    assert callable(clip_file)


def test_import_is_light():
    # the CLI and DataLoader workers import the package; torch loads only when needed
    code = "import sys, episodestream; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
