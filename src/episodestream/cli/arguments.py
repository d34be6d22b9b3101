"""The argument kit of ``episodestream`` commands, public for commands other packages add.

A package adds commands through the ``episodestream.commands`` entry-point group: each entry
names a function ``register(subparsers)`` that adds one sub-parser and sets its ``handler``
(``args -> exit status``). These are the option helpers and value types the core commands use,
so that an option means the same in every command.
"""

from episodestream.cli._options import (
    Options,
    add_batch_size_option,
    add_cache_dir_option,
    add_episode_subset_options,
    add_pool_order_options,
)
from episodestream.cli._types import (
    int_at_least,
    int_list,
    non_negative_float,
    port,
    positive_float,
)

__all__ = [
    "Options",
    "add_batch_size_option",
    "add_cache_dir_option",
    "add_episode_subset_options",
    "add_pool_order_options",
    "int_at_least",
    "int_list",
    "non_negative_float",
    "port",
    "positive_float",
]
