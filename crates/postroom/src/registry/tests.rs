use super::*;

#[test]
fn an_unknown_or_missing_scheme_is_a_clear_error() {
    let r = Registry::empty();
    let e = r
        .transport_driver(&Endpoint::broker("kafka://u:pw1234@k:9092").unwrap())
        .err()
        .unwrap();
    assert!(e.message().contains("--features kafka"), "{e}");
    assert!(!e.to_string().contains("pw1234"), "{e}");
    let e = r
        .store_driver(&Endpoint::database("mysql://x").unwrap())
        .err()
        .unwrap();
    assert!(e.message().contains("unsupported database"), "{e}");
    assert_eq!(e.kind(), postroom_core::ErrorKind::Config);
}

#[test]
fn a_brokers_address_given_as_the_database_says_so_instead_of_asking_for_a_feature() {
    // In a build with every driver, `--database kafka://…` was answered with "needs the
    // `kafka` driver, which this build does not have": the build has it, as a broker.
    for (url, broker) in [
        ("kafka://u:pw1234@k:9092", "Kafka"),
        ("amqp://u:pw1234@r/%2f", "RabbitMQ"),
        ("nats://u:pw1234@n:4222", "NATS"),
        ("sqs://u:pw1234@s:5000", "SQS"),
    ] {
        for r in [Registry::empty(), Registry::builtin()] {
            let e = r
                .store_driver(&Endpoint::database(url).unwrap())
                .err()
                .unwrap();
            assert_eq!(e.kind(), postroom_core::ErrorKind::Config, "{e}");
            assert!(
                e.message()
                    .contains(&format!("is a {broker} broker, not a database")),
                "{e}"
            );
            assert!(e.message().contains("--broker"), "{e}");
            assert!(!e.message().contains("rebuild"), "{e}");
            assert!(!e.message().contains("pw1234"), "{e}");
        }
    }
}

#[test]
fn each_built_driver_is_its_line_of_the_list_and_each_scheme_has_one_driver() {
    let r = Registry::builtin();
    let built: Vec<&KnownDriver> = KNOWN.iter().filter(|d| d.built).collect();
    let mut stores = Vec::new();
    let mut transports = Vec::new();
    for d in &built {
        match d.kind {
            DriverKind::Store => stores.extend_from_slice(d.schemes),
            DriverKind::Transport => transports.extend_from_slice(d.schemes),
        }
    }
    assert_eq!(
        r.store_schemes(),
        stores,
        "the list's store schemes are the drivers' own"
    );
    assert_eq!(
        r.transport_schemes(),
        transports,
        "the list's broker schemes are the drivers' own"
    );
    let mut all: Vec<&str> = KNOWN
        .iter()
        .flat_map(|d| d.schemes.iter().copied())
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a scheme is in two lines of the list");
    assert_eq!(r.store_help().len() + r.transport_help().len(), built.len());
}

#[cfg(feature = "nats")]
#[test]
fn a_tls_url_is_a_nats_broker() {
    let r = Registry::builtin();
    let d = r
        .transport_driver(&Endpoint::broker("tls://n.internal:4222?cacertfile=/ca.pem").unwrap())
        .unwrap();
    assert_eq!(d.name(), "nats");
}
