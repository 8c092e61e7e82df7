//! [`setters!`](macro@crate::setters): the builder setters of a settings type, each taking a value
//! and returning the settings with that one field replaced.

/// Write builder setters: for each entry `name: Type`, a `pub fn name(mut self, value: Type)
/// -> Self` that stores `value` in the field `name` and returns `self`. An entry
/// `name => path.to.field: Type` stores it in that field instead. An entry's doc comment (and
/// any other attribute) goes on its setter; every setter is `#[must_use]`.
///
/// ```
/// #[derive(Default)]
/// struct Limits { max: u32 }
/// #[derive(Default)]
/// struct Settings { name: String, limits: Limits }
/// postroom_core::setters!(Settings {
///     /// Set the name.
///     name: String,
///     /// Set the largest value.
///     max => limits.max: u32,
/// });
///
/// let s = Settings::default().name("a".into()).max(3);
/// assert_eq!((s.name.as_str(), s.limits.max), ("a", 3));
/// ```
#[macro_export]
macro_rules! setters {
    ($type:ty { $($(#[$attr:meta])* $name:ident $(=> $($field:ident).+)? : $value:ty),* $(,)? }) => {
        impl $type {
            $(
                $(#[$attr])*
                #[must_use]
                #[allow(clippy::double_must_use)]
                pub fn $name(mut self, value: $value) -> Self {
                    $crate::setters!(@field self $name $(=> $($field).+)?) = value;
                    self
                }
            )*
        }
    };
    (@field $s:ident $name:ident) => { $s.$name };
    (@field $s:ident $name:ident => $($field:ident).+) => { $s.$($field).+ };
}
