//! A nats-server a test starts for itself with the security production clusters use: a TLS
//! listener whose certificate a [`TestCa`] signed, client certificates verified
//! (`verify: true`), users with passwords and NKeys, a token, or operator mode with a memory
//! resolver and JWTs made in the test ([`NatsOperator`]). JetStream is on, with a store
//! directory of its own, on a free loopback port; the server is killed on drop.

use super::free_port;
use super::nats_cluster::{binary, healthz};
use super::test_ca::{ServerCert, TestCa};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to answer `/healthz` with JetStream ready.
const BOOT_LIMIT: Duration = Duration::from_secs(20);

/// What the server demands, written into its configuration file.
#[derive(Default)]
pub struct NatsSecureConfig {
    tls: Option<(ServerCert, Option<String>)>,
    users: Vec<String>,
    token: Option<String>,
    operator: Option<String>,
}

postroom_core::debug_showing!(NatsSecureConfig {});

impl NatsSecureConfig {
    /// A plaintext server without authentication (add what the test needs).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// TLS only, with `cert` (the server's certificate and key).
    #[must_use]
    pub fn tls(mut self, cert: ServerCert) -> Self {
        self.tls = Some((cert, None));
        self
    }

    /// Clients must present a certificate `ca` signed (`verify: true`); needs [`Self::tls`].
    #[must_use]
    pub fn verify_clients(mut self, ca: &TestCa) -> Self {
        if let Some((_, verify)) = &mut self.tls {
            *verify = Some(ca.cert_pem().to_string());
        }
        self
    }

    /// A user with a password.
    #[must_use]
    pub fn user(mut self, user: &str, password: &str) -> Self {
        self.users.push(format!(
            "{{ user: {}, password: {} }}",
            quoted(user),
            quoted(password)
        ));
        self
    }

    /// An NKey user: its public key (`U…`).
    #[must_use]
    pub fn nkey_user(mut self, public_key: &str) -> Self {
        self.users
            .push(format!("{{ nkey: {} }}", quoted(public_key)));
        self
    }

    /// Clients authenticate with this token (no users then).
    #[must_use]
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    /// Operator mode: `operator` vouches for its accounts, which a memory resolver holds.
    #[must_use]
    pub fn operator(mut self, operator: &NatsOperator) -> Self {
        self.operator = Some(operator.server_config());
        self
    }

    fn text(&self, port: u16, monitor: u16, dir: &Path) -> String {
        let mut t = format!(
            "listen: \"127.0.0.1:{port}\"\nhttp: \"127.0.0.1:{monitor}\"\n\
             jetstream {{ store_dir: {} }}\n",
            quoted(&dir.join("store").display().to_string())
        );
        if let Some((cert, verify)) = &self.tls {
            let cert_file = write(dir, "server-cert.pem", &cert.cert_pem);
            let key_file = write(dir, "server-key.pem", &cert.key_pem);
            let _ = write!(
                t,
                "tls {{\n  cert_file: {}\n  key_file: {}\n  timeout: 2\n",
                quoted(&cert_file),
                quoted(&key_file)
            );
            if let Some(ca) = verify {
                let ca_file = write(dir, "client-ca.pem", ca);
                let _ = write!(t, "  ca_file: {}\n  verify: true\n", quoted(&ca_file));
            }
            t.push_str("}\n");
        }
        if let Some(token) = &self.token {
            let _ = writeln!(t, "authorization {{ token: {} }}", quoted(token));
        } else if !self.users.is_empty() {
            let _ = writeln!(
                t,
                "authorization {{ users: [\n  {}\n] }}",
                self.users.join(",\n  ")
            );
        }
        if let Some(op) = &self.operator {
            t.push_str(op);
        }
        t
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string quotes")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a server file");
    path.display().to_string()
}

/// A running server.
pub struct NatsSecureServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl std::fmt::Debug for NatsSecureServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSecureServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl NatsSecureServer {
    /// Start a server with `config` and return once it is healthy (JetStream ready).
    #[must_use]
    pub fn start(config: &NatsSecureConfig) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("postroom-nats-secure-")
            .tempdir()
            .expect("temporary directory");
        let (port, monitor) = (free_port(), free_port());
        let conf = dir.path().join("nats.conf");
        std::fs::write(&conf, config.text(port, monitor, dir.path()))
            .expect("write the server's configuration");
        let log_path = dir.path().join("nats.log");
        let log = std::fs::File::create(&log_path).expect("server log file");
        let child = Command::new(binary())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary().display()));
        let mut server = Self {
            dir,
            port,
            child: Some(child),
        };
        let end = Instant::now() + BOOT_LIMIT;
        loop {
            if healthz(monitor).ok() == Some(200) {
                return server;
            }
            let exited = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > end {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!(
                    "the NATS server was not healthy within {BOOT_LIMIT:?} (exited: {exited:?}); its log: {log}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `<scheme>://127.0.0.1:<port>` (`nats` or `tls`).
    #[must_use]
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The client port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A directory for the test's client files (CA, certificates, secrets), removed with the
    /// server.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Write `text` to `name` in [`Self::dir`] and return its path.
    pub fn write_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write a client file");
        path
    }

    /// The server's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }
}

impl Drop for NatsSecureServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An operator, the system account and one application account with JetStream, their
/// NKeys made in the test and their JWTs signed by hand (`ed25519-nkey`), as `nsc` would
/// make them; users of the account get `.creds` files.
pub struct NatsOperator {
    operator: KeyPair,
    system: KeyPair,
    account: KeyPair,
}

postroom_core::debug_showing!(NatsOperator {});

impl Default for NatsOperator {
    fn default() -> Self {
        Self::new()
    }
}

impl NatsOperator {
    /// New keys for an operator, its system account and an application account.
    #[must_use]
    pub fn new() -> Self {
        Self {
            operator: KeyPair::new_operator(),
            system: KeyPair::new_account(),
            account: KeyPair::new_account(),
        }
    }

    /// The application account's public key.
    #[must_use]
    pub fn account_key(&self) -> String {
        self.account.public_key()
    }

    /// The `.creds` text of a new user `name` of the application account.
    #[must_use]
    pub fn user_creds(&self, name: &str) -> String {
        user_creds(&self.account, name)
    }

    /// The `.creds` text of a user signed by an account this operator never vouched for.
    #[must_use]
    pub fn stranger_creds(&self, name: &str) -> String {
        user_creds(&KeyPair::new_account(), name)
    }

    fn server_config(&self) -> String {
        let operator = jwt(
            &self.operator,
            &self.operator.public_key(),
            "postroom-test-operator",
            serde_json::json!({
                "type": "operator", "version": 2,
                "system_account": self.system.public_key(),
            }),
        );
        let base_limits = serde_json::json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
        });
        let mut app_limits = base_limits.clone();
        for k in ["mem_storage", "disk_storage", "streams", "consumer"] {
            app_limits[k] = serde_json::json!(-1);
        }
        let account = |kp: &KeyPair, name: &str, limits: &serde_json::Value| {
            jwt(
                &self.operator,
                &kp.public_key(),
                name,
                serde_json::json!({
                    "type": "account", "version": 2, "limits": limits,
                    "default_permissions": { "pub": {}, "sub": {} },
                }),
            )
        };
        format!(
            "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n}}\n",
            quoted(&operator),
            quoted(&self.system.public_key()),
            self.system.public_key(),
            quoted(&account(&self.system, "SYS", &base_limits)),
            self.account.public_key(),
            quoted(&account(&self.account, "APP", &app_limits)),
        )
    }
}

fn user_creds(account: &KeyPair, name: &str) -> String {
    let user = KeyPair::new_user();
    let token = jwt(
        account,
        &user.public_key(),
        name,
        serde_json::json!({
            "type": "user", "version": 2, "pub": {}, "sub": {},
            "subs": -1, "data": -1, "payload": -1,
        }),
    );
    format!(
        "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n",
        user.seed().expect("a new user key has its seed")
    )
}

/// A JWT for `subject` with `nats` claims, signed by `issuer`.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = serde_json::json!({
        "jti": uuid::Uuid::now_v7().simple().to_string().to_uppercase(),
        "iat": chrono::Utc::now().timestamp(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = issuer.sign(signed.as_bytes()).expect("sign the JWT");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}
