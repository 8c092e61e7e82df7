//! librdkafka errors mapped into postroom's portable kinds (transient or permanent).

use postroom_core::{Error, ErrorKind};
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};

/// The portable kind of a librdkafka error code. Every code that postroom meets is placed;
/// the rest are connection-like (transient), which is the safe default for a broker error:
/// the message stays where it is and is tried again.
#[must_use]
pub fn kind_of_code(code: C) -> ErrorKind {
    match code {
        C::MessageTimedOut | C::RequestTimedOut | C::OperationTimedOut => ErrorKind::Timeout,
        C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::Resolve
        | C::NetworkException
        | C::BrokerNotAvailable
        | C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::NotCoordinator
        | C::CoordinatorNotAvailable
        | C::CoordinatorLoadInProgress => ErrorKind::Connection,
        C::QueueFull => ErrorKind::Busy,
        C::MessageSizeTooLarge | C::InvalidMessageSize | C::InvalidMessage => {
            ErrorKind::InvalidData
        }
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition => ErrorKind::NotFound,
        C::TopicAlreadyExists => ErrorKind::ConstraintViolation,
        C::InvalidTopic
        | C::InvalidArgument
        | C::InvalidConfig
        | C::InvalidReplicationFactor
        | C::InvalidPartitions
        | C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication => ErrorKind::Config,
        C::State | C::Fatal | C::PreviousInProgress => ErrorKind::Closed,
        C::UnsupportedVersion | C::UnsupportedFeature | C::NotImplemented => ErrorKind::Unsupported,
        _ => ErrorKind::Connection,
    }
}

/// A postroom error for a librdkafka error met while `doing` something.
#[must_use]
pub fn kafka(doing: impl std::fmt::Display, e: KafkaError) -> Error {
    let kind = match &e {
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) => ErrorKind::Config,
        KafkaError::Subscription(_) => ErrorKind::Config,
        KafkaError::Canceled => ErrorKind::Closed,
        _ => e
            .rdkafka_error_code()
            .map_or(ErrorKind::Connection, kind_of_code),
    };
    Error::new(kind, format!("{doing}")).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::ErrorClass;

    #[test]
    fn broker_codes_map_to_classes() {
        assert_eq!(
            kind_of_code(C::AllBrokersDown).class(),
            ErrorClass::Transient
        );
        assert_eq!(kind_of_code(C::MessageTimedOut), ErrorKind::Timeout);
        assert_eq!(
            kind_of_code(C::MessageSizeTooLarge).class(),
            ErrorClass::Permanent
        );
        assert_eq!(kind_of_code(C::InvalidTopic), ErrorKind::Config);
        let e = kafka(
            "producing",
            KafkaError::MessageProduction(C::MessageTimedOut),
        );
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().starts_with("timeout: producing"), "{e}");
    }
}
