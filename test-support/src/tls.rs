//! Certificates for TLS tests, made with `openssl` (scripts/install-deps.sh installs it).

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl on PATH (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key, unencrypted, for `openssl req`.
const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A CA, a server certificate for 127.0.0.1 and a client certificate.
pub fn make_certs(dir: &Path) {
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ];
    ca.extend(EC_KEY);
    ca.extend([
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    sign(
        dir,
        "server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    sign(dir, "client", "extendedKeyUsage=clientAuth\n");
}

/// A key `<name>.key` and a certificate `<name>.pem` signed by the CA of
/// [`make_certs`] in `dir`, with the extensions `ext` (openssl's extfile
/// lines, e.g. `subjectAltName=DNS:a.example`). Each call makes a new key.
pub fn sign(dir: &Path, name: &str, ext: &str) {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let pem = format!("{name}.pem");
    let extfile = format!("{name}.ext");
    std::fs::write(dir.join(&extfile), ext).unwrap();
    let mut req = vec!["req", "-subj", "/CN=test", "-keyout", &key, "-out", &csr];
    req.extend(EC_KEY);
    openssl(dir, &req);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &pem,
            "-extfile",
            &extfile,
        ],
    );
}
