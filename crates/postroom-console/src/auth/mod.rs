//! Authentication and authorisation: users and their roles, sessions in HttpOnly
//! SameSite=Strict cookies (stored only once a login succeeded; visitors before it carry a
//! signed cookie), a CSRF token checked on every state-changing request, and failed logins
//! and wrong API tokens throttled per client and per user.
//!
//! Auth may be off only when the console listens on loopback; then every visitor is the
//! admin `local`, and CSRF protection still applies (a page on another site can post to
//! loopback as well).

pub mod csrf;
pub mod session;
pub mod throttle;
pub mod tokens;
pub mod users;
pub mod visitor;

pub use session::{Session, Sessions};
pub use throttle::{Limit, LoginLimits, Logins, Throttle};
pub use users::{USERS_ENV, USERS_FILE_ENV, User, Users, hash_password};

use serde::Serialize;

/// What a user may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the parking lot (without payloads), the pipeline and the audit.
    Viewer,
    /// A viewer who also sees payloads, redrives and archives.
    Operator,
    /// An operator who also edits payloads before a redrive and purges archived messages.
    Admin,
}

/// One permission, granted by roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// See the parking lot, the pipeline and the audit.
    Read,
    /// See message bodies.
    ViewPayload,
    /// Redrive, pause, resume and cancel runs.
    Redrive,
    /// Archive messages.
    Archive,
    /// Purge archived messages whose retention ended.
    Purge,
    /// Fix a payload before redriving it.
    EditRedrive,
}

postroom_core::stable_names!(Role, "role" {
    Viewer => "viewer",
    Operator => "operator",
    Admin => "admin",
});

impl Role {
    /// Whether this role grants `p`.
    #[must_use]
    pub fn allows(&self, p: Permission) -> bool {
        match p {
            Permission::Read => true,
            Permission::ViewPayload | Permission::Redrive | Permission::Archive => {
                matches!(self, Role::Operator | Role::Admin)
            }
            Permission::Purge | Permission::EditRedrive => matches!(self, Role::Admin),
        }
    }
}

/// How the console authenticates.
#[derive(Clone, Debug)]
pub enum Auth {
    /// Nobody logs in; everyone is the admin `local`. Accepted on loopback only.
    Disabled,
    /// These users log in with their passwords.
    Users(Users),
}

impl Auth {
    /// Who a visitor without a session is: the admin `local` with auth off, else nobody.
    #[must_use]
    pub fn visitor_user(&self) -> Option<(String, Role)> {
        match self {
            Auth::Disabled => Some(("local".to_string(), Role::Admin)),
            Auth::Users(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_grant_in_order() {
        assert!(Role::Viewer.allows(Permission::Read));
        assert!(!Role::Viewer.allows(Permission::ViewPayload));
        assert!(!Role::Viewer.allows(Permission::Redrive));
        assert!(Role::Operator.allows(Permission::Redrive));
        assert!(Role::Operator.allows(Permission::ViewPayload));
        assert!(!Role::Operator.allows(Permission::EditRedrive));
        assert!(!Role::Operator.allows(Permission::Purge));
        assert!(Role::Admin.allows(Permission::EditRedrive));
        assert!(Role::Admin.allows(Permission::Purge));
    }
}
