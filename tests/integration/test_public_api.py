import subprocess
import sys

import episodestream
from episodestream import errors

PUBLIC_NAMES = [
    "BudgetConfigError",
    "BudgetError",
    "CacheError",
    "CheckFinding",
    "ConfigError",
    "ConfigTypeError",
    "DatasetCheck",
    "DatasetFormatError",
    "DecodeError",
    "EpisodeCheck",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "EpisodeStreamError",
    "FrameNotFoundError",
    "InvalidResponse",
    "Location",
    "LocationError",
    "ManifestError",
    "MixtureStreamDataset",
    "Mp4FormatError",
    "NotFound",
    "Order",
    "ProxyError",
    "PublishError",
    "RangeNotSupported",
    "ReaderOptions",
    "Resources",
    "SampleIndexError",
    "SampleOptions",
    "SamplingConfigError",
    "SamplingError",
    "ServingError",
    "SidecarCoverageError",
    "Source",
    "StaleSourceError",
    "StorageError",
    "StorageTimeout",
    "StreamOptions",
    "UnknownEpisodesError",
    "UnsupportedMp4Error",
    "__version__",
    "check_dataset",
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


def test_manifest_errors_live_in_the_one_hierarchy():
    import pickle

    from episodestream import manifest

    assert manifest.UnknownEpisodesError is episodestream.UnknownEpisodesError
    assert manifest.SidecarCoverageError is episodestream.SidecarCoverageError
    assert issubclass(episodestream.UnknownEpisodesError, episodestream.ManifestError)
    assert issubclass(episodestream.UnknownEpisodesError, episodestream.ConfigError)
    assert issubclass(episodestream.SidecarCoverageError, episodestream.ManifestError)
    unknown = episodestream.UnknownEpisodesError([9, 7, 9], range(5))
    assert str(unknown) == "unknown episode(s) 7, 9: the dataset has episodes 0..4, 5 in all"
    coverage = episodestream.SidecarCoverageError("/c/i.arrow", [3, 4], "episodes 0..2")
    for error in (unknown, coverage):  # DataLoader workers send them to the main process
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
    assert pickle.loads(pickle.dumps(unknown)).episodes == (7, 9)
    assert pickle.loads(pickle.dumps(coverage)).missing == (3, 4)
