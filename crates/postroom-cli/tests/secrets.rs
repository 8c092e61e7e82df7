//! Passwords stay secret: the demo and the soak run on PostgreSQL and RabbitMQ as a user with
//! a password made for the test (a PostgreSQL role, a RabbitMQ user), with debug logging on;
//! the password must appear in no output, no log line, no report, and in the argv of none of
//! the child processes, read from `/proc/<pid>/cmdline` while they run.

mod common;

use common::{TestDb, cleanup, workload};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A password nobody else uses, with a character that URLs percent-encode.
fn secret() -> String {
    format!("pw{}+sEcReT", postroom_testkit::servers::suffix())
}

/// The forms a password can take in text.
fn forms(password: &str) -> [String; 2] {
    [password.to_string(), password.replace('+', "%2B")]
}

fn with_user(url: &str, user: &str, password: Option<&str>) -> String {
    let mut u = url::Url::parse(url).expect("test server URL");
    u.set_username(user).unwrap();
    u.set_password(password).unwrap();
    u.to_string()
}

/// A PostgreSQL role with a password, owning a fresh database; dropped with it.
struct PgUser {
    db: Option<TestDb>,
    role: String,
    password: String,
}

impl PgUser {
    async fn create() -> Self {
        let db = TestDb::create().await;
        let role = format!("pr_role_{}", postroom_testkit::servers::suffix());
        let password = secret();
        let admin = db.admin().await;
        sqlx::query(&format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("ALTER DATABASE {} OWNER TO {role}", db.name))
            .execute(&admin)
            .await
            .unwrap();
        Self {
            db: Some(db),
            role,
            password,
        }
    }

    fn url(&self, with_password: bool) -> String {
        let url = &self.db.as_ref().unwrap().url;
        with_user(
            url,
            &self.role,
            with_password.then_some(self.password.as_str()),
        )
    }

    async fn drop_all(mut self) {
        let db = self.db.take().unwrap();
        let admin = db.admin().await;
        drop(db);
        let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {}", self.role))
            .execute(&admin)
            .await;
    }
}

/// A RabbitMQ user with a password and every permission on `/`; deleted at the end.
struct RabbitUser {
    name: String,
    password: String,
}

fn management() -> (reqwest::Client, url::Url) {
    let api = std::env::var("POSTROOM_TEST_RABBIT_API")
        .unwrap_or_else(|_| "http://guest:guest@127.0.0.1:15672".into());
    (reqwest::Client::new(), url::Url::parse(&api).unwrap())
}

async fn call(method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let (client, api) = management();
    let mut target = api.clone();
    target.set_username("").unwrap();
    target.set_password(None).unwrap();
    let mut req = client
        .request(method, format!("{}api/{path}", target))
        .basic_auth(api.username(), api.password());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("RabbitMQ management API");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
}

impl RabbitUser {
    async fn create() -> Self {
        let name = format!("pr-user-{}", postroom_testkit::servers::suffix());
        let password = secret();
        call(
            reqwest::Method::PUT,
            &format!("users/{name}"),
            Some(serde_json::json!({"password": password, "tags": "administrator"})),
        )
        .await;
        call(
            reqwest::Method::PUT,
            &format!("permissions/%2F/{name}"),
            Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
        Self { name, password }
    }

    fn url(&self, with_password: bool) -> String {
        with_user(
            &common::amqp(),
            &self.name,
            with_password.then_some(self.password.as_str()),
        )
    }

    async fn delete(self) {
        call(
            reqwest::Method::DELETE,
            &format!("users/{}", self.name),
            None,
        )
        .await;
    }
}

/// A database user and a broker user, each with a password, and a workload prefix of its own.
struct Users {
    pg: PgUser,
    mq: RabbitUser,
    prefix: String,
}

impl Users {
    async fn create(tag: &str) -> Self {
        Self {
            pg: PgUser::create().await,
            mq: RabbitUser::create().await,
            prefix: workload(tag),
        }
    }

    fn passwords(&self) -> [&str; 2] {
        [&self.pg.password, &self.mq.password]
    }

    async fn remove(self) {
        cleanup(&format!("{}.", self.prefix)).await;
        self.mq.delete().await;
        self.pg.drop_all().await;
    }
}

/// What a run printed, the argv of every child process seen while it ran, and how it ended.
struct Watched {
    output: String,
    children: BTreeMap<u32, String>,
    status: std::process::ExitStatus,
}

fn parent_of(pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last `)`.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Run `postroom` in `dir` and read its children's argv every 50 ms until it exits.
fn run_watched(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Watched {
    let out = std::fs::File::create(dir.join("out.txt")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        // Every log line of postroom and of the drivers, to be searched.
        .env("POSTROOM_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let me = child.id();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut children = BTreeMap::new();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if parent_of(&name) == Some(me)
                && let Ok(pid) = name.parse::<u32>()
                && let Some(argv) = cmdline(pid)
            {
                children.entry(pid).or_insert(argv);
            }
        }
        assert!(
            Instant::now() < deadline,
            "postroom {args:?} did not end in 600 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(dir.join("out.txt")).unwrap();
    Watched {
        output,
        children,
        status,
    }
}

fn assert_secret(password: &str, w: &Watched, files: &[&Path], min_children: usize) {
    assert!(
        w.children.len() >= min_children,
        "expected at least {min_children} child processes, saw {:?}",
        w.children
    );
    assert!(
        w.output.lines().count() > 20,
        "debug logging produced lines:\n{}",
        w.output
    );
    for form in forms(password) {
        assert!(
            !w.output.contains(&form),
            "the password is in the output:\n{}",
            w.output
        );
        for (pid, argv) in &w.children {
            assert!(
                !argv.contains(&form),
                "child {pid} has the password on argv: {argv}"
            );
        }
        for f in files {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            assert!(!text.contains(&form), "{} holds the password", f.display());
        }
    }
    for (pid, argv) in &w.children {
        assert!(
            !argv.contains("postgres://") && !argv.contains("amqp://"),
            "child {pid} got a URL on argv: {argv}"
        );
    }
    // Last, so that a leak is reported as a leak even when it also broke the run.
    assert!(
        w.status.success(),
        "the run failed ({}):\n{}",
        w.status,
        w.output
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_with_passwords_in_its_urls_prints_none() {
    let users = Users::create("secret-demo").await;
    let dir = tempfile::tempdir().unwrap();
    let (d, db, broker, w) = (
        dir.path().to_path_buf(),
        users.pg.url(true),
        users.mq.url(true),
        users.prefix.clone(),
    );
    let watched = tokio::task::spawn_blocking(move || {
        run_watched(
            &d,
            &[
                "demo",
                "--database",
                &db,
                "--broker",
                &broker,
                "--workload",
                &w,
                "--report-json",
                "r.json",
            ],
            &[],
        )
    })
    .await
    .unwrap();
    for password in users.passwords() {
        assert_secret(password, &watched, &[&dir.path().join("r.json")], 2);
    }
    assert!(
        watched.output.contains("all invariants hold"),
        "{}",
        watched.output
    );
    assert!(
        watched
            .children
            .values()
            .all(|a| a.contains("demo-consumer")),
        "{:?}",
        watched.children
    );
    users.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_with_passwords_from_a_file_and_the_environment_prints_none() {
    let users = Users::create("secret-soak").await;
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("db-password");
    std::fs::write(&pw_file, format!("{}\n", users.pg.password)).unwrap();
    let (d, db, broker, broker_pw, w) = (
        dir.path().to_path_buf(),
        users.pg.url(false),
        users.mq.url(false),
        users.mq.password.clone(),
        users.prefix.clone(),
    );
    let file = pw_file.display().to_string();
    let watched = tokio::task::spawn_blocking(move || {
        run_watched(
            &d,
            &[
                "soak",
                "--messages",
                "1500",
                "--kill-every",
                "1",
                "--relays",
                "1",
                "--consumers",
                "1",
                "--workload",
                &w,
                "--json",
                "s.json",
                "--database-password-file",
                &file,
            ],
            &[
                ("POSTROOM_DATABASE", &db),
                ("POSTROOM_BROKER", &broker),
                ("POSTROOM_BROKER_PASSWORD", &broker_pw),
            ],
        )
    })
    .await
    .unwrap();
    for password in users.passwords() {
        assert_secret(password, &watched, &[&dir.path().join("s.json")], 3);
    }
    let report = common::json_file(&dir.path().join("s.json"));
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["duplicate_effects"], 0, "{report}");
    users.remove().await;
}
