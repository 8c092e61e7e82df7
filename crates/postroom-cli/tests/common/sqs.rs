//! The SQS endpoint the CLI's tests use (`POSTROOM_TEST_SQS`, default the local moto server
//! on 127.0.0.1:5000) as an `sqs://` broker URL, the AWS environment the commands get (the
//! test environment's, else fixed fake credentials and a region), and cleanup by prefix.

use std::path::Path;
use std::process::Output;

fn region() -> String {
    std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|_| "us-east-1".into())
}

/// The test endpoint as an `sqs://` URL with its region.
pub fn url() -> String {
    url_for(&std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into()))
}

/// The endpoint at `http` (an `http://` or `https://` URL) as an `sqs://` URL with its region.
pub fn url_for(http: &str) -> String {
    let (scheme, rest) = http.split_once("://").expect("the endpoint is a URL");
    let tls = if scheme == "https" {
        "&tls=true"
    } else {
        "&tls=false"
    };
    format!(
        "sqs://{}?region={}{tls}",
        rest.trim_end_matches('/'),
        region()
    )
}

/// The AWS credentials the commands get: the environment's, else fixed fake ones.
pub fn aws_env() -> Vec<(&'static str, String)> {
    let get = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.into());
    vec![
        (
            "AWS_ACCESS_KEY_ID",
            get("AWS_ACCESS_KEY_ID", "postroom-test"),
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            get("AWS_SECRET_ACCESS_KEY", "postroom-test"),
        ),
        ("AWS_REGION", region()),
    ]
}

/// Run `postroom` with `args` in `dir`, with the AWS environment.
pub fn postroom(dir: &Path, args: &[&str]) -> Output {
    super::postroom_cmd(dir, args)
        .envs(aws_env())
        .output()
        .expect("run postroom")
}

/// [`super::run_for_report`] with the AWS environment.
pub async fn run_for_report(dir: &Path, args: &[&str], report: &str) -> serde_json::Value {
    super::run_for_report_env(dir, args, report, aws_env()).await
}

/// Delete every queue whose name starts with `prefix` (best effort: with no AWS credentials
/// in this process's environment the queues are left to the endpoint).
pub async fn cleanup(prefix: &str) {
    let endpoint =
        std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into());
    let Ok(client) = postroom_sqs::client::connect_to(Some(&endpoint), Some(&region())).await
    else {
        return;
    };
    let Ok(out) = client.list_queues().queue_name_prefix(prefix).send().await else {
        eprintln!("cleanup of {prefix}: listing queues failed");
        return;
    };
    for url in out.queue_urls() {
        let _ = client.delete_queue().queue_url(url).send().await;
    }
}
