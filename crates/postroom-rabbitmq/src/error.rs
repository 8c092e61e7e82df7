//! AMQP errors mapped into postroom's portable [`ErrorKind`]s, so that callers decide retry or
//! park from the class alone.

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use postroom_core::{Error, ErrorKind};

/// The portable kind of an AMQP error.
#[must_use]
pub fn kind_of(e: &lapin::Error) -> ErrorKind {
    match e {
        lapin::Error::IOError(_)
        | lapin::Error::InvalidConnectionState(_)
        | lapin::Error::MissingHeartbeatError => ErrorKind::Connection,
        lapin::Error::InvalidChannel(_) | lapin::Error::InvalidChannelState(_) => ErrorKind::Closed,
        lapin::Error::ChannelsLimitReached
        | lapin::Error::InvalidProtocolVersion(_)
        | lapin::Error::ParsingError(_)
        | lapin::Error::SerialisationError(_) => ErrorKind::Io,
        lapin::Error::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(soft) => match soft {
                AMQPSoftError::NOTFOUND => ErrorKind::NotFound,
                AMQPSoftError::ACCESSREFUSED | AMQPSoftError::PRECONDITIONFAILED => {
                    ErrorKind::Config
                }
                AMQPSoftError::RESOURCELOCKED => ErrorKind::Busy,
                AMQPSoftError::NOROUTE | AMQPSoftError::NOCONSUMERS => ErrorKind::Unroutable,
                AMQPSoftError::CONTENTTOOLARGE => ErrorKind::InvalidData,
            },
            AMQPErrorKind::Hard(hard) => match hard {
                AMQPHardError::CONNECTIONFORCED
                | AMQPHardError::RESOURCEERROR
                | AMQPHardError::INTERNALERROR => ErrorKind::Connection,
                AMQPHardError::NOTALLOWED | AMQPHardError::INVALIDPATH => ErrorKind::Config,
                AMQPHardError::FRAMEERROR
                | AMQPHardError::SYNTAXERROR
                | AMQPHardError::COMMANDINVALID
                | AMQPHardError::CHANNELERROR
                | AMQPHardError::UNEXPECTEDFRAME
                | AMQPHardError::NOTIMPLEMENTED => ErrorKind::Closed,
            },
        },
        // lapin's error enum is #[non_exhaustive]: a variant added upstream is treated as an
        // I/O failure (transient) until it is mapped here.
        _ => ErrorKind::Io,
    }
}

/// A postroom error for an AMQP failure while doing `what`.
#[must_use]
pub fn amqp(what: impl Into<String>, e: lapin::Error) -> Error {
    Error::new(kind_of(&e), what).with_source(e)
}

/// Whether the channel (or connection) the error came from must be rebuilt.
#[must_use]
pub fn breaks_channel(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Connection
            | ErrorKind::Closed
            | ErrorKind::NotFound
            | ErrorKind::Config
            | ErrorKind::Io
    )
}
