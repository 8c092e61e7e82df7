//! The client itself (feature `client`): HTTP with rustls, the vhost's calls.

use super::{BindingInfo, ExchangeInfo, PolicyInfo, QueueInfo};
use postroom_core::{Error, ErrorKind, Result};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The management API of one vhost.
#[derive(Clone)]
pub struct ManagementApi {
    client: reqwest::Client,
    base: Url,
    user: String,
    password: String,
    vhost: String,
}

impl std::fmt::Debug for ManagementApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagementApi")
            .field("base", &self.base.as_str())
            .field("user", &self.user)
            .field("vhost", &self.vhost)
            .finish_non_exhaustive()
    }
}

/// The HTTP client: a 15 s timeout, rustls with built-in roots plus the CA certificates in
/// `ca_pem`.
fn http_client(ca_pem: Option<&str>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(15));
    if let Some(pem) = ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
            Error::new(ErrorKind::Config, "reading the CA certificates").with_source(e)
        })?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| Error::new(ErrorKind::Config, "building the HTTP client").with_source(e))
}

/// Percent-encode one path segment (the vhost `/` becomes `%2F`).
#[must_use]
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl ManagementApi {
    /// A client for `url` (`http://user:password@host:15672`, or
    /// `https://user:password@host:15671?cacertfile=/path/ca.pem` for a broker with TLS: the
    /// server's certificate is verified against the system's roots plus that CA file) and
    /// `vhost`. The error for a bad URL never repeats it.
    pub fn new(url: &str, vhost: &str) -> Result<Self> {
        let split = crate::tls::split_ca_file(url)
            .map_err(|e| Error::new(ErrorKind::Config, format!("management API URL: {e}")))?;
        let mut base = split.url;
        let user = if base.username().is_empty() {
            "guest".to_string()
        } else {
            base.username().to_string()
        };
        let password = base.password().unwrap_or("guest").to_string();
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let api = Self {
            client: http_client(None)?,
            base,
            user,
            password,
            vhost: vhost.to_string(),
        };
        match split.ca_file {
            Some(path) => api.with_ca_file(&path),
            None => Ok(api),
        }
    }

    /// Also trust the CA certificates (PEM) in `path` for the API's https certificate: the
    /// same file as the broker URL's `cacertfile`.
    pub fn with_ca_file(mut self, path: &std::path::Path) -> Result<Self> {
        let pem = crate::tls::read_ca_file(path)?;
        self.client = http_client(Some(&pem))?;
        Ok(self)
    }

    /// The vhost.
    #[must_use]
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    fn url(&self, path: &str) -> Result<Url> {
        self.base
            .join(path)
            .map_err(|e| Error::new(ErrorKind::Config, format!("bad API path {path}: {e}")))
    }

    fn v(&self) -> String {
        encode_segment(&self.vhost)
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Option<Value>> {
        let mut req = self
            .client
            .request(method.clone(), self.url(path)?)
            .basic_auth(&self.user, Some(&self.password));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            if crate::tls::is_tls_failure(&e) {
                return Error::new(
                    ErrorKind::Config,
                    format!(
                        "TLS with the management API at {} failed: its certificate must be \
                         signed by the CA in cacertfile or the system's roots and name the \
                         host of the URL",
                        self.base.host_str().unwrap_or("?")
                    ),
                )
                .with_source(e);
            }
            let kind = if e.is_timeout() {
                ErrorKind::Timeout
            } else {
                ErrorKind::Connection
            };
            // Nothing listening on the API's port: on a broker that is up, the plugin is off.
            let hint = if e.is_connect() {
                format!(
                    " at {}: is the RabbitMQ management plugin enabled? \
                     (rabbitmq-plugins enable rabbitmq_management)",
                    self.base.host_str().map_or_else(
                        || "?".to_string(),
                        |h| format!("{h}:{}", self.base.port_or_known_default().unwrap_or(0))
                    )
                )
            } else {
                String::new()
            };
            Error::new(kind, format!("management API {method} {path}{hint}")).with_source(e)
        })?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let text = resp.text().await.map_err(|e| {
            Error::new(ErrorKind::Connection, "reading API response").with_source(e)
        })?;
        if !status.is_success() {
            let kind = match status.as_u16() {
                401 | 403 | 400 => ErrorKind::Config,
                408 | 504 => ErrorKind::Timeout,
                _ => ErrorKind::Io,
            };
            return Err(Error::new(
                kind,
                format!("management API {method} {path}: {status}: {text}"),
            ));
        }
        if text.trim().is_empty() {
            return Ok(Some(Value::Null));
        }
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::new(
                ErrorKind::InvalidData,
                format!("management API {path}: bad JSON"),
            )
            .with_source(e)
        })
    }

    async fn list<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<Vec<T>> {
        let v = self
            .call(Method::GET, path, None)
            .await?
            .unwrap_or(Value::Array(Vec::new()));
        serde_json::from_value(v).map_err(|e| {
            Error::new(ErrorKind::InvalidData, format!("management API {path}")).with_source(e)
        })
    }

    /// Exchanges of the vhost.
    pub async fn exchanges(&self) -> Result<Vec<ExchangeInfo>> {
        self.list(&format!("api/exchanges/{}", self.v())).await
    }

    /// Queues of the vhost.
    pub async fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.list(&format!("api/queues/{}", self.v())).await
    }

    /// One queue; `None` when it does not exist.
    pub async fn queue(&self, name: &str) -> Result<Option<QueueInfo>> {
        match self
            .call(Method::GET, &self.object_path("queues", name), None)
            .await?
        {
            None => Ok(None),
            Some(v) => serde_json::from_value(v).map(Some).map_err(|e| {
                Error::new(ErrorKind::InvalidData, format!("queue {name}")).with_source(e)
            }),
        }
    }

    /// Bindings of the vhost.
    pub async fn bindings(&self) -> Result<Vec<BindingInfo>> {
        self.list(&format!("api/bindings/{}", self.v())).await
    }

    /// Policies of the vhost.
    pub async fn policies(&self) -> Result<Vec<PolicyInfo>> {
        self.list(&format!("api/policies/{}", self.v())).await
    }

    /// Create or replace a policy.
    pub async fn put_policy(&self, p: &PolicyInfo) -> Result<()> {
        let body = json!({"pattern": p.pattern, "apply-to": p.apply_to, "definition": p.definition, "priority": p.priority});
        self.call_object(Method::PUT, "policies", &p.name, Some(body))
            .await
    }

    /// Delete a policy (absent is fine).
    pub async fn delete_policy(&self, name: &str) -> Result<()> {
        self.call_object(Method::DELETE, "policies", name, None)
            .await
    }

    /// Declare a durable exchange.
    pub async fn declare_exchange(
        &self,
        name: &str,
        kind: &str,
        arguments: Map<String, Value>,
    ) -> Result<()> {
        let body = json!({"type": kind, "durable": true, "auto_delete": false, "internal": false, "arguments": arguments});
        self.call_object(Method::PUT, "exchanges", name, Some(body))
            .await
    }

    /// Declare a durable queue.
    pub async fn declare_queue(&self, name: &str, arguments: Map<String, Value>) -> Result<()> {
        let body = json!({"durable": true, "auto_delete": false, "arguments": arguments});
        self.call_object(Method::PUT, "queues", name, Some(body))
            .await
    }

    /// Bind `destination` (a queue, or an exchange when `to_exchange`) to `source` with `key`.
    pub async fn bind(
        &self,
        source: &str,
        destination: &str,
        to_exchange: bool,
        key: &str,
    ) -> Result<()> {
        let kind = if to_exchange { "e" } else { "q" };
        let path = format!(
            "api/bindings/{}/e/{}/{kind}/{}",
            self.v(),
            encode_segment(source),
            encode_segment(destination)
        );
        self.call(
            Method::POST,
            &path,
            Some(json!({"routing_key": key, "arguments": {}})),
        )
        .await?;
        Ok(())
    }

    /// Delete a binding.
    pub async fn unbind(&self, b: &BindingInfo) -> Result<()> {
        let kind = if b.destination_type == "exchange" {
            "e"
        } else {
            "q"
        };
        let path = format!(
            "api/bindings/{}/e/{}/{kind}/{}/{}",
            self.v(),
            encode_segment(&b.source),
            encode_segment(&b.destination),
            encode_segment(&b.properties_key)
        );
        self.call(Method::DELETE, &path, None).await?;
        Ok(())
    }

    /// Delete a queue (absent is fine).
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        self.call_object(Method::DELETE, "queues", name, None).await
    }

    /// Delete an exchange (absent is fine).
    pub async fn delete_exchange(&self, name: &str) -> Result<()> {
        self.call_object(Method::DELETE, "exchanges", name, None)
            .await
    }

    /// The API path of the vhost's object `name` in `collection` (`queues`, `exchanges`,
    /// `policies`).
    fn object_path(&self, collection: &str, name: &str) -> String {
        format!("api/{collection}/{}/{}", self.v(), encode_segment(name))
    }

    /// Create or replace (`PUT`, with a body) or delete (`DELETE`, without) the vhost's
    /// object `name` in `collection`.
    async fn call_object(
        &self,
        method: Method,
        collection: &str,
        name: &str,
        body: Option<Value>,
    ) -> Result<()> {
        self.call(method, &self.object_path(collection, name), body)
            .await?;
        Ok(())
    }

    /// The broker's names of the open connections whose client named itself
    /// `connection_name` (a connection appears here shortly after it opened).
    pub async fn connections_named(&self, connection_name: &str) -> Result<Vec<String>> {
        let conns: Vec<Value> = self.list("api/connections").await?;
        Ok(conns
            .iter()
            .filter(|c| {
                c.pointer("/client_properties/connection_name")
                    .and_then(Value::as_str)
                    == Some(connection_name)
            })
            .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect())
    }

    /// Force-close the connection the broker calls `name` (see
    /// [`connections_named`](Self::connections_named)). False when it was gone already.
    pub async fn close_connection(&self, name: &str) -> Result<bool> {
        let closed = self
            .call(
                Method::DELETE,
                &format!("api/connections/{}", encode_segment(name)),
                None,
            )
            .await?;
        Ok(closed.is_some())
    }

    /// Force-close every connection whose client named itself `connection_name` (what a
    /// network failure or an operator does; tests of the reconnect path). Returns how many.
    pub async fn close_connections_named(&self, connection_name: &str) -> Result<usize> {
        let mut n = 0;
        for name in self.connections_named(connection_name).await? {
            if self.close_connection(&name).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Delete every queue, exchange and policy whose name starts with `prefix` (test cleanup,
    /// decommissioning a workload). Returns how many objects were deleted.
    pub async fn delete_everything_named(&self, prefix: &str) -> Result<usize> {
        let policy_prefix = format!("postroom:{prefix}");
        let policies = self.policies().await?.into_iter().map(|p| p.name);
        let mut n = self
            .delete_each(
                "policies",
                policies
                    .filter(|name| name.starts_with(prefix) || name.starts_with(&policy_prefix)),
            )
            .await?;
        let queues = self.queues().await?.into_iter().map(|q| q.name);
        n += self
            .delete_each("queues", queues.filter(|name| name.starts_with(prefix)))
            .await?;
        let exchanges = self.exchanges().await?.into_iter().map(|e| e.name);
        n += self
            .delete_each(
                "exchanges",
                exchanges.filter(|name| name.starts_with(prefix)),
            )
            .await?;
        Ok(n)
    }

    /// Delete the vhost's objects `names` in `collection`, one after another; returns how
    /// many were deleted.
    async fn delete_each(
        &self,
        collection: &str,
        names: impl Iterator<Item = String>,
    ) -> Result<usize> {
        let mut n = 0;
        for name in names {
            self.call_object(Method::DELETE, collection, &name, None)
                .await?;
            n += 1;
        }
        Ok(n)
    }
}
