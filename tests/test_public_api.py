import episodestream
from episodestream import errors


def test_root_error_is_the_base_of_every_error():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, episodestream.EpisodeStreamError), name
        assert getattr(episodestream, name) is cls


def test_builtin_bases_keep_generic_handlers_working():
    assert issubclass(episodestream.NotFound, FileNotFoundError)
    assert issubclass(episodestream.StorageTimeout, TimeoutError)
    assert issubclass(episodestream.Mp4FormatError, ValueError)


def test_all_is_sorted_and_complete():
    assert episodestream.__all__ == sorted(episodestream.__all__)
    for name in episodestream.__all__:
        assert hasattr(episodestream, name), name
