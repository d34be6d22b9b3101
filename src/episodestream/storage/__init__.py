"""Storage layer: locations and exact byte-range readers (local, HTTP, fsspec)."""

from episodestream.storage._base import ListableReader, RangeReader, ReadRequest
from episodestream.storage._local import LocalRangeReader

__all__ = ["ListableReader", "LocalRangeReader", "RangeReader", "ReadRequest"]
