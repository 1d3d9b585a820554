"""maat.Client against a real cluster: files, file objects, namespace and typed errors."""

from __future__ import annotations

import errno
import io
import os
import subprocess

import pytest

import maat

STRIPE = 512 * 1024


def test_put_get_round_trip_of_a_striped_file(admin, unique, tmp_path):
    data = os.urandom(3 * STRIPE + 12345)
    local = tmp_path / "in.bin"
    local.write_bytes(data)
    admin.mkdir(unique)
    assert admin.put(local, f"{unique}/big.bin") == len(data)
    out = tmp_path / "out.bin"
    assert admin.get(f"{unique}/big.bin", out) == len(data)
    assert out.read_bytes() == data
    assert admin.read_bytes(f"{unique}/big.bin") == data
    st = admin.stat(f"{unique}/big.bin")
    assert st["type"] == "file" and st["size"] == len(data) and st["owner"] == "admin"
    # Encrypted by default (`maat up`): the blocks authenticate themselves, so the data
    # path of an ALLDATA partition uses CMDRSP for it (SPEC H3).
    assert st["encrypted"] is True and st["protection"] == "CMDRSP"


def test_file_objects_read_write_seek_like_local_files(admin, unique, tmp_path):
    admin.mkdir(unique)
    path = f"{unique}/f.bin"
    local = tmp_path / "f.bin"
    ops = [("wb", 0, os.urandom(STRIPE + 100)), ("r+b", STRIPE - 10, b"x" * 50),
           ("ab", None, b"tail"), ("r+b", 3 * STRIPE, b"gap")]
    for mode, at, chunk in ops:
        with admin.open(path, mode) as f, open(local, mode) as g:
            if at is not None:
                assert f.seek(at) == g.seek(at)
            assert f.write(chunk) == g.write(chunk)
            assert f.tell() == g.tell()
        assert admin.read_bytes(path) == local.read_bytes()
    with admin.open(path, "rb") as f, open(local, "rb") as g:
        for at, n in [(0, 10), (STRIPE - 20, 40), (3 * STRIPE - 5, 100), (10**9, 5)]:
            f.seek(at)
            g.seek(at)
            assert f.read(n) == g.read(n)
        assert f.seek(-3, io.SEEK_END) == g.seek(-3, io.SEEK_END)
        assert f.read() == g.read() == b"gap"
    with admin.open(path, "r+b") as f, open(local, "r+b") as g:
        assert f.truncate(1000) == g.truncate(1000)
    assert admin.stat(path)["size"] == 1000
    assert admin.read_bytes(path) == local.read_bytes()[:1000]


def test_text_mode_and_unbuffered_files(admin, unique):
    admin.mkdir(unique)
    with admin.open(f"{unique}/t.txt", "w") as f:
        f.write("first line\nsecond line\n")
    with admin.open(f"{unique}/t.txt", "r") as f:
        assert f.readline() == "first line\n"
        assert f.read() == "second line\n"
    with admin.open(f"{unique}/t.txt", "rb", buffering=0) as raw:
        assert isinstance(raw, maat.RawFile)
        assert raw.read(5) == b"first"
    with pytest.raises(ValueError):
        admin.open(f"{unique}/t.txt", "rw")
    with admin.open(f"{unique}/t.txt", "rb") as f:
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"no")


def test_namespace_calls_and_their_errors(admin, unique):
    admin.mkdir(f"{unique}/a/b", parents=True)
    admin.write_bytes(f"{unique}/a/b/f", b"hello")
    assert admin.ls(f"{unique}/a") == ["b"]
    assert [e["name"] for e in admin.ls(f"{unique}/a/b", detail=True)] == ["f"]
    admin.mv(f"{unique}/a/b/f", f"{unique}/a/g")
    assert admin.read_bytes(f"{unique}/a/g") == b"hello"
    assert not admin.exists(f"{unique}/a/b/f")
    admin.chmod(f"{unique}/a/g", 0o600)
    assert admin.stat(f"{unique}/a/g")["mode"] == 0o600

    with pytest.raises(FileNotFoundError) as e:
        admin.stat(f"{unique}/nothing")
    assert e.value.errno == errno.ENOENT and e.value.code == "NoSuchFile"
    with pytest.raises(FileExistsError):
        admin.mkdir(f"{unique}/a")
    with pytest.raises(FileExistsError):
        admin.open(f"{unique}/a/g", "xb")
    with pytest.raises(IsADirectoryError):
        admin.open(f"{unique}/a", "rb")
    with pytest.raises(OSError) as e:
        admin.rmdir(f"{unique}/a")
    assert e.value.errno == errno.ENOTEMPTY
    # A hard link: one file under two names; removing one keeps it (issue 44).
    admin.link(f"{unique}/a/g", f"{unique}/a/h")
    assert admin.stat(f"{unique}/a/h")["id"] == admin.stat(f"{unique}/a/g")["id"]
    with pytest.raises(FileExistsError):
        admin.link(f"{unique}/a/g", f"{unique}/a/h")
    assert admin.stat(f"{unique}/a/g")["nlink"] == 2
    admin.rm(f"{unique}/a/h")
    assert admin.read_bytes(f"{unique}/a/g") == b"hello"
    assert admin.stat(f"{unique}/a/g")["nlink"] == 1
    admin.utime(f"{unique}/a/g", atime=1_000.5, mtime=2_000)
    s = admin.stat(f"{unique}/a/g")
    assert (s["atime"], s["mtime"]) == (1_000.5, 2_000) and s["ctime"] > 2_000
    admin.symlink("g", f"{unique}/a/sym")
    assert admin.readlink(f"{unique}/a/sym") == "g"
    admin.mkfifo(f"{unique}/a/pipe", 0o600)
    assert admin.stat(f"{unique}/a/pipe")["mode"] & 0o170000 == 0o010000
    admin.rm(f"{unique}/a/sym")
    admin.rm(f"{unique}/a/pipe")
    admin.rm(f"{unique}/a/g")
    admin.rmdir(f"{unique}/a/b")
    admin.rmdir(f"{unique}/a")
    assert admin.ls(unique) == []


def test_permission_refusals_raise_permission_error(cluster, admin, unique):
    home = cluster.add_user("pybob", "pybob passphrase")
    bob = maat.Client(cluster=cluster.cluster_file, home=home)
    bob.login("pybob", "pybob passphrase")
    assert bob.whoami() == "pybob"
    admin.mkdir(unique, mode=0o755)
    admin.write_bytes(f"{unique}/secret", b"admin only")
    admin.chmod(f"{unique}/secret", 0o600)

    with pytest.raises(PermissionError) as e:
        bob.read_bytes(f"{unique}/secret")
    assert e.value.errno == errno.EACCES and e.value.code == "PermissionDenied"
    with pytest.raises(PermissionError):
        bob.open(f"{unique}/secret", "rb")
    with pytest.raises(PermissionError):
        bob.write_bytes(f"{unique}/mine", b"not in admin's directory")
    with pytest.raises(PermissionError):
        bob.chmod(f"{unique}/secret", 0o644)
    # Refusals are not security failures.
    with pytest.raises(PermissionError) as e:
        bob.rm(f"{unique}/secret")
    assert not isinstance(e.value, maat.SecurityError)


def test_security_failures_raise_the_security_error_family(cluster, admin, unique):
    home = cluster.add_user("pycarol", "pycarol passphrase")
    carol = maat.Client(cluster=cluster.cluster_file, home=home)
    with pytest.raises(maat.AuthenticationError) as e:
        carol.login("pycarol", "wrong passphrase")
    assert isinstance(e.value, maat.SecurityError)
    with pytest.raises(maat.NotLoggedInError):
        carol.stat("/")

    carol.login("pycarol", "pycarol passphrase")
    # What a user makes is private by default (umask 077, issue 40); shared by chmod.
    assert admin.umask() == 0o077
    admin.mkdir(unique)
    admin.write_bytes(f"{unique}/private", b"the administrator's")
    admin.write_bytes(f"{unique}/shared", b"readable by all")
    with pytest.raises(PermissionError):
        carol.read_bytes(f"{unique}/private")
    admin.chmod(unique, 0o755)
    admin.chmod(f"{unique}/shared", 0o644)
    with pytest.raises(PermissionError):
        carol.read_bytes(f"{unique}/private")
    assert carol.read_bytes(f"{unique}/shared") == b"readable by all"
    cluster.maat(cluster.admin_home, "admin", "revoke", "--user", "pycarol")
    with pytest.raises(maat.RevokedError) as e:
        carol.read_bytes(f"{unique}/shared")
    assert isinstance(e.value, maat.SecurityError) and e.value.code == "Revoked"


def test_a_client_is_shared_by_threads(admin, unique):
    from concurrent.futures import ThreadPoolExecutor

    admin.mkdir(unique)
    blobs = {f"{unique}/f{i}": os.urandom(1000 + i) for i in range(16)}

    def round_trip(item):
        path, data = item
        admin.write_bytes(path, data)
        return admin.read_bytes(path) == data

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(round_trip, blobs.items()))


def test_flush_records_the_size_for_other_readers(admin, cluster, unique):
    admin.mkdir(unique)
    other = maat.Client(cluster=cluster.cluster_file, home=cluster.admin_home)
    with admin.open(f"{unique}/grow.bin", "wb") as f:
        f.write(b"x" * 1000)
        f.flush()
        assert other.stat(f"{unique}/grow.bin")["size"] == 1000
        f.write(b"y" * 24)
    assert other.read_bytes(f"{unique}/grow.bin") == b"x" * 1000 + b"y" * 24
