//! API tokens already checked: each token (kept only as its BLAKE2b digest) costs its argon2
//! checks once, whether it was right or wrong, so repeating a wrong token costs the console
//! nothing but a lookup.

use super::Role;
use blake2::{Blake2b, Digest, digest::consts::U32};
use std::collections::HashMap;
use std::sync::Mutex;

/// Most tokens remembered, right and wrong apart; past it the remembered ones are forgotten.
const MAX_TOKENS: usize = 10_000;

type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Blake2b::<U32>::digest(token.as_bytes()).into()
}

/// What is known of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// It belongs to this user, with this role.
    Belongs(String, Role),
    /// It was checked and belongs to nobody.
    Wrong,
}

/// Tokens already checked.
#[derive(Debug, Default)]
pub struct TokenCache {
    right: Mutex<HashMap<TokenDigest, (String, Role)>>,
    wrong: Mutex<HashMap<TokenDigest, ()>>,
}

impl TokenCache {
    /// What a check of `token` found, if it was checked.
    pub fn get(&self, token: &str) -> Option<Checked> {
        let d = digest(token);
        if let Some((name, role)) = self.right.lock().expect("token cache lock").get(&d) {
            return Some(Checked::Belongs(name.clone(), *role));
        }
        self.wrong
            .lock()
            .expect("token cache lock")
            .contains_key(&d)
            .then_some(Checked::Wrong)
    }

    /// Remember what the check of `token` found.
    pub fn put(&self, token: &str, found: &Checked) {
        let d = digest(token);
        match found {
            Checked::Belongs(name, role) => {
                let mut right = self.right.lock().expect("token cache lock");
                if right.len() >= MAX_TOKENS {
                    right.clear();
                }
                right.insert(d, (name.clone(), *role));
            }
            Checked::Wrong => {
                let mut wrong = self.wrong.lock().expect("token cache lock");
                if wrong.len() >= MAX_TOKENS {
                    wrong.clear();
                }
                wrong.insert(d, ());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_right_and_wrong_tokens_apart() {
        let c = TokenCache::default();
        assert_eq!(c.get("a"), None);
        c.put("a", &Checked::Wrong);
        c.put("b", &Checked::Belongs("bot".into(), Role::Viewer));
        assert_eq!(c.get("a"), Some(Checked::Wrong));
        assert_eq!(
            c.get("b"),
            Some(Checked::Belongs("bot".into(), Role::Viewer))
        );
        assert_eq!(c.get("c"), None);
    }
}
