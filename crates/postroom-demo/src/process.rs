//! Child processes of `demo` and `soak`: this same binary started again with a hidden
//! subcommand, stopped gracefully by closing its standard input, or killed with SIGKILL.
//! Database and broker URLs (which may hold passwords) reach a child only through its
//! environment — never its argv, which every user of the machine can read.

use postroom_ops::Endpoint;
use postroom_ops::credentials::{
    BROKER_ENV, BROKER_PASSWORD_ENV, DATABASE_ENV, DATABASE_PASSWORD_ENV,
};
use std::ffi::OsString;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Variables a child must not inherit: its URLs come whole from the parent.
const NOT_INHERITED: [&str; 4] = [
    DATABASE_PASSWORD_ENV,
    BROKER_PASSWORD_ENV,
    "POSTROOM_DATABASE_PASSWORD_FILE",
    "POSTROOM_BROKER_PASSWORD_FILE",
];

/// Where a child connects to.
#[derive(Clone, Debug)]
pub struct ChildEnv {
    /// The database.
    pub database: Endpoint,
    /// The broker, if any.
    pub broker: Option<Endpoint>,
}

/// A running child.
pub struct Worker {
    child: Child,
    /// Its standard output, line by line.
    pub lines: Option<Lines<BufReader<ChildStdout>>>,
    args: Vec<OsString>,
    env: ChildEnv,
}

impl Worker {
    /// Start `<this binary> <args>` with `env`'s URLs in its environment.
    pub fn spawn(args: Vec<OsString>, env: &ChildEnv) -> std::io::Result<Self> {
        let mut cmd = Command::new(this_binary()?);
        cmd.args(&args)
            .env(DATABASE_ENV, env.database.expose())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match &env.broker {
            Some(b) => cmd.env(BROKER_ENV, b.expose()),
            None => cmd.env_remove(BROKER_ENV),
        };
        for var in NOT_INHERITED {
            cmd.env_remove(var);
        }
        let mut child = cmd.spawn()?;
        let lines = child.stdout.take().map(|o| BufReader::new(o).lines());
        Ok(Self {
            child,
            lines,
            args,
            env: env.clone(),
        })
    }

    /// The same command again (after a kill).
    pub fn respawn(&self) -> std::io::Result<Self> {
        Self::spawn(self.args.clone(), &self.env)
    }

    /// Process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// SIGKILL, and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Whether it has exited (without waiting).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Close stdin (the graceful stop signal) and wait up to `grace`, then SIGKILL.
    pub async fn stop(mut self, grace: std::time::Duration) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The running binary. On Linux `/proc/self/exe`, which still runs this very binary when
/// its file was replaced meanwhile (an upgrade, a rebuild during a long soak); elsewhere the
/// path it was started from.
fn this_binary() -> std::io::Result<std::path::PathBuf> {
    let proc_self = std::path::Path::new("/proc/self/exe");
    if proc_self.exists() {
        Ok(proc_self.to_path_buf())
    } else {
        std::env::current_exe()
    }
}

/// A watch that turns true when this process's standard input closes: how a child learns
/// that its parent wants it to stop.
#[must_use]
pub fn stop_on_stdin_eof() -> tokio::sync::watch::Receiver<bool> {
    use tokio::io::AsyncReadExt;
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        let _ = stop.send(true);
    });
    rx
}
