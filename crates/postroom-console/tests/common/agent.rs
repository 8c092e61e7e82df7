//! A browser-less visitor: keeps the session cookie, reads the CSRF token from pages, never
//! follows redirects (tests look at them).

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Response, StatusCode};

pub struct Agent {
    base: String,
    client: Client,
    /// The cookies kept, by name (a cookie set with `Max-Age=0` is dropped).
    jar: std::collections::BTreeMap<String, String>,
    /// Headers sent with every request (`Host`, `Origin`, `X-Forwarded-Proto`, …).
    headers: Vec<(String, String)>,
    /// The `Set-Cookie` headers of the last answer, whole.
    pub set_cookies: Vec<String>,
    /// The headers of the last answer.
    pub last_headers: reqwest::header::HeaderMap,
    pub csrf: Option<String>,
}

/// The `value` of the first `name="csrf"` input in a page.
pub fn csrf_in(page: &str) -> Option<String> {
    let at = page.find(r#"name="csrf" value=""#)? + r#"name="csrf" value=""#.len();
    Some(page[at..].split('"').next()?.to_string())
}

impl Agent {
    pub fn new(base: &str) -> Self {
        Self {
            base: base.to_string(),
            client: Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            jar: Default::default(),
            headers: Vec::new(),
            set_cookies: Vec::new(),
            last_headers: Default::default(),
            csrf: None,
        }
    }

    /// Send `value` as header `name` with every request from now on.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.add_header(name, value);
        self
    }

    /// Send `value` as header `name` with every request from now on.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.headers.push((name.to_string(), value.to_string()));
    }

    fn keep(&mut self, r: &Response) {
        self.set_cookies = r
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        for c in &self.set_cookies {
            let pair = c.split(';').next().unwrap_or("");
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            if c.contains("Max-Age=0") {
                self.jar.remove(name.trim());
            } else {
                self.jar.insert(name.trim().to_string(), value.to_string());
            }
        }
    }

    /// `req` with this visitor's cookies and headers.
    fn dress(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(c) = self.cookie() {
            req = req.header(COOKIE, c);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        req
    }

    pub async fn get(&mut self, path: &str) -> (StatusCode, String, Option<String>) {
        let req = self.dress(self.client.get(format!("{}{path}", self.base)));
        self.send(req).await
    }

    /// The key of the first cause group on the groups page.
    pub async fn group_key(&mut self) -> String {
        let (_, page, _) = self.get("/groups").await;
        page.split(r#"data-key=""#)
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("a group key")
            .to_string()
    }

    /// Start a redrive run of group `key` at `rate` messages a second: the run's page
    /// (`/runs/ID`) and its id.
    pub async fn start_run(&mut self, key: &str, rate: &str) -> (String, String) {
        let (status, page, location) = self
            .post("/redrive/start", &[("group", key), ("rate", rate)], true)
            .await;
        let run = location.unwrap_or_else(|| panic!("no run started ({status}): {page}"));
        let id = run.trim_start_matches("/runs/").to_string();
        (run, id)
    }

    /// POST a form; the session's CSRF token is added when `with_csrf`.
    pub async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        with_csrf: bool,
    ) -> (StatusCode, String, Option<String>) {
        let mut pairs: Vec<(String, String)> = form
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if with_csrf {
            pairs.push((
                "csrf".into(),
                self.csrf.clone().expect("a page gave a token"),
            ));
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        let req = self.dress(
            self.client
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
        );
        self.send(req).await
    }

    /// Send `req`; keep its cookie and the CSRF token of the page it returns.
    async fn send(&mut self, req: reqwest::RequestBuilder) -> (StatusCode, String, Option<String>) {
        let r = req.send().await.expect("request");
        self.keep(&r);
        self.last_headers = r.headers().clone();
        let status = r.status();
        let location = r
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = r.text().await.expect("body");
        if let Some(t) = csrf_in(&body) {
            self.csrf = Some(t);
        }
        (status, body, location)
    }

    /// Log in as `user`; panics unless it worked.
    pub async fn login(&mut self, user: &str, password: &str) {
        self.get("/login").await;
        let (status, _, location) = self
            .post(
                "/login",
                &[("username", user), ("password", password)],
                true,
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "login of {user}");
        assert_eq!(location.as_deref(), Some("/parking"));
        // Fetch a page for the new session's token.
        self.get("/parking").await;
    }

    /// The `Cookie` header this visitor sends, if it keeps any cookie.
    pub fn cookie(&self) -> Option<String> {
        (!self.jar.is_empty()).then(|| {
            self.jar
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}
