//! A PostgreSQL cluster a test starts for itself: `initdb` and `pg_ctl` from the installed
//! server in a temporary directory, on a free loopback port, optionally with TLS. The test can
//! SIGKILL it (a crash, not a shutdown) and start it again on the same data. The shared server
//! is never touched. The cluster is stopped and its files removed on drop, also when the test
//! panics. PostgreSQL refuses to run as root: when the test runs as root, the server runs as
//! the `postgres` user.
//!
//! Every cluster runs with `wal_level = logical` (and room for replication slots and WAL
//! senders), so that a test can read its write-ahead log by logical decoding, as the WAL
//! relay does; the other tests do not notice (it only adds some WAL).

use super::free_port;
use super::os_user::{OsUser, running_as_root};
use super::test_ca::ServerCert;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A running cluster of one's own.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    user: Option<OsUser>,
}

impl std::fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCluster")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// The directory of `initdb` and `pg_ctl`: `POSTROOM_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("POSTROOM_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed under /usr/lib/postgresql (or set POSTROOM_PG_BIN)")
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("no /usr/lib/postgresql/<version>/bin/initdb")
}

fn check(what: &str, out: std::io::Result<Output>, log: Option<&Path>) {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    if !out.status.success() {
        let log = log
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        panic!(
            "{what} failed ({}):\n{}\n{}\n{log}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl PgCluster {
    /// Create and start a cluster on `127.0.0.1` and a free port, trusting every local
    /// connection (user `postgres`), without TLS.
    #[must_use]
    pub fn start() -> Self {
        Self::create(None, &[])
    }

    /// [`start`](Self::start), the server offering TLS with `cert` (`ssl = on`).
    #[must_use]
    pub fn start_tls(cert: &ServerCert) -> Self {
        Self::create(Some(cert), &[])
    }

    /// [`start`](Self::start) with server settings of the caller's added to (or overriding)
    /// the defaults, e.g. `[("shared_buffers", "128MB")]` for a benchmark, or
    /// `[("max_slot_wal_keep_size", "1MB")]` for a test whose slot must be invalidated.
    #[must_use]
    pub fn start_with(settings: &[(&str, &str)]) -> Self {
        Self::create(None, settings)
    }

    fn create(tls: Option<&ServerCert>, settings: &[(&str, &str)]) -> Self {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("postroom-pg-")
            .tempdir()
            .expect("temporary directory");
        let user = running_as_root().then(|| {
            OsUser::find("postgres").expect("a `postgres` system user to run PostgreSQL as")
        });
        if let Some(u) = &user {
            u.own(dir.path());
        }
        let cluster = Self {
            dir,
            bin,
            port: free_port(),
            user,
        };
        let data = cluster.data_dir();
        check(
            "initdb",
            cluster
                .command("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"])
                .args(["--locale=C"])
                .output(),
            None,
        );
        let mut conf = format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nfull_page_writes = off\n\
             max_connections = 40\nshared_buffers = 16MB\n\
             wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n",
            cluster.port,
            cluster.dir.path().display()
        );
        if let Some(cert) = tls {
            let crt = cluster.dir.path().join("server.crt");
            let key = cluster.dir.path().join("server.key");
            cluster.write_private(&crt, &cert.cert_pem);
            cluster.write_private(&key, &cert.key_pem);
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                crt.display(),
                key.display()
            ));
        } else {
            conf.push_str("ssl = off\n");
        }
        for (name, value) in settings {
            conf.push_str(&format!("{name} = '{value}'\n"));
        }
        append(&data.join("postgresql.conf"), &conf);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.0/8 trust\n",
        )
        .expect("write pg_hba.conf");
        cluster.start_again();
        cluster
    }

    /// Start the server on the existing data (after [`kill`](Self::kill)), waiting until it
    /// accepts connections; crash recovery runs first. A commit that returned survives a kill:
    /// `synchronous_commit` stays on (the cluster turns off only `fsync`, which matters for a
    /// machine that loses power, not a process that dies).
    pub fn start_again(&self) {
        let data = self.data_dir();
        let log = self.dir.path().join("server.log");
        check(
            "pg_ctl start",
            self.command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "start"])
                .output(),
            Some(&log),
        );
    }

    /// The postmaster's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .expect("postmaster.pid: the server is running");
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid in postmaster.pid")
    }

    /// SIGKILL the postmaster and every backend, as a crash would, and wait until they are
    /// gone.
    pub fn kill(&self) {
        let pid = self.pid();
        let mut pids = vec![pid];
        pids.extend(children_of(pid));
        for p in &pids {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while pids
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists())
        {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL processes survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut c = match &self.user {
            Some(u) => u.command(&path),
            None => Command::new(path),
        };
        c.current_dir(self.dir.path());
        c
    }

    /// Write a file only the server's user may read (a key must not be group- or
    /// world-readable for PostgreSQL to load it).
    fn write_private(&self, path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).expect("write a server file");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
        if let Some(u) = &self.user {
            u.own(path);
        }
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A directory of this cluster's for the test's own files (CA certificates), removed
    /// with it.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A URL for database `db` on this server, as user `postgres`.
    #[must_use]
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A pool of up to `max` connections to database `postgres` that waits at most
    /// `acquire_timeout` for a connection: short, so that work on it fails fast while the
    /// cluster is down.
    #[cfg(feature = "postgres")]
    pub async fn pool(&self, max: u32, acquire_timeout: Duration) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(acquire_timeout)
            .connect(&self.url("postgres"))
            .await
            .expect("connect to the cluster")
    }

    /// A URL to database `postgres` as user `postgres` on `host` (`127.0.0.1` or `localhost`)
    /// with `query` appended (`""` or `"?sslmode=…"`).
    #[must_use]
    pub fn url_on(&self, host: &str, query: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres{query}", self.port)
    }
}

/// Process ids whose parent is `pid` (from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(text.as_bytes())
        .expect("append to the configuration");
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if !self.data_dir().join("postmaster.pid").exists() {
            return;
        }
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .output();
        if let Ok(o) = &out
            && !o.status.success()
        {
            eprintln!(
                "stopping the test cluster on port {}: {}",
                self.port,
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
