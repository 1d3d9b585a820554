"""Issue 11's targets, measured side by side in one run on one cluster:

* Python ``Client.put``/``get`` of a large file against ``maat put``/``maat get``
  (target: Python >= 0.9 x the CLI);
* a sequential read through ``maat mount`` (``cat`` of the file) against ``maat get``
  (target: >= 0.7 x).

Rounds alternate the order of the contenders; the median of each is reported, with
ratios. Run with the release binary and the package built in release mode::

    cargo build --release --bin maat
    VIRTUAL_ENV=target/pyenv target/pyenv/bin/maturin develop --release -m crates/python/Cargo.toml
    target/pyenv/bin/python crates/python/bench/transfer.py --maat target/release/maat \\
        --data /dev/shm/maat-transfer --size-mib 256 --rounds 5 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--maat", default="target/release/maat", help="the maat binary")
    ap.add_argument("--data", default=None, help="cluster directory (default: a temporary one; /dev/shm keeps the disk out)")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--osds", type=int, default=4)
    ap.add_argument("--no-fuse", action="store_true", help="skip the mount comparison")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()

    import maat

    base = Path(args.data or tempfile.mkdtemp(prefix="maat-transfer-"))
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    data = base / "data"
    up = subprocess.Popen(
        [args.maat, "up", "--listen", "127.0.0.1:0", "--osds", str(args.osds), "--no-metrics", "--data", str(data)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    mount = None
    try:
        assert up.stdout is not None
        for line in up.stdout:
            if "ready" in line:
                break
        env = dict(os.environ, MAAT_CLUSTER=str(data / "client.toml"), MAAT_HOME=str(data / "admin"))
        size = args.size_mib << 20
        local = base / "local.bin"
        with open(local, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(args.size_mib):
                f.write(chunk)
        out = base / "out.bin"
        client = maat.Client(cluster=data / "client.toml", home=data / "admin")

        def cli(*a: str) -> Callable[[], None]:
            return lambda: subprocess.run([args.maat, *a], env=env, check=True, stdout=subprocess.DEVNULL)

        contenders: Dict[str, Callable[[], None]] = {
            "cli_put": cli("put", str(local), "/bench.bin"),
            "python_put": lambda: client.put(local, "/bench.bin"),
            "cli_get": cli("get", "/bench.bin", str(out)),
            "python_get": lambda: client.get("/bench.bin", out),
        }
        if not args.no_fuse:
            point = base / "mnt"
            point.mkdir()
            mount = subprocess.Popen([args.maat, "mount", "/", str(point)], env=env, stderr=subprocess.DEVNULL)
            deadline = time.time() + 20
            while not os.path.ismount(point):
                if time.time() > deadline or mount.poll() is not None:
                    raise RuntimeError("maat mount did not come up (is /dev/fuse there? fusermount3?)")
                time.sleep(0.05)

            def fuse_read() -> None:
                with open(point / "bench.bin", "rb") as f, open(out, "wb") as g:
                    shutil.copyfileobj(f, g, 1 << 20)

            contenders["fuse_read"] = fuse_read
        client.put(local, "/bench.bin")
        times: Dict[str, List[float]] = {k: [] for k in contenders}
        names = list(contenders)
        for r in range(args.rounds):
            order = names if r % 2 == 0 else list(reversed(names))
            for name in order:
                if name.endswith("_get") or name == "fuse_read":
                    out.unlink(missing_ok=True)
                t = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - t)
                if name.endswith("_get") or name == "fuse_read":
                    assert out.stat().st_size == size, f"{name} read {out.stat().st_size} bytes"
        mib = {k: args.size_mib / statistics.median(v) for k, v in times.items()}
        result = {f"{k}_mib_s": round(v, 1) for k, v in mib.items()}
        result["python_put_over_cli"] = round(mib["python_put"] / mib["cli_put"], 3)
        result["python_get_over_cli"] = round(mib["python_get"] / mib["cli_get"], 3)
        if "fuse_read" in mib:
            result["fuse_read_over_cli_get"] = round(mib["fuse_read"] / mib["cli_get"], 3)
        result["size_mib"] = args.size_mib
        result["rounds"] = args.rounds
        if args.json:
            print(json.dumps(result))
        else:
            for k, v in result.items():
                print(f"{k:<28} {v}")
        return 0
    finally:
        if mount is not None and mount.poll() is None:
            mount.send_signal(signal.SIGTERM)
            mount.wait(timeout=20)
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)
        if args.data is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
