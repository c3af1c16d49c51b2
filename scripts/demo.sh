#!/usr/bin/env bash
# The demo: the lab (examples/lab). Installs what it needs (nats-server and
# Prometheus, scripts/install-deps.sh), builds the exporter and the lab, then
# starts a nats-server, the exporter, an application using the link-in crate
# and Prometheus with the repository's alert rules, all on free loopback
# ports; drives each kind of loss and prints, for each, the true count, the
# count Prometheus holds and the alert that fired. About three minutes once built.
set -euo pipefail
cd "$(dirname "$0")/.."
PYPI_VERSIONS=2.15.1 ./scripts/install-deps.sh >/dev/null
cargo build --locked --bin nats-delivery-exporter --example lab
cargo run --locked -q --example lab -- "$@"
