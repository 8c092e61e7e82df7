//! A connection in replication mode (`replication=database`), spoken directly over the
//! PostgreSQL wire protocol: the drivers the store uses (sqlx) cannot start one, nor follow a
//! `START_REPLICATION` into the copy-both mode in which the server streams the decoded log.
//!
//! It does what the stream needs and no more: TCP or a Unix socket, TLS as the store's URL
//! says (see [`crate::tls`]: `require`, `verify-ca` and `verify-full` are verified;
//! `disable`, `allow` and `prefer` connect in plaintext), the password methods (SCRAM-SHA-256,
//! MD5, cleartext; trust), simple queries, and the copy-both stream. The message framing,
//! SCRAM and MD5 come from `postgres-protocol`, the protocol crate of `tokio-postgres`.

use bytes::{Buf, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use postroom_core::{Error, ErrorKind};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest message accepted from the server (a decoded transaction's change is one
/// message; the outbox's bodies are far smaller).
const MAX_MESSAGE: usize = 1 << 30;

/// The longest a connection attempt (TCP, TLS, login) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An error from the server, with its SQLSTATE.
#[derive(Clone, Debug)]
pub(crate) struct ServerError {
    /// The SQLSTATE, e.g. `55006` (object in use).
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The hint, if any.
    pub hint: Option<String>,
}

/// What can go wrong on the connection.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The server answered with an error.
    Server(ServerError),
    /// The socket failed or closed.
    Io(std::io::Error),
    /// The server said something this client does not understand.
    Protocol(String),
    /// The settings cannot be used (TLS files, an authentication method not supported).
    Config(String),
}

impl WireError {
    /// Whether the server refused with SQLSTATE `code`.
    pub fn is_code(&self, code: &str) -> bool {
        matches!(self, WireError::Server(e) if e.code == code)
    }

    /// As the crate's error: connection failures are transient, a refused login or a setting
    /// that cannot work is configuration, other server errors keep their SQLSTATE's class.
    pub fn into_error(self, doing: &str) -> Error {
        match self {
            WireError::Server(e) => {
                let kind = match &e.code[..e.code.len().min(2)] {
                    "08" | "57" | "53" => ErrorKind::Connection,
                    "28" | "42" => ErrorKind::Config,
                    "55" => ErrorKind::Closed,
                    _ => ErrorKind::Io,
                };
                let hint = e.hint.map(|h| format!("; {h}")).unwrap_or_default();
                Error::new(
                    kind,
                    format!("{doing}: PostgreSQL said {} ({}){hint}", e.message, e.code),
                )
            }
            WireError::Io(io) => {
                Error::new(ErrorKind::Connection, format!("{doing}: {io}")).with_source(io)
            }
            WireError::Protocol(p) => Error::new(ErrorKind::Io, format!("{doing}: {p}")),
            WireError::Config(c) => Error::new(ErrorKind::Config, format!("{doing}: {c}")),
        }
    }
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> Self {
        WireError::Io(e)
    }
}

type WireResult<T> = std::result::Result<T, WireError>;

/// Where and how to connect, taken from the store's connect options. The password is never
/// printed.
#[derive(Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    socket: Option<PathBuf>,
    user: String,
    password: Option<String>,
    database: String,
    ssl: PgSslMode,
    root_cert: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

impl Target {
    /// The host name the certificate must carry, and the TLS files.
    pub(super) fn tls_parts(&self) -> (&str, Option<&PathBuf>, Option<&PathBuf>, Option<&PathBuf>) {
        (
            &self.host,
            self.root_cert.as_ref(),
            self.client_cert.as_ref(),
            self.client_key.as_ref(),
        )
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

impl Target {
    /// The server `options` connect to, as the same user, database and TLS settings.
    pub fn of(options: &PgConnectOptions) -> Self {
        use sqlx::ConnectOptions as _;
        let url = options.to_url_lossy();
        let mut target = Target {
            host: options.get_host().to_string(),
            port: options.get_port(),
            socket: options.get_socket().cloned(),
            user: options.get_username().to_string(),
            password: url.password().map(percent_decoded),
            database: options
                .get_database()
                .unwrap_or(options.get_username())
                .to_string(),
            ssl: options.get_ssl_mode(),
            root_cert: None,
            client_cert: None,
            client_key: None,
        };
        for (k, v) in url.query_pairs() {
            let path = Some(PathBuf::from(v.as_ref()));
            match k.as_ref() {
                "sslrootcert" => target.root_cert = path,
                "sslcert" => target.client_cert = path,
                "sslkey" => target.client_key = path,
                _ => {}
            }
        }
        target
    }

    /// `host:port` (or the socket), for messages.
    pub fn describe(&self) -> String {
        match &self.socket {
            Some(dir) => format!("{}/.s.PGSQL.{}", dir.display(), self.port),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One server message: its tag and its body.
pub(crate) struct Message {
    pub tag: u8,
    pub body: Bytes,
}

/// A logged-in replication connection.
pub(crate) struct WireConnection {
    io: Box<dyn Io>,
    rbuf: BytesMut,
    wbuf: BytesMut,
}

impl WireConnection {
    /// Connect to `target` in replication mode and log in, within [`CONNECT_TIMEOUT`].
    pub async fn connect(target: &Target, application: &str) -> WireResult<Self> {
        match tokio::time::timeout(CONNECT_TIMEOUT, Self::connect_now(target, application)).await {
            Ok(r) => r,
            Err(_) => Err(WireError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no replication connection within {CONNECT_TIMEOUT:?}"),
            ))),
        }
    }

    async fn connect_now(target: &Target, application: &str) -> WireResult<Self> {
        let io: Box<dyn Io> = match &target.socket {
            Some(dir) => Box::new(
                tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{}", target.port)))
                    .await?,
            ),
            None => {
                let tcp =
                    tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
                tcp.set_nodelay(true)?;
                match target.ssl {
                    PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer => Box::new(tcp),
                    PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull => {
                        Box::new(super::wire_tls::upgrade(tcp, target).await?)
                    }
                }
            }
        };
        let mut conn = WireConnection {
            io,
            rbuf: BytesMut::with_capacity(64 * 1024),
            wbuf: BytesMut::with_capacity(1024),
        };
        let params = [
            ("user", target.user.as_str()),
            ("database", target.database.as_str()),
            ("replication", "database"),
            ("application_name", application),
            ("client_encoding", "UTF8"),
        ];
        frontend::startup_message(params, &mut conn.wbuf)?;
        conn.flush().await?;
        conn.log_in(target).await?;
        Ok(conn)
    }

    async fn log_in(&mut self, target: &Target) -> WireResult<()> {
        let password = || {
            target.password.clone().ok_or_else(|| {
                WireError::Config(
                    "the server asks for a password and the URL has none (set it in the URL read from the environment, or PGPASSWORD)".into(),
                )
            })
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            let m = self.read_message().await?;
            match m.tag {
                b'R' => {
                    let mut body = m.body;
                    if body.len() < 4 {
                        return Err(WireError::Protocol("short authentication message".into()));
                    }
                    match body.get_i32() {
                        0 => {}
                        3 => {
                            frontend::password_message(password()?.as_bytes(), &mut self.wbuf)?;
                            self.flush().await?;
                        }
                        5 => {
                            let mut salt = [0u8; 4];
                            if body.len() < 4 {
                                return Err(WireError::Protocol("short MD5 salt".into()));
                            }
                            body.copy_to_slice(&mut salt);
                            let hash = postgres_protocol::authentication::md5_hash(
                                target.user.as_bytes(),
                                password()?.as_bytes(),
                                salt,
                            );
                            frontend::password_message(hash.as_bytes(), &mut self.wbuf)?;
                            self.flush().await?;
                        }
                        10 => {
                            let offers_scram = body
                                .split(|b| *b == 0)
                                .any(|mech| mech == sasl::SCRAM_SHA_256.as_bytes());
                            if !offers_scram {
                                return Err(WireError::Config(
                                    "the server offers no SASL mechanism this client has (SCRAM-SHA-256)".into(),
                                ));
                            }
                            let s = ScramSha256::new(
                                password()?.as_bytes(),
                                ChannelBinding::unsupported(),
                            );
                            frontend::sasl_initial_response(
                                sasl::SCRAM_SHA_256,
                                s.message(),
                                &mut self.wbuf,
                            )?;
                            self.flush().await?;
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                WireError::Protocol("SASL continue before SASL start".into())
                            })?;
                            s.update(&body)?;
                            frontend::sasl_response(s.message(), &mut self.wbuf)?;
                            self.flush().await?;
                        }
                        12 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                WireError::Protocol("SASL final before SASL start".into())
                            })?;
                            s.finish(&body)?;
                        }
                        other => {
                            return Err(WireError::Config(format!(
                                "the server asks for an authentication method this client does not have (code {other}); use scram-sha-256, md5 or password"
                            )));
                        }
                    }
                }
                b'Z' => return Ok(()),
                b'E' => return Err(WireError::Server(server_error(&m.body))),
                _ => {}
            }
        }
    }

    async fn flush(&mut self) -> WireResult<()> {
        self.io.write_all(&self.wbuf).await?;
        self.io.flush().await?;
        self.wbuf.clear();
        Ok(())
    }

    /// The next message from the server. Cancel-safe: a message partly read stays buffered
    /// for the next call.
    pub async fn read_message(&mut self) -> WireResult<Message> {
        loop {
            if self.rbuf.len() >= 5 {
                let len =
                    i32::from_be_bytes([self.rbuf[1], self.rbuf[2], self.rbuf[3], self.rbuf[4]]);
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| (4..=MAX_MESSAGE).contains(l))
                    .ok_or_else(|| WireError::Protocol(format!("message length {len}")))?;
                if self.rbuf.len() > len {
                    let mut m = self.rbuf.split_to(len + 1);
                    let tag = m[0];
                    m.advance(5);
                    return Ok(Message {
                        tag,
                        body: m.freeze(),
                    });
                }
                self.rbuf.reserve(len + 1 - self.rbuf.len());
            }
            if self.io.read_buf(&mut self.rbuf).await? == 0 {
                return Err(WireError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }

    /// Send `sql` (`START_REPLICATION …`) and wait until the server enters copy-both mode.
    pub async fn start_copy_both(&mut self, sql: &str) -> WireResult<()> {
        frontend::query(sql, &mut self.wbuf)?;
        self.flush().await?;
        loop {
            let m = self.read_message().await?;
            match m.tag {
                b'W' => return Ok(()),
                b'E' => {
                    let e = server_error(&m.body);
                    // Let the server finish the command before the connection is dropped.
                    while self.read_message().await?.tag != b'Z' {}
                    return Err(WireError::Server(e));
                }
                _ => {}
            }
        }
    }

    /// The next CopyData of the stream; `None` when the server ended it.
    pub async fn read_copy_data(&mut self) -> WireResult<Option<Bytes>> {
        loop {
            let m = self.read_message().await?;
            match m.tag {
                b'd' => return Ok(Some(m.body)),
                b'c' | b'C' | b'Z' => return Ok(None),
                b'E' => return Err(WireError::Server(server_error(&m.body))),
                _ => {}
            }
        }
    }

    /// Send one CopyData message.
    pub async fn send_copy_data(&mut self, data: &[u8]) -> WireResult<()> {
        frontend::CopyData::new(data)?.write(&mut self.wbuf);
        self.flush().await
    }
}

/// The fields of an ErrorResponse.
fn server_error(body: &[u8]) -> ServerError {
    let mut e = ServerError {
        code: String::new(),
        message: String::new(),
        hint: None,
    };
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => e.code = text,
            b'M' => e.message = text,
            b'H' => e.hint = Some(text),
            _ => {}
        }
    }
    e
}
