"""Raw binary file objects over a Maat file handle (``io.RawIOBase``).

The handle (``maat._native.NativeHandle``) reads and writes at offsets; this class keeps
the position, so ``io.BufferedReader``/``BufferedWriter``/``BufferedRandom`` and
``io.TextIOWrapper`` stack on it as on any OS file.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Optional

from . import _native


@dataclass(frozen=True)
class OpenMode:
    """What a mode string such as ``"r+b"`` asks for."""

    read: bool
    write: bool
    create: bool
    exclusive: bool
    truncate: bool
    append: bool
    binary: bool


def parse_mode(mode: str) -> OpenMode:
    """Parses an :func:`open` mode string (``r``, ``w``, ``x``, ``a``, ``+``, ``b``, ``t``).

    Raises:
        ValueError: an invalid mode, as :func:`open` raises.
    """
    chars = set(mode)
    if len(chars) != len(mode) or not chars <= set("rwxa+bt") or ("b" in chars and "t" in chars):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = chars & set("rwxa")
    if len(kinds) != 1:
        raise ValueError(f"invalid mode: {mode!r} (exactly one of r, w, x, a)")
    (kind,) = kinds
    plus = "+" in chars
    return OpenMode(
        read=kind == "r" or plus,
        write=kind != "r" or plus,
        create=kind != "r",
        exclusive=kind == "x",
        truncate=kind == "w",
        append=kind == "a",
        binary="b" in chars,
    )


class RawFile(io.RawIOBase):
    """An unbuffered binary file in Maat (what ``Client.open(..., buffering=0)`` returns).

    Reads and writes span stripes; a write past the end fills the gap with zeros. The
    size is recorded at the MDS on :meth:`flush` and :meth:`close`.
    """

    def __init__(self, handle: Any, path: str, mode: OpenMode) -> None:
        super().__init__()
        self._handle = handle
        self._mode = mode
        self.name = path
        self._pos = handle.size if mode.append else 0

    @property
    def mode(self) -> str:  # type: ignore[override]
        kind = "a" if self._mode.append else ("w" if self._mode.truncate else "r")
        if self._mode.exclusive:
            kind = "x"
        plus = "+" if self._mode.read and self._mode.write else ""
        return f"{kind}b{plus}"

    def readable(self) -> bool:
        self._check_open()
        return self._mode.read

    def writable(self) -> bool:
        self._check_open()
        return self._mode.write

    def seekable(self) -> bool:
        self._check_open()
        return True

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def readinto(self, buffer: Any) -> int:
        self._check_open()
        if not self._mode.read:
            raise io.UnsupportedOperation("not readable")
        view = memoryview(buffer).cast("B")
        data = self._handle.pread(self._pos, len(view))
        n = len(data)
        view[:n] = data
        self._pos += n
        return n

    def readall(self) -> bytes:
        self._check_open()
        if not self._mode.read:
            raise io.UnsupportedOperation("not readable")
        chunks = []
        while True:
            data = self._handle.pread(self._pos, max(self._handle.size - self._pos, 0) or 1 << 20)
            if not data:
                break
            self._pos += len(data)
            chunks.append(data)
        return b"".join(chunks)

    def write(self, data: Any) -> int:
        self._check_open()
        if not self._mode.write:
            raise io.UnsupportedOperation("not writable")
        if self._mode.append:
            self._pos = self._handle.size
        # At most one native write per call (RawIOBase allows a short write; the
        # buffered layers above loop).
        payload = bytes(memoryview(data).cast("B")[: _native.FILE_IO_BYTES_MAX])
        n = self._handle.pwrite(self._pos, payload)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._handle.size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, f"negative seek position {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def truncate(self, size: Optional[int] = None) -> int:
        self._check_open()
        if not self._mode.write:
            raise io.UnsupportedOperation("not writable")
        size = self._pos if size is None else size
        if size < 0:
            raise OSError(22, f"negative size {size}")
        self._handle.truncate(size)
        return size

    def flush(self) -> None:
        if self.closed:
            return
        if self._mode.write:
            self._handle.flush()

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()  # flushes: the size is recorded at the MDS
        finally:
            self._handle.close()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a Maat file has no file descriptor")

    def isatty(self) -> bool:
        return False

    @property
    def size(self) -> int:
        """The size as this file sees it (recorded at open, then its own writes)."""
        return int(self._handle.size)


class BufferedWriter(io.BufferedWriter):
    """``io.BufferedWriter`` whose ``flush()`` also records the size at the MDS (the
    standard one never calls its raw file's ``flush`` before ``close``)."""

    def flush(self) -> None:
        super().flush()
        if not self.closed:
            self.raw.flush()


class BufferedRandom(io.BufferedRandom):
    """``io.BufferedRandom`` whose ``flush()`` also records the size at the MDS."""

    def flush(self) -> None:
        super().flush()
        if not self.closed:
            self.raw.flush()
