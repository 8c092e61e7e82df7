//! [`stable_names!`](crate::stable_names): the stable names of an enum's variants, written
//! once, for the three ways they are used: `as_str` to store or print one, `Display`, and
//! `FromStr` to read one back.

/// Give an enum of unit variants stable names, each written once: `as_str` (the variant's
/// name), `Display` (the same) and `FromStr` (a name back to its variant; anything else is an
/// error that says what was expected, naming the thing as `what`).
///
/// ```
/// #[derive(Debug, PartialEq)]
/// enum Colour { Red, Green }
/// postroom_core::stable_names!(Colour, "colour" { Red => "red", Green => "green" });
///
/// assert_eq!(Colour::Green.as_str(), "green");
/// assert_eq!("red".parse::<Colour>(), Ok(Colour::Red));
/// assert_eq!(
///     "blue".parse::<Colour>().unwrap_err(),
///     r#"unknown colour "blue" (expected red or green)"#
/// );
/// ```
#[macro_export]
macro_rules! stable_names {
    ($type:ident, $what:literal { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $type {
            /// Stable name.
            #[must_use]
            pub fn as_str(&self) -> &'static str {
                match self {
                    $($type::$variant => $name,)+
                }
            }
        }

        impl ::core::fmt::Display for $type {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::core::str::FromStr for $type {
            type Err = ::std::string::String;
            fn from_str(s: &str) -> ::core::result::Result<Self, Self::Err> {
                match s {
                    $($name => Ok($type::$variant),)+
                    other => Err(::std::format!(
                        "unknown {} {other:?} (expected {})",
                        $what,
                        $crate::names::one_of(&[$($name),+])
                    )),
                }
            }
        }
    };
}

/// `names` in words: `a`, `a or b`, `a, b or c`.
#[doc(hidden)]
#[must_use]
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => (*only).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}
