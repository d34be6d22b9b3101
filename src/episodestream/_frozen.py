"""A read-only dict for the mapping fields of frozen dataclass values, shared by every layer.

``types.MappingProxyType`` keeps a value's mapping read-only but does not pickle, deep-copy or
hash, so a frozen dataclass holding one cannot cross to a DataLoader worker, go through
``dataclasses.asdict`` or be a dict key. :class:`FrozenDict` is a ``dict`` (``json.dumps``
and ``asdict`` take it as one) whose mutating methods raise ``TypeError``, and which pickles,
copies and hashes by its contents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeVar

__all__ = ["FrozenDict"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenDict(dict[_K, _V]):
    """A ``dict`` that cannot change after it is made; hashable when its values are."""

    __slots__ = ()

    # filled in __new__, so a second __init__ call on a made instance cannot add keys
    def __new__(cls, *args: Any, **kwargs: Any) -> FrozenDict[_K, _V]:
        made = super().__new__(cls)
        dict.__init__(made, *args, **kwargs)
        return made

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: :meth:`__new__` filled the dict (``dict.__init__`` would add keys)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is read-only")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type[FrozenDict[_K, _V]], tuple[dict[_K, _V]]]:
        # the default dict reduction refills an empty instance item by item, which is refused
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict[_K, _V]:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"

    @classmethod
    def fromkeys(cls, keys: Iterable[_K], value: Any = None) -> FrozenDict[_K, Any]:  # type: ignore[override]
        return cls(dict.fromkeys(keys, value))

    @classmethod
    def of(cls, items: Mapping[_K, _V] | Iterable[tuple[_K, _V]]) -> FrozenDict[_K, _V]:
        """``items`` as a FrozenDict: itself when it already is one, else a copy."""
        return items if isinstance(items, cls) else cls(items)
