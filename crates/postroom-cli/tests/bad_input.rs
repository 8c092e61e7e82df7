//! Bad input gets a clear error and a trustworthy exit code — never a panic, never a
//! password echoed back.

mod common;

/// Run `postroom` with `args` in `dir`: its exit code and its stderr.
fn run(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    code_and_stderr(&mut common::postroom_cmd(dir, args))
}

/// Run `cmd` to its end: its exit code and its stderr.
fn code_and_stderr(cmd: &mut std::process::Command) -> (Option<i32>, String) {
    let out = cmd.output().expect("run postroom");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 2 with `needle` in the message (and no panic).
fn refused(dir: &std::path::Path, args: &[&str], needle: &str) {
    let (code, err) = run(dir, args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// With `config` as the `postroom.toml` of `dir`: exit 2 with `needle` in the message (and no
/// panic).
fn refused_by_config(dir: &std::path::Path, config: &str, args: &[&str], needle: &str) {
    std::fs::write(dir.join("postroom.toml"), config).unwrap();
    refused(dir, args, needle);
}

#[test]
fn bad_config_file() {
    let dir = tempfile::tempdir().unwrap();
    refused_by_config(
        dir.path(),
        "database = [1, 2\n",
        &["parking", "list"],
        "bad config file postroom.toml",
    );
}

#[test]
fn unwritable_database_path() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run(
        dir.path(),
        &["demo", "--database", "/nonexistent-dir/x/demo.db"],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/nonexistent-dir/x") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn demo_refuses_to_overwrite_a_foreign_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.db"), b"not a database of ours").unwrap();
    refused(
        dir.path(),
        &["demo", "--database", "precious.db"],
        "not a postroom demo database",
    );
    assert_eq!(
        std::fs::read(dir.path().join("precious.db")).unwrap(),
        b"not a database of ours"
    );
}

/// A demo that stops on a bad broker URL or a broker nobody answers leaves its database file
/// as a demo file: the next demo on that path starts over instead of refusing the file as
/// someone else's.
#[test]
fn a_demo_that_failed_on_its_broker_leaves_no_file_the_next_demo_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for broker in ["kafka://127.0.0.1:9092?partitions=0", "nats://127.0.0.1:1"] {
        let (code, err) = run(d, &["demo", "--database", "shop.db", "--broker", broker]);
        assert!(matches!(code, Some(2 | 3)), "{broker}: {code:?} {err}");
        let (code, err) = run(
            d,
            &["demo", "--database", "shop.db", "--timeout-secs", "120"],
        );
        assert_eq!(code, Some(0), "after {broker}: {err}");
    }
}

#[test]
fn bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(d, &["demo", "--ladder", "5x"], "bad duration");
    refused(
        d,
        &["parking", "list", "--database", "missing.db"],
        "does not exist",
    );
    refused(
        d,
        &[
            "parking",
            "list",
            "--database",
            "x.db",
            "--error-class",
            "fatal",
        ],
        "unknown error class",
    );
    refused(
        d,
        &["parking", "list", "--database", "mysql://h/db"],
        "unsupported database",
    );
    // A broker's address where the database goes: said as such, not as a missing feature of
    // a build that has the broker.
    for (url, broker) in [
        ("kafka://127.0.0.1:9092", "Kafka"),
        ("amqp://guest:guest@127.0.0.1:5672/%2f", "RabbitMQ"),
    ] {
        refused(
            d,
            &["parking", "list", "--database", url],
            &format!("is a {broker} broker, not a database: pass it as --broker"),
        );
    }
}

#[test]
fn absurd_values_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A real (empty) parking store, so that every refusal below is about the value.
    common::ok(&common::postroom(d, &["parking", "ingest", "--help"]));
    for (args, needle) in [
        (
            vec!["parking", "redrive", "--rate", "1e-30"],
            "between 0.001 and 100000",
        ),
        (vec!["parking", "redrive", "--rate", "NaN"], "between"),
        (vec!["parking", "redrive", "--rate", "1e300"], "between"),
        (
            vec!["parking", "list", "--since", "9000000000000s"],
            "earliest time",
        ),
        (
            vec!["parking", "list", "--until", "99999999999999999999999d"],
            "too large",
        ),
        (vec!["parking", "list", "--limit", "0"], "between 1 and"),
        (
            vec!["parking", "list", "--show-payload", "--payload-limit", "0"],
            "between 1 and",
        ),
        (
            vec!["parking", "ingest", "--idle", "9000000000000h"],
            "too large",
        ),
        (vec!["soak", "--kill-every", "1e300"], "between 0 and"),
        (vec!["soak", "--transient-share", "1.5"], "between 0 and 1"),
        (vec!["soak", "--batch-size", "100000"], "0..=10000"),
        (vec!["demo", "--ladder", "9000000000000h"], "too large"),
        (vec!["demo", "--workload", ""], "must not be empty"),
        (vec!["soak", "--workload", " "], "must not be empty"),
        (vec!["demo", "--ladder", "48h"], "at most 24h"),
        (vec!["demo", "--timeout-secs", "0"], "timeout-secs"),
        (vec!["relay", "--lanes", "0"], "from 1 to 64"),
        (vec!["relay", "--lanes", "100000"], "from 1 to 64"),
        (
            vec!["relay", "--lease", "1ms"],
            "--lease must be between 1s and 24h, not 1ms",
        ),
        (vec!["relay", "--lease", "90d"], "--lease must be between"),
        (
            vec!["serve", "--sample-every", "1ms"],
            "--sample-every must be between 1s and 1h, not 1ms",
        ),
        (
            vec!["serve", "--sample-every", "2h"],
            "--sample-every must be between",
        ),
        (
            vec!["serve", "--allowed-host", "https://console.example"],
            "not a host name",
        ),
        (
            vec!["serve", "--client-address-header", "x forwarded"],
            "not a header name",
        ),
    ] {
        refused(d, &args, needle);
    }
    // The config file's rate is checked the same way.
    refused_by_config(
        d,
        "[parking]\nredrive_rate = 1e-30\n",
        &["parking", "redrive", "--database", "x.db"],
        "between 0.001",
    );
}

#[test]
fn urls_with_passwords_are_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [
        vec![
            "parking",
            "list",
            "--database",
            "postgres://app:hunter2secret@db:99999999/x",
        ],
        vec![
            "parking",
            "list",
            "--database",
            "postgres://app:hunter2secret@[::1/x",
        ],
        vec![
            "topology",
            "plan",
            "--broker",
            "amqp://u:hunter2secret@[bad/%2f",
        ],
        vec!["demo", "--broker", "localhost-hunter2secret"],
    ] {
        let (code, err) = run(d, &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            !err.contains("hunter2secret"),
            "{args:?} echoed its password: {err}"
        );
    }
    // Nor does --help show what the environment holds.
    let out = common::postroom_cmd(d, &["parking", "list", "--help"])
        .env("POSTROOM_DATABASE", "postgres://app:hunter2secret@db/x")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2secret"));
}

/// A password holding a URL-reserved character that was not percent-encoded makes the URL
/// unparseable; the error that says so still masks it, whether the URL came from a flag, the
/// environment or the config file, for a database or a broker.
#[test]
fn a_password_with_a_raw_reserved_character_is_masked_in_the_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for c in ['#', '?', '/', '@', ':', '[', ']', '%', ' ', '&', '='] {
        let password = format!("SE{c}CRETPW");
        let urls = [
            (
                "database",
                format!("postgres://postgres:{password}@127.0.0.1:5432/x"),
            ),
            (
                "broker",
                format!("amqp://guest:{password}@127.0.0.1:5672/%2f"),
            ),
            ("broker", format!("nats://user:{password}@127.0.0.1:4222")),
        ];
        for (what, url) in &urls {
            let by_flag: Vec<&str> = if *what == "database" {
                vec!["parking", "list", "--database", url]
            } else {
                vec!["topology", "plan", "--broker", url]
            };
            let (_, err) = run(d, &by_flag);
            assert!(
                !err.contains("CRETPW"),
                "{by_flag:?} echoed its password: {err}"
            );
            if matches!(c, '#' | '?') {
                // These make the URL unparseable: the parse error is what is printed.
                assert!(
                    err.contains(&format!("bad {what} URL")),
                    "{by_flag:?}: {err}"
                );
            }
            let env = if *what == "database" {
                "POSTROOM_DATABASE"
            } else {
                "POSTROOM_BROKER"
            };
            let args: &[&str] = if *what == "database" {
                &["parking", "list"]
            } else {
                &["topology", "plan"]
            };
            let (_, err) = code_and_stderr(common::postroom_cmd(d, args).env(env, url));
            assert!(
                !err.contains("CRETPW"),
                "{env}={url:?} echoed its password: {err}"
            );
            let key = if *what == "database" {
                "database"
            } else {
                "broker"
            };
            let toml_url = url.replace('\\', "\\\\").replace('"', "\\\"");
            std::fs::write(d.join("postroom.toml"), format!("{key} = \"{toml_url}\"\n")).unwrap();
            let (_, err) = run(d, args);
            std::fs::remove_file(d.join("postroom.toml")).unwrap();
            assert!(
                !err.contains("CRETPW"),
                "{key} = {url:?} in postroom.toml echoed its password: {err}"
            );
        }
    }
}

#[test]
fn serve_refuses_bad_feeds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        d,
        &["serve", "--feed", "127.0.0.1:9466"],
        "expected NAME=HOST:PORT",
    );
    refused(
        d,
        &["serve", "--feed", "nats=127.0.0.1"],
        "the address has no port",
    );
    // A feed typed like a broker URL, with a user and password: refused, never shown.
    let (code, err) = run(
        d,
        &["serve", "--feed", "nats=app:hunter2secret@127.0.0.1:9466"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("takes no user or password"), "{err}");
    assert!(
        !err.contains("hunter2secret"),
        "the password was shown: {err}"
    );
    refused(
        d,
        &[
            "serve",
            "--feed",
            "a=127.0.0.1:9466",
            "--feed",
            "a=127.0.0.1:9467",
        ],
        "two feeds are named \"a\"",
    );
    // The environment's comma-separated list, checked the same way.
    let (code, err) = code_and_stderr(common::postroom_cmd(d, &["serve"]).env(
        "POSTROOM_CONSOLE_FEEDS",
        "a=127.0.0.1:9466,a=127.0.0.1:9467",
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("two feeds are named \"a\""), "{err}");
    let (code, err) = code_and_stderr(
        common::postroom_cmd(d, &["serve"])
            .env("POSTROOM_CONSOLE_FEEDS", "a=127.0.0.1:9466,b=nowhere"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("bad feed \"b=nowhere\""), "{err}");
    // And the config file's.
    refused_by_config(
        d,
        "[console]\nfeeds = [\"nats=127.0.0.1:9466\", \"kafka:9467\"]\n",
        &["serve"],
        "config file, [console] feeds: bad feed \"kafka:9467\"",
    );
}

#[test]
fn a_database_that_refuses_connections_is_named_as_refusing() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run(
        dir.path(),
        &[
            "parking",
            "list",
            "--database",
            "postgres://app:hunter2secret@127.0.0.1:1/x",
        ],
    );
    assert_eq!(code, Some(3), "a server that cannot be reached: {err}");
    assert!(err.contains("refused"), "the cause is named: {err}");
    assert!(!err.contains("hunter2secret"), "password echoed: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `topology plan --broker BROKER` in a directory of its own holding a one-consumer
/// `topology.toml`, its environment changed by `env` (given that directory): its exit code and
/// its stderr.
fn plan_alone(
    broker: &str,
    env: impl FnOnce(&mut std::process::Command, &std::path::Path),
) -> (Option<i32>, String) {
    let dir = one_consumer_topology("topology.toml", "p");
    let mut plan = common::postroom_cmd(dir.path(), &["topology", "plan", "--broker", broker]);
    env(&mut plan, dir.path());
    code_and_stderr(&mut plan)
}

/// Assert that a run (its exit code and stderr) exited with `code`, saying each of `says` and
/// none of `never`.
fn assert_exit(run: (Option<i32>, String), code: i32, says: &[&str], never: &[&str]) {
    let (got, err) = run;
    assert_eq!(got, Some(code), "{err}");
    for needle in says {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    for needle in never {
        assert!(!err.contains(needle), "{needle:?} in {err}");
    }
}

#[test]
fn sqs_without_a_region_says_so_without_the_cloud_metadata_noise() {
    let run = plan_alone("sqs://127.0.0.1:1", |plan, home| {
        plan.env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CONFIG_FILE")
            .env_remove("AWS_SHARED_CREDENTIALS_FILE")
            .env("HOME", home);
    });
    // Off a cloud host the instance-metadata lookup fails as expected: not worth a warning.
    assert_exit(run, 2, &["no AWS region configured"], &["IMDS"]);
}

/// SQS with no AWS credentials anywhere says so in one line (exit 2), not with the SDK's
/// debug dump of its provider chain, and without the chain's warnings.
#[test]
fn sqs_without_credentials_says_so_in_words() {
    let run = plan_alone(&common::sqs::url(), |plan, home| {
        plan.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CONFIG_FILE")
            .env_remove("AWS_SHARED_CREDENTIALS_FILE")
            .env("AWS_REGION", "us-east-1")
            .env("HOME", home);
    });
    assert_exit(
        run,
        2,
        &["no AWS credentials", "AWS_ACCESS_KEY_ID"],
        &["ProviderError(", "WARN"],
    );
}

/// An SQS endpoint nobody answers at is named as refusing, in words (exit 3).
#[test]
fn an_sqs_endpoint_nobody_answers_is_named_in_words() {
    let run = plan_alone("sqs://127.0.0.1:1?region=us-east-1", |plan, _| {
        plan.envs(common::sqs::aws_env());
    });
    assert_exit(run, 3, &["Connection refused"], &["ConnectorError {"]);
}

/// A relay on a Kafka broker nobody answers at names it at start-up (exit 3), within the
/// metadata wait, instead of waiting out the admin client's request timeout and saying only
/// "OperationTimedOut" about creating topics; and says it in postroom's own words only.
#[test]
fn a_kafka_broker_nobody_answers_is_named_at_start_up() {
    let dir = one_consumer_topology("t.toml", "gone");
    let d = dir.path();
    let started = std::time::Instant::now();
    let (code, err) = run(
        d,
        &[
            "relay",
            "--database",
            "app.db",
            "--broker",
            "kafka://127.0.0.1:1",
            "--topology",
            "t.toml",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("cannot use Kafka at kafka://127.0.0.1:1"),
        "{err}"
    );
    // librdkafka's own log lines (`%3|<time>|FAIL|…`) bypass postroom's log format and filter.
    assert!(
        !err.lines().any(|l| l.starts_with('%')),
        "a raw librdkafka line on stderr: {err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "took {:?}: {err}",
        started.elapsed()
    );
}

#[test]
fn a_database_that_does_not_exist_is_a_configuration_error() {
    use postroom_testkit::servers::postgres::{server_url, with_database};
    let dir = tempfile::tempdir().unwrap();
    let url = with_database(&server_url(), "postroom_no_such_database");
    let (code, err) = run(dir.path(), &["parking", "list", "--database", &url]);
    assert_eq!(
        code,
        Some(2),
        "the URL is wrong, not the server down: {err}"
    );
    assert!(
        err.contains("\"postroom_no_such_database\" does not exist")
            && err.contains("check the URL's database and user"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_unreadable_log_filter_is_reported_not_silently_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err) = code_and_stderr(
        common::postroom_cmd(dir.path(), &["parking", "list", "--database", "missing.db"])
            .env("POSTROOM_LOG", "[[["),
    );
    assert!(
        err.contains("POSTROOM_LOG") && err.contains("[[["),
        "the bad filter is named: {err}"
    );
    // The command itself still runs (and fails for its own reason).
    assert!(err.contains("missing.db"), "{err}");
}

/// `topology plan --broker BROKER --topology FILE` (AWS settings for SQS in its
/// environment) exits 2 with `needle` in its message, and no panic.
fn plan_refused(d: &std::path::Path, broker: &str, file: &str, needle: &str) {
    let (code, err) = code_and_stderr(
        common::postroom_cmd(
            d,
            &["topology", "plan", "--broker", broker, "--topology", file],
        )
        .envs(common::sqs::aws_env()),
    );
    assert_eq!(code, Some(2), "{broker} {file}: {err}");
    assert!(
        err.contains(needle),
        "{broker} {file}: {needle} not in {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // Said once, in words: not the error's kind as a second prefix ("topology file: config:").
    assert!(!err.contains(": config: "), "{broker} {file}: {err}");
}

/// A temporary directory holding the topology file `file`: workload `prefix`, consumer `c`
/// bound to `a.b`.
fn one_consumer_topology(file: &str, prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(file),
        format!("prefix = \"{prefix}\"\n[[consumers]]\nname = \"c\"\nbindings = [\"a.b\"]\n"),
    )
    .unwrap();
    dir
}

/// `postroom relay` into the database's own queue with the topology file `file` stops at
/// start-up with exit 2 and `needle` in its message (it is killed after 30 s otherwise).
fn relay_refuses(d: &std::path::Path, file: &str, needle: &str) {
    let mut relay = common::postroom_cmd(
        d,
        &[
            "relay",
            "--database",
            "app.db",
            "--topology",
            file,
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while relay.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if relay.try_wait().unwrap().is_none() {
        relay.kill().unwrap();
    }
    let out = relay.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "relay with {file}: {err}");
    assert!(
        err.contains(needle),
        "relay with {file}: {needle} not in {err}"
    );
}

/// A topology file's misspelt key is refused by name on every transport, at the top level and
/// in a `[[consumers]]` entry, before anything is created: silently dropped, `routes` for
/// `bindings` leaves a consumer bound to nothing, and `laddr` for `ladder` the default ladder.
#[test]
fn a_misspelt_topology_key_is_refused_by_name_on_every_transport() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let consumer_typo =
        "prefix = \"typo\"\n[[consumers]]\nname = \"inventory\"\nroutes = [\"order.*\"]\n";
    let top_typo = "prefix = \"typo\"\nladdr = \"5s\"\n[[consumers]]\nname = \"inventory\"\nbindings = [\"order.*\"]\n";
    let brokers = [
        common::amqp(),
        common::nats::url(),
        common::kafka(),
        common::sqs::url(),
    ];
    for (file, text, key) in [
        ("consumer.toml", consumer_typo, "routes"),
        ("top.toml", top_typo, "laddr"),
    ] {
        std::fs::write(d.join(file), text).unwrap();
        for broker in &brokers {
            plan_refused(d, broker, file, key);
        }
        // The database's own queue reads the same file's consumers: its relay stops at
        // start-up instead of running with a consumer bound to nothing.
        if key == "routes" {
            relay_refuses(d, file, key);
        }
    }
}

/// A topology file that names a consumer twice, or names one with nothing, is refused on every
/// transport, the database's own queue included (Kafka merged the twice-named one's bindings
/// and took an empty name as a consumer `<prefix>.`).
#[test]
fn a_consumer_named_twice_or_not_at_all_is_refused_on_every_transport() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let twice = "prefix = \"twice\"\n[[consumers]]\nname = \"a\"\nbindings = [\"x.y\"]\n[[consumers]]\nname = \"a\"\nbindings = [\"z.w\"]\n";
    let unnamed = "prefix = \"unnamed\"\n[[consumers]]\nname = \"\"\nbindings = [\"x.y\"]\n";
    for (file, text, needle) in [
        ("twice.toml", twice, "\"a\" is listed twice"),
        ("unnamed.toml", unnamed, "consumer name"),
    ] {
        std::fs::write(d.join(file), text).unwrap();
        for broker in [
            common::amqp(),
            common::nats::url(),
            common::kafka(),
            common::sqs::url(),
        ] {
            plan_refused(d, &broker, file, needle);
        }
        relay_refuses(d, file, needle);
    }
}

/// A NATS consumer whose stream or durable names would pass the server's 255-character limit
/// is refused before anything is created (the server refused only the parking stream, after
/// the work stream was made).
#[test]
fn a_nats_consumer_name_too_long_for_the_server_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prefix = common::nats::prefix("long");
    let name = "n".repeat(240);
    std::fs::write(
        d.join("long.toml"),
        format!("prefix = \"{prefix}\"\n[[consumers]]\nname = \"{name}\"\nbindings = [\"x.y\"]\n"),
    )
    .unwrap();
    let broker = common::nats::url();
    let (code, err) = run(
        d,
        &[
            "topology",
            "apply",
            "--yes",
            "--broker",
            &broker,
            "--topology",
            "long.toml",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("255"), "{err}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = common::nats::connect().await;
        if conn.jetstream().get_stream(&prefix).await.is_ok() {
            conn.jetstream().delete_stream(&prefix).await.unwrap();
            panic!("the work stream {prefix} was created");
        }
    });
}

/// On Kafka a route ending like a consumer's own topics (`.parking`, `.redrive`,
/// `.deliveries`, `.retry.<delay>`) is refused by `topology plan`, naming it.
#[test]
fn a_kafka_route_shaped_like_a_consumers_own_topic_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("own.toml"),
        "prefix = \"own\"\n[[consumers]]\nname = \"audit\"\nbindings = [\"inventory.parking\"]\n",
    )
    .unwrap();
    refused(
        d,
        &[
            "topology",
            "plan",
            "--broker",
            &common::kafka(),
            "--topology",
            "own.toml",
        ],
        "\"inventory.parking\" ends like a consumer's own topics",
    );
}

/// Two consumers whose names lead to the same queue (RabbitMQ: `a.parking` is consumer `a`'s
/// parking queue; SQS: `a-dlq` is consumer `a`'s DLQ) are refused, naming the queue: the
/// second would read the first's parked messages as its work.
#[test]
fn consumers_whose_queues_would_be_the_same_queue_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (broker, second, queue) in [
        (common::amqp(), "a.parking", "\"same.a.parking\""),
        (common::sqs::url(), "a-dlq", "\"same-a-dlq\""),
        (
            common::kafka(),
            "a.parking-ingest",
            "\"same.a.parking-ingest\"",
        ),
    ] {
        std::fs::write(
            d.join("same.toml"),
            format!(
                "prefix = \"same\"\n[[consumers]]\nname = \"a\"\nbindings = [\"x.y\"]\n[[consumers]]\nname = \"{second}\"\nbindings = [\"z.w\"]\n"
            ),
        )
        .unwrap();
        plan_refused(d, &broker, "same.toml", queue);
    }
}

/// A broker URL's setting that its transport does not read, or a value out of range, is
/// refused by name before anything is made: a misspelt setting is never dropped silently.
#[test]
fn a_broker_url_setting_that_is_not_read_or_out_of_range_is_refused() {
    let dir = one_consumer_topology("t.toml", "urls");
    let d = dir.path();
    let nats = common::nats::url();
    let kafka = common::kafka();
    for (broker, needle) in [
        (format!("{nats}?ack_wait=5s"), "\"ack_wait\""),
        (format!("{}?hearbeat=10", common::amqp()), "\"hearbeat\""),
        (
            format!("{}?heartbeat=soon", common::amqp()),
            "heartbeat must be a whole number",
        ),
        (format!("{nats}/stream"), "path"),
        (
            "sqs://127.0.0.1:5000?region=".to_string(),
            "region needs a value",
        ),
        (
            format!("{kafka}?partitions=99999999999"),
            "from 1 to 2147483647",
        ),
    ] {
        plan_refused(d, &broker, "t.toml", needle);
    }
}

/// Every command that takes `--broker` says in its help which brokers it takes: all five
/// transports (this build has every one), not RabbitMQ alone; and the topology file's help
/// says that each broker adds keys of its own, rather than listing RabbitMQ's as the file's.
#[test]
fn every_broker_flag_names_every_transport_in_its_help() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for command in [
        &["relay"][..],
        &["serve"],
        &["ingest"],
        &["feed"],
        &["demo"],
        &["soak"],
        &["parking", "redrive"],
        &["parking", "ingest"],
        &["topology", "plan"],
        &["topology", "apply"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let out = common::postroom(d, &args);
        common::ok(&out);
        let help = String::from_utf8_lossy(&out.stdout);
        let broker = help
            .split("\n      --")
            .find(|flag| flag.starts_with("broker <"))
            .unwrap_or_else(|| panic!("{command:?}: no --broker in\n{help}"));
        for scheme in ["amqp://", "nats://", "kafka://", "sqs://"] {
            assert!(
                broker.contains(scheme),
                "{command:?}: --broker does not name {scheme}: {broker}"
            );
        }
        if let Some(topology) = help
            .split("\n      --")
            .find(|flag| flag.starts_with("topology <"))
        {
            assert!(
                topology.contains("the broker's own keys"),
                "{command:?}: --topology lists one broker's keys as the file's: {topology}"
            );
        }
    }
}
