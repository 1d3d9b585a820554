#!/usr/bin/env bash
# A PostgreSQL cluster for Maat's metadata with automatic failover, on one machine, for
# trying it and for `scripts/test-patroni` (issue 42): one etcd and N Patroni nodes
# (default 2), each a PostgreSQL server on 127.0.0.1, streaming to the others,
# synchronous. On real hosts run one etcd per host (three for a quorum) and one node per
# host, from node.yml.in.
#
#   deploy/patroni/local.sh start DIR [N]   start etcd and N nodes under DIR, wait for a
#                                           leader, make the `maat` database, print the
#                                           MDS's meta_url
#   deploy/patroni/local.sh leader DIR      the leader's node name
#   deploy/patroni/local.sh kill DIR NAME   SIGKILL a node's Patroni and PostgreSQL
#   deploy/patroni/local.sh stop DIR        stop everything started under DIR
#
# Ports: etcd 2379 + offset, nodes' PostgreSQL 5441.., REST API 8101.. (MAAT_PATRONI_PORT
# shifts them all). Run as root, the nodes run as the postgres account.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,20p' "$0"; exit 2; }
shift_by=${MAAT_PATRONI_PORT:-0}
etcd_port=$((2379 + shift_by))
etcd_peer=$((2380 + shift_by))
pg_port() { echo $((5440 + shift_by + $1)); }
api_port() { echo $((8100 + shift_by + $1)); }

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi

leader() {
  local n
  for n in $(ls "$dir" | sed -n 's/^node\([0-9]*\)$/\1/p'); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$(api_port "$n")/leader" 2>/dev/null; then
      echo "node$n"
      return 0
    fi
  done
  return 1
}

case "$cmd" in
  start)
    nodes=${3:-2}
    command -v patroni >/dev/null && command -v etcd >/dev/null || {
      echo "local.sh: patroni and etcd are needed (apt-get install patroni etcd-server)" >&2
      exit 3
    }
    mkdir -p "$dir"
    chmod 0711 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    "${as_pg[@]}" etcd --name maat-meta --data-dir "$dir/etcd" \
      --listen-client-urls "http://127.0.0.1:$etcd_port" \
      --advertise-client-urls "http://127.0.0.1:$etcd_port" \
      --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
      --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
      --initial-cluster "maat-meta=http://127.0.0.1:$etcd_peer" \
      >"$dir/etcd.log" 2>&1 &
    echo $! >"$dir/etcd.pid"
    hosts=()
    ports=()
    for n in $(seq 1 "$nodes"); do
      node="$dir/node$n"
      mkdir -p "$node"
      chmod 0700 "$node"
      [ "$(id -u)" = 0 ] && chown postgres "$node"
      sed -e "s|@NAME@|node$n|" -e "s|@DIR@|$node|g" -e "s|@PG_PORT@|$(pg_port "$n")|g" \
        -e "s|@API_PORT@|$(api_port "$n")|g" -e "s|@BIN@|$bin|" \
        -e "s|@ETCD@|127.0.0.1:$etcd_port|" "$here/node.yml.in" >"$node/patroni.yml"
      chmod 0600 "$node/patroni.yml"
      [ "$(id -u)" = 0 ] && chown postgres "$node/patroni.yml"
      "${as_pg[@]}" patroni "$node/patroni.yml" >"$node/patroni.log" 2>&1 &
      echo $! >"$node/patroni.pid"
      hosts+=(127.0.0.1)
      ports+=("$(pg_port "$n")")
    done
    for _ in $(seq 120); do leader >/dev/null && break; sleep 0.5; done
    name=$(leader) || { echo "local.sh: no leader within 60 s; see $dir/node*/patroni.log" >&2; exit 1; }
    n=${name#node}
    for _ in $(seq 60); do
      "$bin/psql" -h 127.0.0.1 -p "$(pg_port "$n")" -U maat -d postgres -qAtc "SELECT 1" >/dev/null 2>&1 && break
      sleep 0.5
    done
    if ! "$bin/psql" -h 127.0.0.1 -p "$(pg_port "$n")" -U maat -d postgres -qAtc \
      "SELECT 1 FROM pg_database WHERE datname = 'maat'" | grep -q 1; then
      "$bin/psql" -h 127.0.0.1 -p "$(pg_port "$n")" -U maat -d postgres -qc "CREATE DATABASE maat"
    fi
    # Every node, in order; the MDS connects to whichever accepts writes (the leader).
    (IFS=,; echo "host=${hosts[*]} port=${ports[*]} user=maat dbname=maat target_session_attrs=read-write connect_timeout=2")
    ;;
  leader)
    leader
    ;;
  kill)
    node="$dir/${3:?node name}"
    # (The pid file holds runuser's pid when run as root: the patroni process is found by
    # its command line.)
    pkill -KILL -f "patroni $node/patroni.yml" 2>/dev/null || true
    if [ -f "$node/data/postmaster.pid" ]; then
      kill -KILL "$(head -1 "$node/data/postmaster.pid")" 2>/dev/null || true
    fi
    ;;
  stop)
    pkill -TERM -f "patroni $dir/node[0-9]*/patroni.yml" 2>/dev/null || true
    for _ in $(seq 100); do
      pgrep -f "patroni $dir/node[0-9]*/patroni.yml" >/dev/null || break
      sleep 0.2
    done
    for pm in "$dir"/node*/data/postmaster.pid; do
      [ -f "$pm" ] && kill -INT "$(head -1 "$pm")" 2>/dev/null || true
    done
    pkill -TERM -f "etcd --name maat-meta --data-dir $dir/etcd" 2>/dev/null || true
    sleep 1
    # (Run as root, runuser may outlive its child: whatever is left goes now.)
    pkill -KILL -f "patroni $dir/node[0-9]*/patroni.yml" 2>/dev/null || true
    pkill -KILL -f "etcd --name maat-meta --data-dir $dir/etcd" 2>/dev/null || true
    ;;
  *)
    sed -n '2,20p' "$0"
    exit 2
    ;;
esac
