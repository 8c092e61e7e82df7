//! A position in the write-ahead log (`pg_lsn`): 64 bits, written `X/Y` in hexadecimal.

use postroom_core::{Error, ErrorKind, Result};
use std::fmt;

/// A write-ahead log position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The start of the log (`0/0`): "from wherever the slot is" in `START_REPLICATION`.
    pub const ZERO: Lsn = Lsn(0);

    /// Bytes from `earlier` to `self` (0 when `earlier` is not earlier).
    #[must_use]
    pub fn bytes_after(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl std::str::FromStr for Lsn {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::new(ErrorKind::InvalidData, format!("not a WAL position: {s:?}"));
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_read_as_postgres_does() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l.0, 0x16_B374_D848);
        assert_eq!(l.to_string(), "16/B374D848");
        assert_eq!(Lsn::ZERO.to_string(), "0/0");
        assert!("16".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
        assert!("1/100000000".parse::<Lsn>().is_err());
        assert_eq!(l.bytes_after(Lsn(l.0 - 8)), 8);
        assert_eq!(Lsn(1).bytes_after(l), 0);
    }
}
