//! A browser-less visitor: keeps the session cookie, reads the CSRF token from pages, never
//! follows redirects (tests look at them).

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Response, StatusCode};

pub struct Agent {
    base: String,
    client: Client,
    cookie: Option<String>,
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
            cookie: None,
            csrf: None,
        }
    }

    fn keep(&mut self, r: &Response) {
        if let Some(c) = r.headers().get(SET_COOKIE).and_then(|v| v.to_str().ok()) {
            self.cookie = Some(c.split(';').next().unwrap_or("").to_string());
        }
    }

    pub async fn get(&mut self, path: &str) -> (StatusCode, String, Option<String>) {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header(COOKIE, c);
        }
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
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(c) = &self.cookie {
            req = req.header(COOKIE, c);
        }
        self.send(req).await
    }

    /// Send `req`; keep its cookie and the CSRF token of the page it returns.
    async fn send(&mut self, req: reqwest::RequestBuilder) -> (StatusCode, String, Option<String>) {
        let r = req.send().await.expect("request");
        self.keep(&r);
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

    pub fn cookie(&self) -> Option<&str> {
        self.cookie.as_deref()
    }
}
