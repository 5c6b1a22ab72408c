"""Content codings of a response body (``Content-Encoding``), decoded piece by piece.

The embedded proxy counts a stream's events in a decoded copy of a compressed body while it
forwards the original bytes (:mod:`pytest_streamguard.toxiproxy_server.events`), and the plugin
names a coding the proxy cannot read when a chunk fault did not land
(:mod:`pytest_streamguard.faults.fired`). gzip and deflate come with Python (zlib); br needs
``brotli`` or ``brotlicffi`` and zstd ``zstandard``, the packages httpx decodes them with, so
in one environment the proxy reads every coding the plugin's client asks for.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any, Final

_ZLIB_BITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 0}


def _library(*names: str) -> Any:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_BROTLI: Final = _library("brotli", "brotlicffi")
_ZSTD: Final = _library("zstandard")
_OTHERS: Final[dict[str, Callable[[], Callable[[bytes], bytes]]]] = {
    **({"br": lambda: _BROTLI.Decompressor().process} if _BROTLI is not None else {}),
    **({"zstd": lambda: _ZSTD.ZstdDecompressor().decompressobj().decompress} if _ZSTD else {}),
}

DECODABLE: Final = frozenset({*_ZLIB_BITS, *_OTHERS})
"""The codings :func:`body_decoder` reads here (identity aside)."""


class BodyDecoder:
    """One body's decoder: each call returns every byte decodable from what came so far.

    A zlib coding can be copied (:attr:`copyable`), so a caller may try a piece on a copy; the
    others cannot, and are fed a byte at a time where a caller needs to know which byte
    completed an output."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._zlib: Any = None
        self._step: Callable[[bytes], bytes] | None = None
        if coding in _ZLIB_BITS:
            # deflate: zlib-wrapped by the RFC, raw from some servers (tried second, as httpx).
            self._zlib = zlib.decompressobj(_ZLIB_BITS[coding] or zlib.MAX_WBITS)
        else:
            self._step = _OTHERS[coding]()
        self._started = False

    @property
    def copyable(self) -> bool:
        """Whether :meth:`copy` works (zlib's codings)."""
        return self._zlib is not None

    def copy(self) -> BodyDecoder:
        """An independent decoder in this one's state (zlib's codings only)."""
        twin = BodyDecoder.__new__(BodyDecoder)
        twin.__dict__.update(self.__dict__, _zlib=self._zlib.copy())
        return twin

    def decode(self, data: bytes) -> bytes | None:
        """The bytes ``data`` decodes to, or None where the body is not in its coding."""
        try:
            if self._zlib is None:
                assert self._step is not None
                return self._step(data)
            try:
                out = self._zlib.decompress(data)
            except zlib.error:
                if self.coding != "deflate" or self._started:
                    raise
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._zlib.decompress(data)
            self._started = True
            return bytes(out)
        except Exception:  # zlib, brotli and zstandard each raise their own error
            return None


def body_decoder(coding: str) -> BodyDecoder | None:
    """A decoder for a ``Content-Encoding`` value, or None where none is installed here (or
    the body carries more than one coding)."""
    coding = coding.strip().lower()
    return BodyDecoder(coding) if coding in DECODABLE else None
