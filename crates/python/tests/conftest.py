"""A real local cluster for the Python tests: `maat up` on loopback in a temporary
directory (the binary from $MAAT_BIN, else target/debug/maat), stopped at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]


def maat_binary() -> str:
    binary = os.environ.get("MAAT_BIN") or str(ROOT / "target" / "debug" / "maat")
    if not os.path.exists(binary):
        pytest.fail(f"no maat binary at {binary}: run `cargo build --bin maat` or set MAAT_BIN")
    return binary


class Cluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.data = base / "data"
        self.cluster_file = self.data / "client.toml"
        self.admin_home = self.data / "admin"
        self.proc = subprocess.Popen(
            [maat_binary(), "up", "--listen", "127.0.0.1:0", "--osds", "3", "--no-metrics",
             "--data", str(self.data)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if "ready" in line:
                break
        else:
            raise RuntimeError("maat up ended before it was ready")
        # Keep draining its output so that it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def maat(self, home: Path, *args: str, stdin: Optional[str] = None) -> str:
        env = dict(os.environ, MAAT_CLUSTER=str(self.cluster_file), MAAT_HOME=str(home))
        out = subprocess.run([maat_binary(), *args], input=stdin, env=env, text=True,
                             capture_output=True)
        if out.returncode != 0:
            raise RuntimeError(f"maat {' '.join(args)} failed: {out.stderr}")
        return out.stdout

    def add_user(self, name: str, passphrase: str) -> Path:
        """A user made by the administrator through the CLI (test setup only), with an
        empty home of their own."""
        self.maat(self.admin_home, "admin", "user", "add", name, "--passphrase-stdin",
                  stdin=passphrase + "\n")
        home = self.base / f"home-{name}"
        home.mkdir()
        return home

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("maat"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
def admin(cluster: Cluster):
    import maat

    return maat.Client(cluster=cluster.cluster_file, home=cluster.admin_home)


@pytest.fixture()
def env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """MAAT_CLUSTER and MAAT_HOME set to the administrator, as a user's shell would have
    them: what `maat://` URLs use."""
    monkeypatch.setenv("MAAT_CLUSTER", str(cluster.cluster_file))
    monkeypatch.setenv("MAAT_HOME", str(cluster.admin_home))
    return cluster


_counter: List[int] = [0]


@pytest.fixture()
def unique() -> str:
    """A fresh directory name per test."""
    _counter[0] += 1
    return f"/t{os.getpid()}-{_counter[0]}"
