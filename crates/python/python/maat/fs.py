"""An fsspec filesystem for Maat: the ``maat://`` protocol.

Installed with this package (an ``fsspec.specs`` entry point), so that tools built on
fsspec read and write Maat unchanged::

    import pandas as pd
    df = pd.read_csv("maat:///data/x.csv")
    df.to_parquet("maat:///data/x.parquet")

    import fsspec
    with fsspec.open("maat:///notes.txt", "w") as f:
        f.write("hello")

    import zarr
    z = zarr.open_array("maat:///arrays/a.zarr", mode="w", shape=(100, 100), chunks=(10, 10))

Paths are absolute Maat paths (``maat:///a/b`` and ``maat://a/b`` both name ``/a/b``).
Directories are implicit when writing, as in object stores: writing ``/a/b/c`` creates
``/a/b`` if it is missing.
The cluster and identity come from ``storage_options`` (``cluster=``, ``home=``, or an
existing ``client=``) and otherwise from ``MAAT_CLUSTER`` and ``MAAT_HOME``.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import tokenize

from . import Client, _native

__all__ = ["MaatFileSystem", "MaatFile"]

T = TypeVar("T")


def _pread_all(handle: Any, start: int, end: int) -> bytes:
    """Bytes ``start..end`` (short only at the end of the file): one native read returns
    at most ``FILE_IO_BYTES_MAX``."""
    chunks = []
    at = start
    while at < end:
        data = handle.pread(at, min(end - at, _native.FILE_IO_BYTES_MAX))
        if not data:
            break
        chunks.append(data)
        at += len(data)
    return b"".join(chunks)


class MaatFileSystem(AbstractFileSystem):
    """fsspec filesystem over a :class:`maat.Client`.

    Args:
        cluster: the cluster file; default ``$MAAT_CLUSTER``.
        home: identity and session directory; default ``$MAAT_HOME``.
        client: use this client instead of making one.
    """

    protocol = "maat"
    root_marker = "/"

    def __init__(
        self,
        cluster: Optional[str] = None,
        home: Optional[str] = None,
        client: Optional[Client] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client = client if client is not None else Client(cluster, home)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = super()._strip_protocol(path)
        return "/" + path.lstrip("/")

    @staticmethod
    def _entry(path: str, attributes: Dict[str, Any]) -> Dict[str, Any]:
        entry = dict(attributes)
        entry["name"] = path
        return entry

    # ------------------------------------------------------------ listing

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Union[List[str], List[Dict[str, Any]]]:
        path = self._strip_protocol(path)
        attributes = self.client.stat(path)
        if attributes["type"] == "file":
            entries = [self._entry(path, attributes)]
        else:
            base = path.rstrip("/")
            entries = [
                self._entry(f"{base}/{name}", a) for name, a in self.client._native.ls(path)
            ]
        entries.sort(key=lambda e: e["name"])
        if detail:
            return entries
        return [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        return self._entry(path, self.client.stat(path))

    def ukey(self, path: str) -> str:
        info = self.info(path)
        return tokenize(info["id"], info["mtime"], info["size"])

    def created(self, path: str) -> datetime.datetime:
        """Maat records one time per file, the modification time."""
        return self.modified(path)

    def modified(self, path: str) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    # ------------------------------------------------------------ namespace

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if not create_parents:
            self.client.mkdir(path)
        elif not self.exists(path):
            self.client.mkdir(path, parents=True)
        self.invalidate_cache(self._parent(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if self.exists(path):
            if not exist_ok:
                raise FileExistsError(17, "directory exists", path)
            return
        self.client.mkdir(path, parents=True)
        self.invalidate_cache(self._parent(path))

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        self.client.rmdir(path)
        self.invalidate_cache(self._parent(path))

    def _rm(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self.client.stat(path)["type"] == "directory":
            self.client.rmdir(path)
        else:
            self.client.rm(path)
        self.invalidate_cache(self._parent(path))

    def rm_file(self, path: str) -> None:
        self._rm(path)

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: Optional[int] = None, **kwargs: Any) -> None:
        """A rename at the MDS when both are single paths (atomic, no data copied);
        otherwise fsspec's copy-then-remove."""
        if isinstance(path1, str) and isinstance(path2, str) and not self._has_magic(path1):
            src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
            if src != dst:
                self.client.mv(src, dst)
                self.invalidate_cache(self._parent(src))
                self.invalidate_cache(self._parent(dst))
            return
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def _creating(self, path: str, write: Callable[[], T]) -> T:
        """Runs ``write``, which creates ``path``; if its directory is missing, makes it
        (and its parents) and runs ``write`` again. Directories are implicit here, as in
        object stores: writing ``a/b/c`` makes ``a/b``."""
        try:
            return write()
        except FileNotFoundError:
            # Another thread may be making the same directory: mkdir with parents is
            # idempotent, and a second miss is the caller's error.
            self.client.mkdir(self._parent(path), parents=True)
            return write()

    @staticmethod
    def _has_magic(path: str) -> bool:
        return any(c in path for c in "*?[")

    def chmod(self, path: str, mode: int) -> None:
        self.client.chmod(self._strip_protocol(path), mode)

    # ------------------------------------------------------------ whole files

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.client.read_bytes(path)
        handle = self.client._native.open_handle(path)
        try:
            size = handle.size
            begin = 0 if start is None else (start if start >= 0 else max(0, size + start))
            stop = size if end is None else (end if end >= 0 else size + end)
            return _pread_all(handle, begin, min(stop, size))
        finally:
            handle.close()

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if mode == "create" and self.exists(path):
            raise FileExistsError(17, "file exists", path)
        self._creating(path, lambda: self.client.write_bytes(path, value))
        self.invalidate_cache(self._parent(path))

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        rpath = self._strip_protocol(rpath)
        if os.path.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        size = self._creating(rpath, lambda: self.client.put(lpath, rpath))
        if callback is not None:
            callback.set_size(size)
            callback.relative_update(size)
        self.invalidate_cache(self._parent(rpath))

    def get_file(self, rpath: str, lpath: Any, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        rpath = self._strip_protocol(rpath)
        if self.isdir(rpath):
            os.makedirs(lpath, exist_ok=True)
            return
        if outfile is not None:
            outfile.write(self.client.read_bytes(rpath))
            return
        size = self.client.get(rpath, lpath)
        if callback is not None:
            callback.set_size(size)
            callback.relative_update(size)

    # ------------------------------------------------------------ file objects

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Optional[int] = None,
        autocommit: bool = True,
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> "MaatFile":
        return MaatFile(
            self,
            path,
            mode=mode,
            block_size=block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            **kwargs,
        )


class MaatFile(AbstractBufferedFile):
    """A file of :class:`MaatFileSystem` (modes ``rb``, ``wb``, ``ab``, ``xb``).

    Reads fetch blocks of eight stripes (sent to the OSDs at once); writes go in place,
    a block at a time, and the size is recorded at the MDS on close.
    """

    DEFAULT_BLOCK_SIZE = 8 * _native.STRIPE_UNIT_BYTES

    def __init__(
        self,
        fs: MaatFileSystem,
        path: str,
        mode: str = "rb",
        block_size: Any = "default",
        autocommit: bool = True,
        cache_type: str = "readahead",
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if not autocommit:
            raise NotImplementedError("Maat files are written in place (autocommit only)")
        if mode not in ("rb", "wb", "ab", "xb"):
            raise NotImplementedError(f"file mode {mode!r} not supported (rb, wb, ab, xb)")
        path = fs._strip_protocol(path)
        kwargs.pop("size", None)  # fsspec's reopen passes it; the handle knows the size
        write = mode != "rb"
        def open_handle() -> Any:
            return fs.client._native.open_handle(
                path,
                write=write,
                create=0o644 if write else None,
                exclusive=mode == "xb",
                truncate=mode == "wb",
            )

        self._handle = fs._creating(path, open_handle) if write else open_handle()
        self._base = self._handle.size if mode == "ab" else 0
        super().__init__(
            fs,
            path,
            mode=mode,
            block_size=block_size,
            autocommit=autocommit,
            cache_type=cache_type,
            cache_options=cache_options,
            size=self._handle.size if mode == "rb" else None,
            **kwargs,
        )

    def _fetch_range(self, start: int, end: int) -> bytes:
        return _pread_all(self._handle, start, min(end, self.size))

    def _initiate_upload(self) -> None:
        pass

    def _upload_chunk(self, final: bool = False) -> bool:
        data = self.buffer.getbuffer()
        at = self._base + self.offset
        step = _native.FILE_IO_BYTES_MAX
        for begin in range(0, len(data), step):
            self._handle.pwrite(at + begin, bytes(data[begin : begin + step]))
        del data
        if final:
            self._handle.close()
        return True

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._handle.close()
