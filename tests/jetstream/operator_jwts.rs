//! An operator-mode server for tests: operator, system account and
//! accounts with JWTs signed here (nkeys), preloaded with
//! `resolver: MEMORY`, and users' credentials to connect with.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use nkeys::KeyPair;
use serde_json::{json, Value};

/// A JWT for `subject` named `name` with `nats` claims, signed by
/// `issuer`. The server checks the signature, not that `jti` is the
/// claims' hash, so `jti` is only made unique.
fn sign(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let claims = json!({
        "jti": format!("{}{}", subject.get(..20).unwrap_or(subject), name.len()),
        "iat": 1_700_000_000u64,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let text = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    let signed = format!("{}.{}", text(&header), text(&claims));
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An account: its key and name.
pub struct Account {
    /// Its key (the account's public key is its name to the server).
    pub key: KeyPair,
    /// Its name tag.
    pub name: String,
}

/// An operator with a system account, and the configuration of a server
/// that trusts it.
pub struct Operator {
    key: KeyPair,
    system: Account,
    preload: Vec<(String, String)>,
}

impl Operator {
    /// A new operator with its system account `SYS`.
    pub fn new() -> Operator {
        let system = Account {
            key: KeyPair::new_account(),
            name: "SYS".into(),
        };
        let mut op = Operator {
            key: KeyPair::new_operator(),
            preload: Vec::new(),
            system,
        };
        let jwt = op.account_jwt(&op.system, json!({}));
        op.preload.push((op.system.key.public_key(), jwt));
        op
    }

    /// Adds `account` with `limits` (the JWT's `nats.limits`, JetStream
    /// limits or `tiered_limits` among them; the rest unlimited).
    pub fn add(&mut self, account: &Account, limits: Value) {
        let jwt = self.account_jwt(account, limits);
        self.preload.push((account.key.public_key(), jwt));
    }

    /// `account`'s JWT, signed by the operator.
    fn account_jwt(&self, account: &Account, limits: Value) -> String {
        let mut all = json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1,
            "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
        });
        for (k, v) in limits.as_object().unwrap() {
            all[k] = v.clone();
        }
        let nats = json!({
            "limits": all,
            "default_permissions": {"pub": {}, "sub": {}},
            "type": "account",
            "version": 2,
        });
        sign(&self.key, &account.key.public_key(), &account.name, nats)
    }

    /// The server configuration: the operator, its system account and the
    /// accounts added so far; the server waits 30 s for a client's CONNECT
    /// (its 2 s default ran out for a test's client signing its nkey
    /// challenge on a loaded machine).
    pub fn config(&self) -> String {
        let op = self.key.public_key();
        let nats = json!({"type": "operator", "version": 2, "system_account": self.system.key.public_key()});
        let jwt = sign(&self.key, &op, "OP", nats);
        let preload: Vec<String> = (self.preload.iter())
            .map(|(k, j)| format!("  {k}: \"{j}\""))
            .collect();
        format!(
            "operator: \"{jwt}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n{}\n}}\n{AUTH_WAIT}",
            self.system.key.public_key(),
            preload.join("\n")
        )
    }

    /// Credentials of a new user of `account` (of the system account when
    /// `None`), for `ConnectOptions::with_credentials`.
    pub fn user(&self, account: Option<&Account>) -> String {
        let account = account.unwrap_or(&self.system);
        let user = KeyPair::new_user();
        let nats = json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2,
        });
        let jwt = sign(&account.key, &user.public_key(), "user", nats);
        format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        )
    }
}

/// Seconds a server of [`Operator::config`] waits for a client's CONNECT.
const AUTH_WAIT: &str = "authorization { timeout: 30 }\n";
