//! Visitors without a session (nobody logged in yet, or everyone with auth off) hold no state
//! on the server: their cookie carries a random nonce, and their CSRF token is a keyed
//! BLAKE2b MAC of it under a key this console drew at start. A form's token is therefore good
//! only with the cookie it came with, and a flood of cookie-less requests stores nothing.

use super::session::random_token;
use blake2::Blake2bMac;
use blake2::digest::Mac;
use blake2::digest::consts::U32;

/// Name of the cookie that carries a visitor's nonce.
pub const COOKIE: &str = "postroom_visitor";

/// The key that signs visitors' nonces.
pub struct VisitorKey {
    key: [u8; 32],
}

impl std::fmt::Debug for VisitorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VisitorKey(…)")
    }
}

impl Default for VisitorKey {
    fn default() -> Self {
        Self::random()
    }
}

impl VisitorKey {
    /// A fresh random key (visitors' forms from before a restart are refused after it).
    #[must_use]
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
    }

    /// A new nonce for a visitor's cookie.
    #[must_use]
    pub fn nonce() -> String {
        random_token()
    }

    /// The CSRF token that goes with `nonce`.
    #[must_use]
    pub fn token(&self, nonce: &str) -> String {
        let mut mac = <Blake2bMac<U32> as Mac>::new_from_slice(&self.key)
            .expect("BLAKE2b takes a 32-byte key");
        mac.update(nonce.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Whether `value` has the shape of a nonce this console gives out (64 hex digits).
#[must_use]
pub fn is_nonce(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_belongs_to_its_nonce_and_its_key() {
        let key = VisitorKey::random();
        let (a, b) = (VisitorKey::nonce(), VisitorKey::nonce());
        assert!(is_nonce(&a) && !is_nonce("x") && !is_nonce(&format!("{}g", &a[1..])));
        assert_eq!(key.token(&a), key.token(&a));
        assert_ne!(key.token(&a), key.token(&b));
        assert_ne!(key.token(&a), VisitorKey::random().token(&a));
    }
}
