"""Named registries: configs name parts ("vanilla", "caca", ...), builders look them up.

    ENCODERS = Registry("encoder")

    @ENCODERS.register("transformer")
    class TransformerEncoder(nn.Module): ...

    ENCODERS.get("transformer")  # the class; an unknown name lists the valid ones

Registries hold names only; they import nothing. A module registers its parts when it is
imported, and ``builders.py`` imports every part module before building.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A config named a part that no module registered."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class Registry(Generic[T]):
    """A mapping from names to parts of one kind (classes or factory functions)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; a name can be registered once."""

        def add(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {obj!r})")
            self._items[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UnknownName(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names()) or '(none registered)'}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items


#: the registries of catcap's parts (filled by the modules that define the parts)
ENCODERS: Registry = Registry("encoder")
DECODERS: Registry = Registry("decoder")
#: the cross-attention variants (vanilla, CACA, LightCACA), the same for every decoder
CROSS_ATTENTION: Registry = Registry("cross_attention")
