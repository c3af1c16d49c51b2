#!/usr/bin/env bash
# The project's whole test suite, from a fresh Debian 12 machine with a Rust
# toolchain: installs the servers and tools it needs, builds once, runs every suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# The server versions the real-server suites run against, each one a .tools/
# name that scripts/install-deps.sh installs ("debian" is Debian 12's 2.9.10).
# The first runs with the whole suite; each other one reruns the integration
# tests (every test that starts a server is one) with NATS_SERVER_VERSION set.
# SERVER_VERSIONS="2.12.8" runs one version only.
SERVER_VERSIONS=${SERVER_VERSIONS:-"2.15.1 debian 2.10.26 2.11.11 2.12.8"}
# Versions whose integration tests run at the same time, each with the
# test-threads of .config/nextest.toml (the tests mostly wait on servers).
PARALLEL_VERSIONS=${PARALLEL_VERSIONS:-4}
# How long each part took, printed at the end.
timings=""
part_start=$SECONDS
part() {
  timings+=$(printf '%-40s %5d s' "$1" $((SECONDS - part_start)))$'\n'
  part_start=$SECONDS
}
./scripts/install-deps.sh
part "install-deps"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The workspace builds the link-in crate with every feature (the exporter's
# dev-dependency asks for them); an application may use none.
cargo check -p nats-delivery-metrics --no-default-features --locked
part "fmt + clippy"
# The reporters in other languages: their own formatting, vet and unit tests,
# offline (scripts/install-deps.sh downloaded what they build with). Their
# end-to-end tests against the exporter and real servers are integration
# tests (tests/client_reports/other_language_reporters.rs), run below.
go_reporter() { # the Go reporter on nats.go of each module file
  local unformatted modfile
  unformatted=$(gofmt -l .)
  [ -z "$unformatted" ] || { echo "gofmt would change: $unformatted"; return 1; }
  for modfile in go.mod go.oldest.mod; do
    GOPROXY=off go vet -modfile="$modfile" ./...
    GOPROXY=off go test -count=1 -modfile="$modfile" ./...
  done
}
(cd examples/go-reporter && go_reporter)
java_build=$(mktemp -d)
mvn -o -B -q -f examples/java-reporter/pom.xml -Dbuild.dir="$java_build" test
rm -rf "$java_build"
part "reporters: go vet, gofmt, go test, mvn test"
# Broken doc links and stray HTML in doc comments, with and without features.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --document-private-items
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --all-features
part "doc"
cargo build --workspace --all-targets --locked
part "build"
# Every run's output is kept to add up the results at the end.
results=$(mktemp)
logs=$(mktemp -d)
background=()
trap 'kill "${background[@]}" 2>/dev/null || true; rm -rf "$results" "$logs"' EXIT
# The deployment tests' static build (minutes of CPU, no waiting) runs beside
# the tests, which mostly wait on servers.
# So does the check that the link-in crate packages for crates.io and
# compiles from its package alone, outside the workspace (cargo check of the
# unpacked .crate with its own Cargo.lock: cargo package's own verification
# would build it again with full debug information).
check_crate_package() {
  cargo package -p nats-delivery-metrics --locked --no-verify
  local unpacked version
  unpacked=$(mktemp -d)
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' nats-delivery-metrics/Cargo.toml | head -n1)
  tar xzf "${CARGO_TARGET_DIR:-target}/package/nats-delivery-metrics-$version.crate" -C "$unpacked"
  cargo check --locked --target-dir "$(realpath "${CARGO_TARGET_DIR:-target}")" \
    --manifest-path "$unpacked/nats-delivery-metrics-$version/Cargo.toml"
  rm -rf "$unpacked"
}
# The link-in crate's tests against the newest async-nats of the workspace's
# range (the oldest is in Cargo.lock and runs with everything else): the
# workspace seen through symbolic links, with a Cargo.lock of its own that
# differs only in async-nats, built into the same target directory. Built
# before the tests (a build would hold the target directory's lock while
# other tests wait), run beside the other server versions' tests. The links
# stay at one place between runs: Cargo reuses a build of test-support made
# at another place, whose CARGO_MANIFEST_DIR would then be gone.
ASYNC_NATS_NEWEST=${ASYNC_NATS_NEWEST:-0.52.0}
newest_shadow="$(realpath "${CARGO_TARGET_DIR:-target}")/async-nats-newest-workspace"
newest_async_nats() {
  CARGO_TARGET_DIR=$(realpath "${CARGO_TARGET_DIR:-target}") \
    cargo nextest run --manifest-path "$newest_shadow/Cargo.toml" --locked -p nats-delivery-metrics --all-features "$@"
}
build_crate_on_newest_async_nats() {
  local entry
  rm -rf "$newest_shadow"
  mkdir -p "$newest_shadow"
  for entry in ./* ./.[!.]*; do
    entry=${entry#./}
    case $entry in .git | target | Cargo.lock) ;; *) ln -s "$PWD/$entry" "$newest_shadow/$entry" ;; esac
  done
  cp Cargo.lock "$newest_shadow/"
  cargo update --manifest-path "$newest_shadow/Cargo.toml" -p async-nats --precise "$ASYNC_NATS_NEWEST"
  grep -A1 '^name = "async-nats"$' "$newest_shadow/Cargo.lock" | grep -qx "version = \"$ASYNC_NATS_NEWEST\"" ||
    { echo "the shadow workspace's Cargo.lock does not hold async-nats $ASYNC_NATS_NEWEST"; return 1; }
  newest_async_nats --no-run
}
{
  PROFILE=deploy-test ./scripts/build-static.sh >"$logs/static-binary" &&
    check_crate_package
} 2>"$logs/static-build" >&2 &
static_build=$!
background+=("$static_build")
build_crate_on_newest_async_nats
part "build (link-in crate on async-nats $ASYNC_NATS_NEWEST)"
# Tests run under cargo-nextest (each test its own process, many at once,
# a hung test failed after 5 minutes; .config/nextest.toml), from the build
# above. Every version runs to the end; the versions that failed are named
# and fail the run after the last one.
# Integration tests that start no nats-server and do not read the version
# under test run once, with NATS_TEST_NO_SERVER set: a test among them that
# asks for a server or its version fails (test-support's binary.rs), so none
# is run once by mistake. They are whole test modules.
no_server='binary_id(nats-delivery-exporter::docs) & test(/^(alert_policy|alert_rules|dashboard_policy|dashboards|flags_table|ledger|links|module_cycles|scrape_configs|support_table)::/)
  | binary_id(nats-delivery-exporter::deploy) & test(/^(debian|install_deps|kubernetes|release)::/)
  | binary_id(nats-delivery-exporter::binary) & test(/^(bounded_connections|bounded_shutdown|cli|listen_address|web_config_auth|web_config_reload|web_config_tls)::/)
  | binary_id(nats-delivery-exporter::sources) & test(/^(exposition_pieces|golden|hostile_memory|jsz_slow_server|mutated_exposition|mutated_replies|panic_recovery)::/)
  | binary_id(nats-delivery-exporter::jetstream) & test(/^cardinality_request::/)
  | binary_id(nats-delivery-exporter::jsz_streamed_parse)
  | binary_id(nats-delivery-metrics::http_server)'
failed_versions=""
first=${SERVER_VERSIONS%% *}
NATS_SERVER_VERSION=$first cargo nextest run --workspace --locked -E "not ($no_server)" 2>&1 | tee -a "$results" ||
  failed_versions+=" $first"
cargo test --workspace --locked --doc 2>&1 | tee -a "$results" || failed_versions+=" (doctests)"
part "tests, all ($first)"
# The lab in test mode, beside the other versions' tests: nats-server, the
# exporter, an instrumented application and Prometheus with the alert rules;
# every loss's count in Prometheus must equal the truth, every alert fire in
# its scenario only, every dashboard query return data. Run as built above
# (with the exporter binary beside it), on Prometheus 3 (built by
# install-deps.sh into .tools/prometheus) here, and on Debian's 2.42 later.
# Its Prometheus scrapes every second with a 1 s timeout, and every scrape
# must succeed: it runs at a higher CPU priority than the tests beside it
# (which wait on facts), so that their load does not starve its scrapes
# (nice only warns, and runs it as it is, where that is not allowed).
lab="${CARGO_TARGET_DIR:-target}/debug/examples/lab"
prometheus3="$PWD/.tools/prometheus/bin"
PROMETHEUS="$prometheus3/prometheus" nice -n -10 "$lab" --check >"$logs/lab" 2>&1 &
lab_run=$!
background+=("$lab_run")
# The link-in crate's backends read the same counters whatever the server:
# their tests run with the first version only.
first_version_only='binary_id(nats-delivery-metrics::backends) | (binary_id(nats-delivery-metrics::storm) & test(/^through_backends::/))'
# The reporters in other languages (each a build and a drop storm, minutes
# of CPU) are tested against the newest server and the oldest: with the
# first version and "debian".
reporters='binary_id(nats-delivery-exporter::client_reports) & test(/^other_language_reporters::/)'
rerun() {
  local skip="$first_version_only"
  [ "$1" = debian ] || skip+=" | $reporters"
  NATS_SERVER_VERSION=$1 cargo nextest run --workspace --locked \
    -E "kind(test) & not ($no_server) & not ($skip)" >"$logs/$1" 2>&1
}
NATS_TEST_NO_SERVER=1 cargo nextest run --workspace --locked -E "$no_server" >"$logs/no-server" 2>&1 &
no_server_run=$!
background+=("$no_server_run")
NATS_SERVER_VERSION=$first newest_async_nats >"$logs/async-nats-newest" 2>&1 &
newest_async_nats_run=$!
background+=("$newest_async_nats_run")
# shellcheck disable=SC2086 # the versions are words
set -- ${SERVER_VERSIONS#"$first"}
while [ $# -gt 0 ]; do
  batch=("${@:1:$PARALLEL_VERSIONS}")
  pids=()
  for v in "${batch[@]}"; do
    rerun "$v" &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    v=${batch[$i]}
    wait "${pids[$i]}" || failed_versions+=" $v"
    echo "== integration tests against nats-server $v =="
    tee -a "$results" <"$logs/$v"
  done
  part "integration tests (${batch[*]})"
  shift "${#pids[@]}"
done
wait "$no_server_run" || failed_versions+=" (the tests without a server)"
echo "== the tests that start no server, once =="
tee -a "$results" <"$logs/no-server"
part "tests without a server (the rest of them)"
wait "$newest_async_nats_run" || failed_versions+=" (the link-in crate on async-nats $ASYNC_NATS_NEWEST)"
echo "== the link-in crate's tests on async-nats $ASYNC_NATS_NEWEST =="
tee -a "$results" <"$logs/async-nats-newest"
part "link-in crate on async-nats $ASYNC_NATS_NEWEST (the rest)"
lab_failed=""
wait "$lab_run" || lab_failed=1
cat "$logs/lab"
part "lab --check, Prometheus 3 (the rest of it)"
if [ -n "$failed_versions" ] || [ -n "$lab_failed" ]; then
  printf '%s' "$timings"
  [ -z "$failed_versions" ] || echo "tests failed against nats-server:$failed_versions"
  [ -z "$lab_failed" ] || echo "the lab's check failed"
  exit 1
fi
# The lab once more on Debian's Prometheus 2.42 (PATH), the oldest
# Prometheus the rules are tested on, beside the parts below.
nice -n -10 "$lab" --check >"$logs/lab-prometheus-2" 2>&1 &
lab2_run=$!
background+=("$lab2_run")
# It refuses a server older than it needs, with the reason in one line.
if refusal=$(NATS_SERVER_VERSION=2.11.11 "$lab" --check 2>&1); then
  echo "the lab ran on nats-server 2.11.11 instead of refusing it"; exit 1
fi
[ "$(printf '%s\n' "$refusal" | wc -l)" = 1 ] && grep -q "needs nats-server 2.12 or newer, found 2.11.11" <<<"$refusal" ||
  { echo "the lab's refusal of 2.11.11 is not one clear line: $refusal"; exit 1; }
# The link-in crate's examples run as checks: the slow-subscriber experiment
# asserts that the metric equals the ground truth; the benchmark asserts no drops.
examples="${CARGO_TARGET_DIR:-target}/debug/examples"
"$examples/slow_subscriber" 100000 3
"$examples/overhead" 20000 1
part "lab refusal, link-in crate's examples"
# The alert rules and their unit tests on both Prometheus versions tested:
# Debian's 2.42 and Prometheus 3 (left-open range selectors: a window holds
# one sample fewer at its start).
if [ -d alerts ] && ls alerts/*.yml >/dev/null 2>&1; then
  for promtool in promtool "$prometheus3/promtool"; do
    "$promtool" --version 2>&1 | head -n1
    "$promtool" check rules alerts/*.rules.yml
    "$promtool" test rules alerts/tests/*.yml
  done
fi
# The consumer dashboard's ledger and query checks, which run promtool from
# PATH (2.42 above, with the tests that start no server), on promtool 3.
PATH="$prometheus3:$PATH" NATS_TEST_NO_SERVER=1 cargo nextest run --workspace --locked \
  -E 'binary_id(nats-delivery-exporter::docs) & test(/^(ledger|dashboards)::/)' 2>&1 | tee -a "$results"
part "promtool (2.42 and 3)"
# The container image, the .deb with its systemd unit and the Kubernetes
# objects, from the static build started above (needs root).
wait "$static_build" || { cat "$logs/static-build"; echo "the static build or the crate's package failed"; exit 1; }
part "static build, crate package (the rest)"
STATIC_BINARY=$(cat "$logs/static-binary") ./scripts/test-deploy.sh 2>&1 | tee -a "$results"
part "deploy: image, .deb, unit, manifests"
wait "$lab2_run" || { cat "$logs/lab-prometheus-2"; echo "the lab's check on Prometheus 2.42 failed"; exit 1; }
echo "== the lab on Prometheus 2.42 =="
grep -m1 '^  Prometheus ' "$logs/lab-prometheus-2" || true
tail -n 1 "$logs/lab-prometheus-2"
part "lab --check, Prometheus 2.42 (the rest of it)"
printf '%s' "$timings"
printf '%-40s %5d s\n' "total" "$SECONDS"
# One closing line for the whole run: nextest's summaries and the doctests'.
awk '/Summary \[/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$results"
