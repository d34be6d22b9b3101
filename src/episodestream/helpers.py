"""Helpers the library's own layers share, public for the packages built on it
(``episodestream-tools``: the benchmark, the local server, the synthetic writer).

- Argument checks that raise :class:`~episodestream.errors.ConfigError` naming the argument
  (:func:`check_int`, :func:`check_number`, :func:`check_choice`, :func:`check_options`) and
  the named upper limits they quote (:class:`Bound`, ``MAX_*``).
- :class:`Closing`: ``with obj:`` for anything with a ``close()``.
- :class:`FrozenDict`: a ``dict`` that cannot change after it is made.

Importing this module loads neither torch nor a decoder.
"""

from episodestream._checks import (
    MAX_BYTES,
    MAX_CONNECTIONS,
    Bound,
    check_choice,
    check_int,
    check_number,
    check_options,
    shown,
)
from episodestream._closing import Closing
from episodestream._frozen import FrozenDict

__all__ = [
    "MAX_BYTES",
    "MAX_CONNECTIONS",
    "Bound",
    "Closing",
    "FrozenDict",
    "check_choice",
    "check_int",
    "check_number",
    "check_options",
    "shown",
]
