"""``with obj:`` for anything with a ``close()``: one mixin every layer may use.

A class that owns something to release (threads, sockets, processes, files) defines
``close()`` and inherits :class:`Closing`; ``with`` then returns the object itself and calls
``close()`` on the way out, whether or not the block raised. A class whose ``with`` must do
more on entry (start a server) overrides ``__enter__`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

__all__ = ["Closing"]


class Closing:
    """``__enter__`` returns ``self``; ``__exit__`` calls ``self.close()``."""

    __slots__ = ()

    if TYPE_CHECKING:  # declared only: a base class's own close() must not be shadowed

        def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
