#!/usr/bin/env bash
# Captures the /routez and /gatewayz replies under tests/fixtures/<version>/
# that the mutation tests and fuzz seeds start from: cluster A of two servers
# (a0, a1) and cluster B of one server (b0), joined by gateways, all on
# loopback ports chosen by the OS; the replies are a0's.
#   scripts/capture-link-fixtures.sh 2.15.1 .tools/nats-server-2.15.1/bin/nats-server
#   scripts/capture-link-fixtures.sh 2.9.10 /usr/sbin/nats-server
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$1
bin=$2
out="$root/tests/fixtures/$version"
mkdir -p "$out"
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
route_a0=$(port); route_a1=$(port); gw_a0=$(port); gw_a1=$(port); gw_b0=$(port); http_a0=$(port)
server() { # name http cluster-block gateway-block
  printf 'server_name: %s\nhost: 127.0.0.1\nport: -1\nhttp: "127.0.0.1:%s"\n%s\n%s\n' "$1" "$2" "$3" "$4" >"$dir/$1.conf"
  "$bin" -c "$dir/$1.conf" >"$dir/$1.log" 2>&1 &
  pids+=($!)
}
gateway_a() { echo "gateway { name: A, listen: \"127.0.0.1:$1\", gateways: [{name: B, url: \"nats://127.0.0.1:$gw_b0\"}] }"; }
server a0 "$http_a0" "cluster { name: A, listen: \"127.0.0.1:$route_a0\", routes: [\"nats-route://127.0.0.1:$route_a1\"] }" "$(gateway_a "$gw_a0")"
server a1 "$(port)" "cluster { name: A, listen: \"127.0.0.1:$route_a1\", routes: [\"nats-route://127.0.0.1:$route_a0\"] }" "$(gateway_a "$gw_a1")"
server b0 "$(port)" "" "gateway { name: B, listen: \"127.0.0.1:$gw_b0\", gateways: [{name: A, url: \"nats://127.0.0.1:$gw_a0\"}] }"
sleep 5
for endpoint in routez gatewayz; do
  curl -sf "http://127.0.0.1:$http_a0/$endpoint" | python3 -m json.tool >"$out/$endpoint.json"
done
echo "wrote $out"
