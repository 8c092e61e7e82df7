//! A small W3C WebDriver client over HTTP, enough to drive Debian's headless Chromium through
//! the chromedriver this test starts on a free loopback port (stopped on drop).

use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; chromedriver and Chromium end when it is dropped.
pub struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// An element of the current page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Browser {
    /// Start chromedriver and a fresh headless Chromium.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Start chromedriver and a fresh headless Chromium with `extra` command-line switches
    /// (e.g. `--host-resolver-rules=MAP attacker.example 127.0.0.1`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let port = postroom_testkit::servers::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver must be installed: bash scripts/services.sh browser");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "chromedriver did not start on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,900".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let args: Vec<String> = args
            .into_iter()
            .chain(extra.iter().map(|a| a.to_string()))
            .collect();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let mut b = Self {
            http,
            base,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps)).await;
        b.session = v["sessionId"].as_str().expect("session id").to_string();
        b
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.try_call(method, path, body).await {
            Ok(v) => v,
            Err(e) => panic!("webdriver {method} {path}: {e}"),
        }
    }

    /// A WebDriver command; `Err` with the status and answer when the driver refused it (a
    /// stale element, one that is gone after a reload, is refused this way).
    async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = if path == "/session" {
            format!("{}{path}", self.base)
        } else {
            format!("{}/session/{}{path}", self.base, self.session)
        };
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let r = req.send().await.expect("webdriver request");
        let status = r.status();
        let v: Value = r.json().await.expect("webdriver answer");
        if status.is_success() {
            Ok(v["value"].clone())
        } else {
            Err(format!("{status} {v}"))
        }
    }

    /// Open `url`.
    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.call("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The element matching `css`, waiting up to 10 s for it to appear.
    pub async fn find(&self, css: &str) -> Element<'_> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.try_find(css).await {
                return e;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no element {css:?} on {}",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element matching `css`, if there is one now.
    pub async fn try_find(&self, css: &str) -> Option<Element<'_>> {
        let url = format!("{}/session/{}/element", self.base, self.session);
        let r = self
            .http
            .post(url)
            .json(&json!({"using": "css selector", "value": css}))
            .send()
            .await
            .expect("find");
        if !r.status().is_success() {
            return None;
        }
        let v: Value = r.json().await.expect("find answer");
        v["value"][ELEMENT].as_str().map(|id| Element {
            browser: self,
            id: id.to_string(),
        })
    }

    /// Run `script` in the page (a returned promise is awaited) and return its value.
    pub async fn execute(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Text of the element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await
    }

    /// Wait up to `bound` until an element matches `css` (a page that reloads itself is
    /// waited for by a mark only the new page has).
    pub async fn wait_for(&self, css: &str, bound: Duration) {
        let start = Instant::now();
        while self.try_find(css).await.is_none() {
            assert!(
                start.elapsed() < bound,
                "no element {css:?} on {} after {bound:?}",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait up to `bound` until the text of `css` is `want`. An element that went stale
    /// (the page reloaded between finding and reading it) is looked up again.
    pub async fn wait_text(&self, css: &str, want: &str, bound: Duration) {
        let start = Instant::now();
        loop {
            let now = match self.try_find(css).await {
                Some(e) => e.try_text().await.unwrap_or_default(),
                None => String::new(),
            };
            if now == want {
                return;
            }
            assert!(
                start.elapsed() < bound,
                "{css} shows {now:?}, not {want:?}, after {bound:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Save a PNG screenshot of the page to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine;
        let v = self.call("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("screenshot data"))
            .expect("base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Browser {
    /// End the session (Chromium exits) before chromedriver is stopped.
    pub async fn quit(self) {
        self.call("DELETE", "", None).await;
    }
}

impl Element<'_> {
    /// Click it.
    pub async fn click(&self) {
        self.browser
            .call("POST", &format!("/element/{}/click", self.id), None)
            .await;
    }

    /// Replace its value with `text`.
    pub async fn set(&self, text: &str) {
        self.browser
            .call("POST", &format!("/element/{}/clear", self.id), None)
            .await;
        self.browser
            .call(
                "POST",
                &format!("/element/{}/value", self.id),
                Some(json!({"text": text})),
            )
            .await;
    }

    /// Its visible text, `None` when it is gone (stale).
    pub async fn try_text(&self) -> Option<String> {
        self.browser
            .try_call("GET", &format!("/element/{}/text", self.id), None)
            .await
            .ok()
            .map(|v| v.as_str().unwrap_or("").to_string())
    }

    /// Its visible text.
    pub async fn text(&self) -> String {
        self.browser
            .call("GET", &format!("/element/{}/text", self.id), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends Chromium with its session, then chromedriver (this test's own child).
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
