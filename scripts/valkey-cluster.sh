#!/usr/bin/env bash
# A throw-away 3-master Valkey (Redis) cluster on loopback, for the cluster tests.
#
#   scripts/valkey-cluster.sh start DIR   start it (data and logs in DIR); prints its URL
#                                         (redis+cluster://127.0.0.1:<first port>) and writes it to DIR/url
#   scripts/valkey-cluster.sh stop DIR    stop the nodes started in DIR and remove DIR
#
# The ports are the first three free ones from CLUSTER_BASE_PORT (default 7100); the cluster bus of
# each node uses port + 10000. No replicas, no persistence.
set -eu
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
server=$(command -v valkey-server || command -v redis-server)
cli=$(command -v valkey-cli || command -v redis-cli)

free() { ! "$cli" -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1 && ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

case "$cmd" in
start)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  port=${CLUSTER_BASE_PORT:-7100}
  ports=()
  while [ "${#ports[@]}" -lt 3 ]; do
    if free "$port" && free $((port + 10000)); then ports+=("$port"); fi
    port=$((port + 1))
    [ "$port" -lt 60000 ] || { echo "valkey-cluster: no free ports" >&2; exit 1; }
  done
  for p in "${ports[@]}"; do
    "$server" --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
      --cluster-node-timeout 5000 --appendonly no --save "" --daemonize yes --dir "$dir" \
      --logfile "$dir/node-$p.log" --pidfile "$dir/node-$p.pid"
    echo "$p" >>"$dir/ports"
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 1 50); do "$cli" -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  "$cli" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 \
    || { cat "$dir/create.log" >&2; exit 1; }
  for p in "${ports[@]}"; do
    for _ in $(seq 1 100); do
      "$cli" -p "$p" cluster info 2>/dev/null | grep -q "cluster_state:ok" && break
      sleep 0.1
    done
    "$cli" -p "$p" cluster info | grep -q "cluster_state:ok" || { echo "valkey-cluster: node $p not ok" >&2; exit 1; }
  done
  url="redis+cluster://127.0.0.1:${ports[0]}"
  echo "$url" >"$dir/url"
  echo "$url"
  ;;
stop)
  [ -d "$dir" ] || exit 0
  if [ -f "$dir/ports" ]; then
    while read -r p; do
      if [ -f "$dir/node-$p.pid" ]; then
        kill "$(cat "$dir/node-$p.pid")" 2>/dev/null || true
      fi
    done <"$dir/ports"
    sleep 0.3
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
