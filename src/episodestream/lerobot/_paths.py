"""``info.json`` path templates (``data_path``, ``video_path``), resolved inside the root."""

from __future__ import annotations

import posixpath
import string

from episodestream.errors import DatasetFormatError

__all__ = [
    "MAX_PATH_CHARS",
    "MAX_TEMPLATE_WIDTH",
    "V2_FIELDS",
    "V3_FIELDS",
    "check_template",
    "resolve_template",
]

# the fields LeRobot v3 templates may use; anything else (attribute access, indexing,
# unknown names) is rejected before formatting so a template cannot run arbitrary lookups
V3_FIELDS = frozenset({"chunk_index", "file_index", "video_key"})
# LeRobot v2.x names each file by its episode: ``{episode_chunk}`` is the chunk and
# ``{episode_index}`` the file (one file per episode), so they resolve from the same
# (chunk_index, file_index) pair as v3's fields
V2_FIELDS = frozenset({"episode_chunk", "episode_index", "video_key"})
_V2_ALIASES = {"episode_chunk": "chunk_index", "episode_index": "file_index"}
#: Widest zero-padded field a template may ask for (LeRobot's are 3 and 6 digits): the
#: width is a length the formatter allocates, so it is bounded before anything is formatted.
MAX_TEMPLATE_WIDTH = 32
#: Longest template, and longest path one resolves to (characters).
MAX_PATH_CHARS = 4096
# templates and paths quoted in messages are cut to this many characters
_QUOTED_CHARS = 200


def check_template(
    template: object,
    *,
    file: str,
    field: str,
    required: frozenset[str],
    allowed: frozenset[str] = V3_FIELDS,
) -> str:
    """Validate a path template string; returns it.

    ``allowed`` is the set of fields the layout's templates may use (:data:`V3_FIELDS`, or
    :data:`V2_FIELDS` for LeRobot v2.x).

    Raises:
        DatasetFormatError: not a string, a field outside the allowed set, a format spec
            that is not a plain integer width, or a missing required field.
    """
    if not isinstance(template, str) or not template:
        raise DatasetFormatError(f"{file}: field {field!r} must be a non-empty path template")
    if len(template) > MAX_PATH_CHARS:
        raise DatasetFormatError(
            f"{file}: field {field!r}: template of {len(template)} characters (at most "
            f"{MAX_PATH_CHARS}): {_quote(template)}"
        )
    seen: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise DatasetFormatError(
            f"{file}: field {field!r}: bad template {template!r}: {error}"
        ) from error
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in allowed:
            raise DatasetFormatError(
                f"{file}: field {field!r}: template {template!r} uses {{{name}}}; allowed "
                f"fields are {sorted(allowed)}"
            )
        width = spec[:-1] if spec.endswith("d") else spec
        if conversion or (spec and not (width.isascii() and width.isdigit())):
            raise DatasetFormatError(
                f"{file}: field {field!r}: template {template!r} has an unsupported format "
                f"spec {spec!r} for {{{name}}}"
            )
        if spec and (len(width) > 3 or int(width) > MAX_TEMPLATE_WIDTH):
            raise DatasetFormatError(
                f"{file}: field {field!r}: template {_quote(template)} pads {{{name}}} to "
                f"{_quote(width)} digits; at most {MAX_TEMPLATE_WIDTH} (MAX_TEMPLATE_WIDTH)"
            )
        seen.add(name)
    missing = required - seen
    if missing:
        raise DatasetFormatError(
            f"{file}: field {field!r}: template {template!r} lacks {sorted(missing)}"
        )
    return template


def resolve_template(template: str, *, what: str, **fields: int | str) -> str:
    """Format ``template`` and check the result stays inside the dataset root.

    Returns a normalized relative POSIX path. A v2.x template's ``{episode_chunk}`` and
    ``{episode_index}`` take the values of ``chunk_index`` and ``file_index``.

    Raises:
        DatasetFormatError: a negative index, or a path that is absolute, empty, or climbs
            out of the root (``..``) — whatever the template or a video key contains.
    """
    for name, value in fields.items():
        if isinstance(value, int) and value < 0:
            raise DatasetFormatError(f"{what}: negative {name} {value}")
    for alias, name in _V2_ALIASES.items():
        if name in fields:
            fields.setdefault(alias, fields[name])
    try:
        path = template.format(**fields)
    except (KeyError, IndexError, ValueError) as error:
        raise DatasetFormatError(
            f"{what}: cannot format template {_quote(template)}: {error}"
        ) from error
    if len(path) > MAX_PATH_CHARS:
        raise DatasetFormatError(
            f"{what}: template {_quote(template)} resolves to a path of {len(path)} "
            f"characters (at most {MAX_PATH_CHARS}): {_quote(path)}"
        )
    normalized = posixpath.normpath(path.replace("\\", "/"))
    if (
        not path
        or path.startswith(("/", "\\"))
        or ":" in path.split("/", 1)[0]
        or normalized == "."
        or normalized == ".."
        or normalized.startswith("../")
        or "\x00" in path
    ):
        raise DatasetFormatError(
            f"{what}: template {_quote(template)} resolves to {_quote(path)}, outside the "
            "dataset root"
        )
    return normalized


def _quote(text: str) -> str:
    """``repr(text)``, cut short: a hostile template must not make a huge message."""
    if len(text) <= _QUOTED_CHARS:
        return repr(text)
    return f"{text[:_QUOTED_CHARS]!r}... ({len(text)} characters)"
