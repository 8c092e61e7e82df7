//! [`debug_showing!`](crate::debug_showing): a `Debug` that names a type's identifying fields
//! and only those, for types holding a client, a connection, a lock or an address with a
//! password: the rest says nothing useful in a log, or must never be printed.

/// Implement `Debug` for a struct showing only the fields named, then `..` for the rest
/// (`finish_non_exhaustive`). A field is named as in a struct literal: `queue` shows
/// `self.queue`; `group: ctx.names.group` shows `self.ctx.names.group` under `group`.
///
/// ```
/// struct Names { group: String }
/// struct Subscriber { queue: String, names: Names, secret: String }
/// postroom_core::debug_showing!(Subscriber { queue, group: names.group });
///
/// let s = Subscriber { queue: "q".into(), names: Names { group: "g".into() }, secret: "pw".into() };
/// assert_eq!(format!("{s:?}"), r#"Subscriber { queue: "q", group: "g", .. }"#);
/// ```
#[macro_export]
macro_rules! debug_showing {
    ($type:ident { $($label:ident $(: $first:ident $(. $rest:ident)*)?),* $(,)? }) => {
        impl ::core::fmt::Debug for $type {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!($type))
                    $(.field(
                        ::core::stringify!($label),
                        &$crate::debug_showing!(@field self $label $(: $first $(. $rest)*)?),
                    ))*
                    .finish_non_exhaustive()
            }
        }
    };
    (@field $s:ident $label:ident) => { $s.$label };
    (@field $s:ident $label:ident : $first:ident $(. $rest:ident)*) => { $s.$first $(. $rest)* };
}
