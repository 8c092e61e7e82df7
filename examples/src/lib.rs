//! What the runnable examples in `src/bin` share: the [`shop`] each of them runs (the
//! message, the inventory consumer's handler, the producer, the faults injected and the check
//! that every order was applied exactly once). Each example keeps what is specific to its
//! stack: opening the store and the transport and wiring the `Service`.

pub mod shop;
