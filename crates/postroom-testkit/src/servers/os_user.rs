//! Running a server's programs as the right operating-system user: PostgreSQL refuses to run
//! as root, so a test running as root starts it as the `postgres` user and hands it the files.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Whether this process runs as root.
#[must_use]
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A system user (from `/etc/passwd`): its name, uid and gid.
#[derive(Clone, Debug)]
pub struct OsUser {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl OsUser {
    /// Look `name` up in `/etc/passwd`.
    #[must_use]
    pub fn find(name: &str) -> Option<Self> {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() > 3 && f[0] == name {
                Some(Self {
                    name: name.to_string(),
                    uid: f[2].parse().ok()?,
                    gid: f[3].parse().ok()?,
                })
            } else {
                None
            }
        })
    }

    /// Give `path` to this user.
    pub fn own(&self, path: &Path) {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .unwrap_or_else(|e| panic!("chown {} to {}: {e}", path.display(), self.name));
    }

    /// `program` run as this user (through `runuser`).
    #[must_use]
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("runuser");
        c.arg("-u").arg(&self.name).arg("--").arg(program);
        c
    }
}
