"""The maat:// fsspec filesystem: pandas, pyarrow and zarr unchanged."""

from __future__ import annotations

import fsspec
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import maat
from maat.fs import MaatFileSystem


def frame() -> pd.DataFrame:
    n = 5000
    return pd.DataFrame({
        "id": np.arange(n),
        "x": np.linspace(0.0, 1.0, n),
        "label": [f"row-{i}" for i in range(n)],
    })


def test_the_protocol_is_registered():
    assert fsspec.get_filesystem_class("maat") is MaatFileSystem


def test_pandas_csv_round_trip(env, unique):
    df = frame()
    df.to_csv(f"maat://{unique}/data.csv", index=False)
    back = pd.read_csv(f"maat://{unique}/data.csv")
    pd.testing.assert_frame_equal(back, df)


def test_parquet_round_trip_through_pandas_and_pyarrow(env, unique):
    df = frame()
    df.to_parquet(f"maat://{unique}/data.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(f"maat://{unique}/data.parquet"), df)
    fs = fsspec.filesystem("maat")
    table = pq.read_table(f"{unique}/data.parquet", filesystem=fs)
    assert table.num_rows == len(df)
    assert table.column("label").to_pylist()[:2] == ["row-0", "row-1"]


def test_zarr_array_written_and_read_back(env, unique):
    zarr = pytest.importorskip("zarr")
    data = np.arange(64 * 48, dtype="f8").reshape(64, 48)
    z = zarr.open_array(f"maat://{unique}/a.zarr", mode="w", shape=data.shape,
                        chunks=(16, 16), dtype="f8")
    z[:] = data
    back = zarr.open_array(f"maat://{unique}/a.zarr", mode="r")
    np.testing.assert_array_equal(back[:], data)
    np.testing.assert_array_equal(back[10:20, 5:9], data[10:20, 5:9])


def test_fsspec_open_ls_info_mv_rm(env, unique):
    fs = fsspec.filesystem("maat")
    with fsspec.open(f"maat://{unique}/d/notes.txt", "w") as f:
        f.write("hello\n")
    assert fs.cat_file(f"{unique}/d/notes.txt") == b"hello\n"
    assert fs.cat_file(f"{unique}/d/notes.txt", start=1, end=4) == b"ell"
    assert fs.ls(f"{unique}/d", detail=False) == [f"{unique}/d/notes.txt"]
    info = fs.info(f"maat://{unique}/d/notes.txt")
    assert info["type"] == "file" and info["size"] == 6
    fs.mv(f"{unique}/d/notes.txt", f"{unique}/d/moved.txt")
    assert not fs.exists(f"{unique}/d/notes.txt")
    with fs.open(f"{unique}/d/moved.txt", "ab") as f:
        f.write(b"more\n")
    assert fs.cat_file(f"{unique}/d/moved.txt") == b"hello\nmore\n"
    fs.rm(f"{unique}/d", recursive=True)
    assert not fs.exists(f"{unique}/d")


def test_permission_refusals_through_fsspec(cluster, admin, unique):
    home = cluster.add_user("pydave", "pydave passphrase")
    maat.Client(cluster=cluster.cluster_file, home=home).login("pydave", "pydave passphrase")
    admin.mkdir(unique)
    admin.write_bytes(f"{unique}/private.csv", b"a,b\n1,2\n")
    admin.chmod(f"{unique}/private.csv", 0o600)
    opts = {"cluster": str(cluster.cluster_file), "home": str(home)}
    with pytest.raises(PermissionError):
        pd.read_csv(f"maat://{unique}/private.csv", storage_options=opts)
    with pytest.raises(PermissionError):
        pd.DataFrame({"a": [1]}).to_csv(f"maat://{unique}/new.csv", storage_options=opts)


def test_reads_larger_than_one_native_call_are_whole(env, unique, tmp_path):
    size = maat._native.FILE_IO_BYTES_MAX + 3 * 512 * 1024 + 17
    local = tmp_path / "big.bin"
    data = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8).tobytes()
    local.write_bytes(data)
    fs = fsspec.filesystem("maat")
    fs.put_file(str(local), f"{unique}/big.bin")
    got = fs.cat_file(f"{unique}/big.bin", start=0, end=size)
    assert len(got) == size and got == data
    with fs.open(f"{unique}/big.bin", "rb", block_size=1 << 20) as f:
        assert f.read() == data
