"""Manifest layer: (episode, camera) → file, samples, bytes, times; the sidecar index."""

from episodestream.errors import SidecarCoverageError, UnknownEpisodesError
from episodestream.manifest._build import DEFAULT_BUILD_WORKERS, build_manifest, source_info
from episodestream.manifest._checks import (
    check_file_track,
    check_span,
    check_spans,
    replan_span,
)
from episodestream.manifest._manifest import (
    SPAN_FIELDS,
    BuildStats,
    DatasetIdentity,
    EpisodeManifest,
    EpisodeSpan,
    EpisodeSubset,
    SourceFile,
    SpanArrays,
    episode_subset,
)
from episodestream.manifest._open import (
    CACHE_ENV,
    PUBLISHED_SIDECAR_PATH,
    SidecarStatus,
    default_cache_dir,
    open_manifest,
    sidecar_cache_path,
    sidecar_status,
)
from episodestream.manifest._publish import (
    DEFAULT_PUBLISH_MESSAGE,
    PublishedSidecar,
    publish_sidecar,
)
from episodestream.manifest._sidecar import (
    load_sidecar,
    sidecar_bytes,
    write_sidecar,
)

__all__ = [
    "CACHE_ENV",
    "DEFAULT_BUILD_WORKERS",
    "DEFAULT_PUBLISH_MESSAGE",
    "PUBLISHED_SIDECAR_PATH",
    "SPAN_FIELDS",
    "BuildStats",
    "DatasetIdentity",
    "EpisodeManifest",
    "EpisodeSpan",
    "EpisodeSubset",
    "PublishedSidecar",
    "SidecarCoverageError",
    "SidecarStatus",
    "SourceFile",
    "SpanArrays",
    "UnknownEpisodesError",
    "build_manifest",
    "check_file_track",
    "check_span",
    "check_spans",
    "default_cache_dir",
    "episode_subset",
    "load_sidecar",
    "open_manifest",
    "publish_sidecar",
    "replan_span",
    "sidecar_bytes",
    "sidecar_cache_path",
    "sidecar_status",
    "source_info",
    "write_sidecar",
]
