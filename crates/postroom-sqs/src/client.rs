//! The SQS client, configured from the standard AWS environment (region, credentials,
//! profiles, `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_SQS`), so the same code talks to AWS or to a
//! local endpoint; an endpoint can also be given explicitly. Credentials never come from
//! arguments. HTTPS is rustls on ring (the SDK's default client would build aws-lc from C).

use aws_config::{BehaviorVersion, ConfigLoader, SdkConfig};
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_smithy_http_client::tls;
use postroom_core::{Error, ErrorKind, Result};
use std::time::Duration;

/// Longest wait of one call attempt: above SQS's longest long poll (20 s).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// A config loader with postroom's HTTP client and timeouts, reading the standard AWS
/// environment. Adjust it (a region, a credentials provider) before [`connect`].
#[must_use]
pub fn loader() -> ConfigLoader {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .build(),
        )
}

/// A client from `loader` (see [`loader`]); `endpoint`, when given, replaces the endpoint the
/// environment names. Fails, in words, when no region is configured or the environment has no
/// credentials.
pub async fn connect(loader: ConfigLoader, endpoint: Option<&str>) -> Result<aws_sdk_sqs::Client> {
    let config = loader.load().await;
    let client = client_from(&config, endpoint)?;
    check_credentials(&config).await?;
    Ok(client)
}

/// Resolve the configuration's credentials once, so that an environment without any fails at
/// start-up with what to set, not at the first call with the SDK's account of every provider
/// it asked.
async fn check_credentials(config: &SdkConfig) -> Result<()> {
    use aws_sdk_sqs::config::ProvideCredentials;
    let why = match config.credentials_provider() {
        None => "no credentials provider is configured".to_string(),
        Some(provider) => match provider.provide_credentials().await {
            Ok(_) => return Ok(()),
            Err(e) => e.to_string(),
        },
    };
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "no AWS credentials ({why}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile that has them, or run where an instance or container role provides them"
        ),
    ))
}

/// A client for `endpoint` in `region` (each `None`: what the AWS environment says), with
/// the environment's credentials.
pub async fn connect_to(
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<aws_sdk_sqs::Client> {
    let mut l = loader();
    if let Some(region) = region {
        l = l.region(aws_sdk_sqs::config::Region::new(region.to_string()));
    }
    connect(l, endpoint).await
}

/// A client from the standard AWS environment alone (what a service runs with).
pub async fn from_env() -> Result<aws_sdk_sqs::Client> {
    connect(loader(), None).await
}

/// A client from a loaded SDK configuration.
pub fn client_from(config: &SdkConfig, endpoint: Option<&str>) -> Result<aws_sdk_sqs::Client> {
    if config.region().is_none() {
        return Err(Error::new(
            ErrorKind::Config,
            "no AWS region configured: set AWS_REGION (or a profile with a region)",
        ));
    }
    let mut builder = aws_sdk_sqs::config::Builder::from(config);
    if let Some(url) = endpoint {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the SQS endpoint {} must be an http:// or https:// URL",
                    redact(url)
                ),
            ));
        }
        builder = builder.endpoint_url(url);
    }
    Ok(aws_sdk_sqs::Client::from_conf(builder.build()))
}

/// `url` without a user or password, for logs and errors.
#[must_use]
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{path}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_user_info() {
        assert_eq!(
            redact("http://k:s@127.0.0.1:5000"),
            "http://***@127.0.0.1:5000"
        );
        assert_eq!(
            redact("http://127.0.0.1:5000/a@b"),
            "http://127.0.0.1:5000/a@b"
        );
        assert_eq!(
            redact("https://sqs.eu-west-1.amazonaws.com"),
            "https://sqs.eu-west-1.amazonaws.com"
        );
    }
}
