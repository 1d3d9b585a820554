"""Maat for Python: a secure distributed object store's client library.

The calls go straight to Maat's Rust client (``maat._native``, built with pyo3): no
subprocess, the same login, capabilities and protection as the ``maat`` CLI.

Quick start, against a cluster started with ``maat up``::

    import maat
    c = maat.Client(cluster="maat-data/client.toml", home="maat-data/admin")
    c.put("results.csv", "/results.csv")
    with c.open("/results.csv") as f:
        header = f.readline()

``cluster`` and ``home`` default to the ``MAAT_CLUSTER`` and ``MAAT_HOME`` environment
variables, as for the CLI. A home holding a stored identity (the administrator's, which
``maat up`` writes) logs in by itself; other users call :meth:`Client.login` once and the
session is kept in the home.

fsspec knows the ``maat://`` protocol once this package is installed, so
``pandas.read_csv("maat:///data/x.csv")`` works (see :mod:`maat.fs`).

Errors are Python's own where one fits (``PermissionError``, ``FileNotFoundError``,
``FileExistsError``, ``NotADirectoryError``, ``IsADirectoryError``, ``ConnectionError``);
security failures raise :class:`SecurityError` subclasses. A refusal by a daemon carries
its code name as ``.code`` (for example ``"Revoked"``).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Tuple, Union

from . import _native
from ._io import BufferedRandom, BufferedWriter, RawFile, parse_mode
from ._native import (
    AuthenticationError,
    DataMissingError,
    ExpiredError,
    MaatError,
    NotLoggedInError,
    ReplayedError,
    RevokedError,
    SecurityError,
    TamperedError,
)

__all__ = [
    "Client",
    "RawFile",
    "MaatError",
    "SecurityError",
    "ExpiredError",
    "RevokedError",
    "ReplayedError",
    "TamperedError",
    "AuthenticationError",
    "NotLoggedInError",
    "DataMissingError",
    "DEFAULT_BUFFER_SIZE",
]

#: Buffer of the file objects :meth:`Client.open` returns: eight stripes, which a read
#: or write of the whole buffer sends to the OSDs at once.
DEFAULT_BUFFER_SIZE: int = 8 * _native.STRIPE_UNIT_BYTES

PathLike = Union[str, "os.PathLike[str]"]


def _default_home() -> Path:
    home = os.environ.get("MAAT_HOME")
    if home:
        return Path(home)
    return Path.home() / ".config" / "maat"


class Client:
    """A client of one Maat cluster, acting for one user.

    One client may be used from several threads: calls take turns on its session and
    release the GIL while they wait on the network. For parallel transfers, use one
    client per thread.

    Args:
        cluster: the cluster file (``maat up`` writes ``DIR/client.toml``); default
            ``$MAAT_CLUSTER``.
        home: directory of the identity and session; default ``$MAAT_HOME``, else
            ``~/.config/maat``.

    Raises:
        MaatError: no cluster file given or found, or it does not parse.
    """

    def __init__(
        self, cluster: Optional[PathLike] = None, home: Optional[PathLike] = None
    ) -> None:
        if cluster is None:
            cluster = os.environ.get("MAAT_CLUSTER")
            if not cluster:
                raise MaatError(
                    2,
                    "no cluster file: pass cluster=... or set MAAT_CLUSTER "
                    "(maat up writes DIR/client.toml)",
                )
        self.cluster = Path(cluster)
        self.home = Path(home) if home is not None else _default_home()
        self._native = _native.NativeClient(str(self.cluster), str(self.home))

    def __repr__(self) -> str:
        return f"maat.Client(cluster={str(self.cluster)!r}, home={str(self.home)!r})"

    # -------------------------------------------------------------- sessions

    def login(self, name: str, passphrase: str) -> None:
        """Logs in as ``name``; the session is kept in the home.

        The passphrase is stretched locally (Argon2id) and never sent.

        Raises:
            AuthenticationError: unknown user or wrong passphrase.
        """
        self._native.login(name, passphrase)

    def logout(self) -> None:
        """Ends the session at the MDS and forgets it locally."""
        self._native.logout()

    def whoami(self) -> Optional[str]:
        """The logged-in user's name (``None`` before a login or the first call)."""
        return self._native.whoami()

    # -------------------------------------------------------------- namespace

    def stat(self, path: str) -> Dict[str, Any]:
        """Attributes of ``path``: ``type`` (``"file"`` or ``"directory"``), ``size``,
        ``mode``, ``owner``, ``group``, ``mtime``, ``ctime`` and ``atime`` (seconds since
        the epoch), ``nlink`` (names: hard links), ``id``,
        ``partition``, ``protection`` (the data path's method, e.g. ``"ALLDATA"``; an
        encrypted file in an ALLDATA partition uses ``"CMDRSP"``) and ``encrypted``.

        Raises:
            FileNotFoundError: no such path.
            PermissionError: a directory on the way may not be searched.
        """
        return self._native.stat(path)

    def ls(self, path: str = "/", detail: bool = False) -> Union[List[str], List[Dict[str, Any]]]:
        """Entries of the directory ``path``: names, or with ``detail`` the attributes
        of each (as :meth:`stat`) with its ``name``."""
        entries: List[Tuple[str, Dict[str, Any]]] = self._native.ls(path)
        if not detail:
            return [name for name, _ in entries]
        return [dict(attributes, name=name) for name, attributes in entries]

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (and may be looked at)."""
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def mkdir(self, path: str, mode: int = 0o755, parents: bool = False) -> None:
        """Creates a directory; with ``parents``, its missing parents too (and no error
        if it exists).

        Raises:
            FileExistsError: it exists (without ``parents``).
            PermissionError: the parent may not be written.
        """
        self._native.mkdir(path, mode, parents)

    def rmdir(self, path: str) -> None:
        """Removes an empty directory (``OSError`` with ``errno.ENOTEMPTY`` otherwise)."""
        self._native.rmdir(path)

    def rm(self, path: str) -> None:
        """Removes a file and its objects."""
        self._native.rm(path)

    def mv(self, src: str, dst: str) -> None:
        """Renames ``src`` to ``dst``."""
        self._native.mv(src, dst)

    def link(self, src: str, dst: str) -> None:
        """Makes ``dst`` another name of the file ``src`` (a hard link: one file and one
        set of permissions under both names; removing one name keeps the file). Not of a
        directory (``PermissionError``)."""
        self._native.link(src, dst)

    def symlink(self, target: str, path: str) -> None:
        """Makes a symbolic link at ``path`` pointing to ``target`` (kept as given;
        Maat never follows it, a mount's kernel does)."""
        self._native.symlink(target, path)

    def readlink(self, path: str) -> str:
        """The target of the symbolic link at ``path`` (``OSError`` with ``EINVAL`` for
        anything else)."""
        return self._native.readlink(path)

    def mkfifo(self, path: str, mode: int = 0o666) -> None:
        """Makes a named pipe at ``path`` (each machine's kernel serves it; Maat keeps the
        name, its owner and its mode, the umask applied)."""
        self._native.mkfifo(path, mode)

    def utime(self, path: str, atime: Optional[float] = None, mtime: Optional[float] = None,
              now: bool = False) -> None:
        """Sets the access and/or modification time of ``path`` in seconds since the epoch
        (``None`` leaves one as it is), or both to now with ``now=True``. A time
        other than now is the owner's to set (``PermissionError``); now, also a writer's."""
        self._native.utime(path, atime, mtime, now)

    def chmod(self, path: str, mode: int) -> None:
        """Sets the permission bits (owner or administrator only). Capabilities already
        issued stop being renewed; access ends within one capability lifetime."""
        self._native.chmod(path, mode)

    def umask(self, mask: Optional[int] = None) -> int:
        """This user's umask: the permission bits the MDS clears from the mode of every
        file and directory the user creates, from any client (0o077 by default: private).
        Sets it when ``mask`` is given; returns the one in force."""
        return self._native.umask(mask)

    def chown(self, path: str, owner: Optional[str] = None, group: Optional[str] = None) -> None:
        """Sets the owner and/or group, by name (administrator, or owner for the group)."""
        self._native.chown(path, owner, group)

    # -------------------------------------------------------------- data

    def put(self, local: PathLike, remote: str) -> int:
        """Stores the local file ``local`` at ``remote`` (created 0644 if new, replaced
        otherwise); returns the bytes stored. Stripes go to the OSDs in parallel."""
        return self._native.put(os.fspath(local), remote)

    def get(self, remote: str, local: PathLike) -> int:
        """Fetches ``remote`` into the local file ``local``; returns the bytes written."""
        return self._native.get(remote, os.fspath(local))

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``."""
        return self._native.cat(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Stores ``data`` as the whole content of ``path`` (created 0644 if new)."""
        self._native.pipe(path, bytes(data))

    def open(
        self,
        path: str,
        mode: str = "rb",
        buffering: int = -1,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
        perm: int = 0o644,
    ) -> IO[Any]:
        """Opens ``path`` as a file object, as the built-in :func:`open` does.

        ``mode`` is ``r``, ``w``, ``x`` or ``a``, optionally with ``+``, and ``b`` for
        bytes (the default here is ``"rb"``; without ``b`` the file is text). New files
        get the permission bits ``perm``. Binary files are buffered with
        :data:`DEFAULT_BUFFER_SIZE` unless ``buffering`` says otherwise (``0``: raw).

        Written data is on the OSDs (durable) when a write of the buffer returns; the
        size is recorded at the MDS on ``flush()`` and ``close()``. Readers that open
        the file afterwards see it (close-to-open consistency).

        Raises:
            FileNotFoundError, PermissionError, FileExistsError (``x``),
            IsADirectoryError.
        """
        flags = parse_mode(mode)
        handle = self._native.open_handle(
            path,
            write=flags.write,
            create=perm if flags.create else None,
            exclusive=flags.exclusive,
            truncate=flags.truncate,
        )
        raw = RawFile(handle, path, flags)
        if buffering == 0:
            if not flags.binary:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        buffered: IO[bytes]
        if flags.read and flags.write:
            buffered = BufferedRandom(raw, size)
        elif flags.write:
            buffered = BufferedWriter(raw, size)
        else:
            buffered = io.BufferedReader(raw, size)
        if flags.binary:
            return buffered
        return io.TextIOWrapper(
            buffered,  # type: ignore[arg-type]
            encoding=encoding or "utf-8",
            errors=errors,
            newline=newline,
            line_buffering=buffering == 1,
        )
