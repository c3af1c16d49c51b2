//! Builds the storm applications of `examples/` for
//! `other_language_reporters.rs`, each from what `scripts/install-deps.sh`
//! downloaded (Go's module cache, Maven's local repository, a folder of
//! Python wheels): nothing is fetched while the tests run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nats_test_server::wait::Wait;
use nats_test_server::workspace_root;

use crate::other_language_reporters::Killed;

/// Runs `command` to its end (at most `secs`, a cold build on a loaded
/// machine), its output kept in `dir`; fails the test with that output.
fn run_to_end(mut command: Command, what: &str, dir: &Path, secs: u64) {
    let log_path = dir.join(format!("{}.log", what.replace(' ', "-")));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Killed(
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {command:?} ({e}): run scripts/install-deps.sh")
            }),
    );
    let status = Wait::secs(what, secs)
        .every(Duration::from_millis(100))
        .until_blocking(|| child.0.try_wait().unwrap());
    assert!(
        status.success(),
        "{what} failed ({command:?}); run scripts/install-deps.sh if a download is missing:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
}

/// What follows `prefix` in `file` up to `end` (a `go.mod` requirement's
/// version, a `pom.xml` property).
pub fn required_version(file: &Path, prefix: &str, end: char) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let (_, rest) = text
        .split_once(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {}", file.display()));
    rest.split(end).next().unwrap().trim().to_string()
}

/// Builds `examples/go-reporter`'s storm with the module file `modfile`
/// (`go.mod`: the newest nats.go; `go.oldest.mod`: the oldest supported),
/// from the module cache alone. Returns the directory and the binary.
pub fn go_storm(modfile: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("storm");
    let mut build = Command::new("go");
    build
        .args([
            "build",
            "-buildvcs=false",
            &format!("-modfile={modfile}"),
            "-o",
        ])
        .arg(&binary)
        .arg("./storm")
        .current_dir(workspace_root().join("examples/go-reporter"))
        // The module cache only: a missing module fails, never downloads.
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local");
    run_to_end(build, "go build of the storm", dir.path(), 300);
    (dir, binary)
}

/// Builds `examples/java-reporter` offline into a directory of its own
/// (tests of several server versions build at once) and returns it with
/// the command that runs its storm.
pub fn java_storm() -> (tempfile::TempDir, Command) {
    let dir = tempfile::tempdir().unwrap();
    let pom = workspace_root().join("examples/java-reporter/pom.xml");
    let mut build = Command::new("mvn");
    build
        .args(["-o", "-B", "-q", "-f"])
        .arg(&pom)
        .arg(format!(
            "-Dbuild.dir={}",
            dir.path().join("build").display()
        ))
        .args(["-DskipTests", "-DincludeScope=runtime"])
        .args(["package", "dependency:copy-dependencies"]);
    run_to_end(build, "mvn package of the storm", dir.path(), 600);
    let build = dir.path().join("build");
    let classpath = format!(
        "{}:{}/*",
        build.join("classes").display(),
        build.join("dependency").display()
    );
    let mut storm = Command::new("java");
    storm
        .args(["-cp", &classpath])
        .arg("io.natsdelivery.storm.Storm");
    (dir, storm)
}

/// Where `scripts/install-deps.sh` keeps the wheels of nats-py and of the
/// build backend, for installs without an index.
fn python_wheels() -> PathBuf {
    let wheels = workspace_root().join(".tools/python-wheels");
    assert!(
        wheels.is_dir(),
        "no {}: run scripts/install-deps.sh",
        wheels.display()
    );
    wheels
}

/// Installs `examples/python-reporter` (a copy: a build writes beside its
/// sources) into a fresh virtual environment with `pip install`, offline,
/// and returns the directory and the environment's Python.
pub fn python_with_reporter() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("package");
    copy_tree(&workspace_root().join("examples/python-reporter"), &package);
    let venv = dir.path().join("venv");
    // install-deps.sh's own environment makes the new one without pip and
    // installs into it from outside (`pip --python`), with no bytecode
    // compiled: `ensurepip` and compiling pip's thousand files are the
    // CPU-heavy part, and took over 120 s on a loaded 2-core machine.
    let tools_python = workspace_root().join(".tools/pip/bin/python");
    assert!(
        tools_python.exists(),
        "no {}: run scripts/install-deps.sh",
        tools_python.display()
    );
    let mut make = Command::new(&tools_python);
    make.args(["-m", "venv", "--without-pip"]).arg(&venv);
    run_to_end(make, "python3 -m venv", dir.path(), 120);
    let python = venv.join("bin/python");
    let mut install = Command::new(&tools_python);
    install
        .args(["-m", "pip", "--python"])
        .arg(&python)
        .args(["install", "--no-compile", "--disable-pip-version-check"])
        .args(["--no-index", "--find-links"])
        .arg(python_wheels())
        .arg(&package);
    run_to_end(install, "pip install of the reporter", dir.path(), 300);
    // The storm must import the installed package, not a file beside it.
    let out = Command::new(&python)
        .args([
            "-c",
            "import nats_delivery_reporter as r; print(r.__file__)",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let from = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && Path::new(from.trim()).starts_with(&venv),
        "nats_delivery_reporter imported from {from:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, python)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
