"""The key a board's profiles are kept under in a profile store: :class:`StoreKey`, built and read here only."""

from __future__ import annotations

import re

__all__ = ["StoreKey"]

_DIGEST = re.compile(r"[0-9a-f]{4,64}")


class StoreKey(str):
    """Which board a profile describes: its module (``orin-agx``, or a device's own id), or for a simulated board
    ``sim:<module>+<digest>``, the digest naming the model of the board that simulated it (so profiles an older or a
    calibrated twin simulated are never taken for this one's, nor a twin's for a real board's).

    A ``str`` (a study's name, JSON, a comparison with a spelled-out key) whose parts are :attr:`module`,
    :attr:`simulated` and :attr:`digest`; :meth:`parse` reads one back, :meth:`names` says whether a key a person
    typed (``sim:orin-agx``, without a digest) names it."""

    __slots__ = ()

    def __new__(cls, module: str, *, simulated: bool = False, digest: str | None = None) -> StoreKey:
        module = str(module).strip()
        if not module or module.startswith("sim:"):
            raise ValueError(f"a store key's module must be a board's name such as 'orin-agx', got {module!r} "
                             "(a simulated board's key is StoreKey('orin-agx', simulated=True))")
        if digest is not None and (not simulated or not _DIGEST.fullmatch(digest)):
            raise ValueError(f"a store key's digest is 4 to 64 hex digits of a simulated board's model, got "
                             f"{digest!r}{'' if simulated else ' on a real board'}")
        if digest and "+" in module:
            raise ValueError(f"a module with a digest has no '+' (it separates the digest), got {module!r}")
        text = (f"sim:{module}" if simulated else module) + (f"+{digest}" if digest else "")
        return str.__new__(cls, text)

    @classmethod
    def parse(cls, text: str) -> StoreKey:
        """The key spelled ``text`` (``orin-agx``, ``sim:orin-agx``, ``sim:orin-agx+1a2b3c4d``)."""
        if isinstance(text, StoreKey):
            return text
        simulated, module, digest = _split(str(text).strip())
        return cls(module, simulated=simulated, digest=digest)

    def __reduce__(self) -> tuple:
        return (StoreKey.parse, (str(self),))

    @property
    def simulated(self) -> bool:
        return self.startswith("sim:")

    @property
    def module(self) -> str:
        return _split(self)[1]

    @property
    def digest(self) -> str | None:
        return _split(self)[2]

    def without_digest(self) -> StoreKey:
        """The key of any model of this board (``sim:orin-agx``)."""
        return StoreKey(self.module, simulated=self.simulated)

    def names(self, wanted: str) -> bool:
        """Whether ``wanted``, as a person types it, names this key: the key itself, or a simulated board's key
        without its digest (``sim:orin-agx`` names every model of the simulated Orin AGX)."""
        wanted = str(wanted).strip()
        return wanted == self or (self.simulated and wanted == self.without_digest())


def _split(text: str) -> tuple[bool, str, str | None]:
    """``(simulated, module, digest)`` of a key's text: the digest is what follows the last ``+`` of a simulated key
    when it is hex (a board file's path with a ``+`` in it is a module, digest and all)."""
    if not text.startswith("sim:"):
        return False, str(text), None
    module, plus, digest = text[4:].rpartition("+")
    if plus and _DIGEST.fullmatch(digest) and "+" not in module:
        return True, module, digest
    return True, text[4:], None
