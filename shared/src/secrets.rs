//! Secrets Manager: what must not sit in a function's environment in clear (a REST catalog's
//! bearer token, an OAuth2 client secret) is read from a secret once, when the process starts.
//!
//! One call of Secrets Manager's JSON API (`GetSecretValue`), signed with SigV4 (service
//! `secretsmanager`) by the signer the REST catalog uses, with the process's AWS credentials;
//! no SDK client for one request. The endpoint is the secret's region's (its ARN names it; a
//! name alone takes the environment's region), or `AWS_ENDPOINT_URL_SECRETS_MANAGER`, else
//! `AWS_ENDPOINT_URL` (an emulator), as the AWS SDKs read them.
//!
//! A secret's value never reaches a log or an error message: errors name the secret (its ARN or
//! name), the request and what the service answered, and what shape the value should have.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::catalog::SigV4Signer;

/// Why a secret could not be read or used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretError {
    /// Secrets Manager answered with an error (`ResourceNotFoundException`,
    /// `AccessDeniedException`, `DecryptionFailure`, …).
    #[error("secret `{id}`: Secrets Manager GetSecretValue answered {status}: {code}: {message}")]
    Refused {
        id: String,
        status: u16,
        code: String,
        message: String,
    },
    /// No answer (connection refused, timeout), after the retries.
    #[error("secret `{id}`: no answer from Secrets Manager at {endpoint}: {reason}")]
    NoAnswer {
        id: String,
        endpoint: String,
        reason: String,
    },
    /// Where to send the request or how to sign it is not known.
    #[error("secret `{id}`: {reason}")]
    Setup { id: String, reason: String },
    /// The answer, or the value in it, is not what it must be (the value itself left out).
    #[error("secret `{id}`: {reason}")]
    Value { id: String, reason: String },
}

impl From<SecretError> for crate::error::Error {
    fn from(e: SecretError) -> Self {
        // Read when the process starts, for its configuration: a missing or unreadable secret
        // is the environment's problem, reported as such (`ConfigError`).
        crate::error::Error::Config(e.to_string())
    }
}

type Result<T> = std::result::Result<T, SecretError>;

/// Requests that got no answer in this long are retried (the process is starting: a Lambda's
/// initialisation has ten seconds).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts of one `GetSecretValue` (throttling, a 5xx or no answer are retried).
const ATTEMPTS: u32 = 3;

/// A Secrets Manager endpoint and the signer for it.
pub(crate) struct SecretsManager {
    http: reqwest::Client,
    signer: SigV4Signer,
    endpoint: String,
}

#[derive(Deserialize)]
struct GetSecretValueResponse {
    #[serde(rename = "SecretString")]
    secret_string: Option<String>,
    #[serde(rename = "SecretBinary")]
    secret_binary: Option<String>,
}

impl SecretsManager {
    /// The endpoint for `secret_id` ([`endpoint`]) and a signer with the environment's AWS
    /// credentials.
    pub(crate) async fn for_secret(secret_id: &str) -> Result<SecretsManager> {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .load()
            .await;
        let setup = |reason: &str| SecretError::Setup {
            id: secret_id.to_string(),
            reason: reason.to_string(),
        };
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| setup("no AWS credentials provider in this environment"))?;
        let env_region = sdk.region().map(|r| r.to_string());
        let override_url =
            env_var("AWS_ENDPOINT_URL_SECRETS_MANAGER").or_else(|| env_var("AWS_ENDPOINT_URL"));
        let (region, endpoint) = endpoint(secret_id, env_region.as_deref(), override_url)?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| setup(&format!("HTTP client: {e}")))?;
        Ok(SecretsManager {
            http,
            signer: SigV4Signer::new(credentials, &region, "secretsmanager"),
            endpoint,
        })
    }

    /// The secret's current value: its `SecretString`, or its `SecretBinary` as UTF-8 text.
    pub(crate) async fn get_secret_value(&self, secret_id: &str) -> Result<String> {
        let body = serde_json::json!({ "SecretId": secret_id }).to_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let retry = match self.send(secret_id, &body).await {
                Ok(value) => return Ok(value),
                Err(e) if attempt < ATTEMPTS && retryable(&e) => e,
                Err(e) => return Err(e),
            };
            tracing::warn!(
                secret = %secret_id,
                attempt,
                error = %retry,
                "Secrets Manager GetSecretValue failed; retrying"
            );
            tokio::time::sleep(Duration::from_millis(200 * 4u64.pow(attempt - 1))).await;
        }
    }

    async fn send(&self, secret_id: &str, body: &str) -> Result<String> {
        let mut req = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", "secretsmanager.GetSecretValue")
            .body(body.to_string())
            .build()
            .map_err(|e| SecretError::Setup {
                id: secret_id.to_string(),
                reason: format!("request to {}: {e}", self.endpoint),
            })?;
        self.signer
            .sign(&mut req)
            .await
            .map_err(|e| SecretError::Setup {
                id: secret_id.to_string(),
                reason: format!("signing the request: {e}"),
            })?;
        let no_answer = |e: reqwest::Error| SecretError::NoAnswer {
            id: secret_id.to_string(),
            endpoint: self.endpoint.clone(),
            reason: e.to_string(),
        };
        let resp = self.http.execute(req).await.map_err(no_answer)?;
        let status = resp.status();
        let header_code = resp
            .headers()
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = resp.bytes().await.map_err(no_answer)?;
        if !status.is_success() {
            let (code, message) = error_of(&bytes, header_code);
            return Err(SecretError::Refused {
                id: secret_id.to_string(),
                status: status.as_u16(),
                code,
                message,
            });
        }
        value_of(secret_id, &bytes)
    }
}

/// The region to sign for and the endpoint to call for `secret_id`: an ARN's region and
/// partition, else the environment's region; `override_url` (an emulator, a VPC endpoint) is
/// called instead of the public endpoint when set.
fn endpoint(
    secret_id: &str,
    env_region: Option<&str>,
    override_url: Option<String>,
) -> Result<(String, String)> {
    let setup = |reason: String| SecretError::Setup {
        id: secret_id.to_string(),
        reason,
    };
    // arn:<partition>:secretsmanager:<region>:<account>:secret:<name>
    let from_arn = secret_id.strip_prefix("arn:").map(|rest| {
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        (
            parts.first().copied(),
            parts.get(1).copied(),
            parts.get(2).copied(),
        )
    });
    let (partition, region) = match from_arn {
        Some((Some(partition), Some("secretsmanager"), Some(region))) if !region.is_empty() => {
            (Some(partition), region.to_string())
        }
        Some(_) => {
            return Err(setup(
                "not a Secrets Manager ARN (arn:<partition>:secretsmanager:<region>:<account>:secret:<name>)"
                    .into(),
            ));
        }
        None => match env_region {
            Some(r) => (None, r.to_string()),
            None => {
                return Err(setup(
                    "a secret named without its ARN needs a region: set AWS_REGION (or give the ARN)"
                        .into(),
                ));
            }
        },
    };
    if let Some(url) = override_url {
        return Ok((region, url));
    }
    let suffix = match partition {
        Some("aws" | "aws-us-gov") => "amazonaws.com",
        Some("aws-cn") => "amazonaws.com.cn",
        Some(other) => {
            return Err(setup(format!(
                "partition `{other}`: set AWS_ENDPOINT_URL_SECRETS_MANAGER to its Secrets Manager endpoint"
            )));
        }
        None if region.starts_with("cn-") => "amazonaws.com.cn",
        None => "amazonaws.com",
    };
    Ok((
        region.clone(),
        format!("https://secretsmanager.{region}.{suffix}"),
    ))
}

/// The value in a `GetSecretValue` answer.
fn value_of(secret_id: &str, body: &[u8]) -> Result<String> {
    let bad = |reason: &str| SecretError::Value {
        id: secret_id.to_string(),
        reason: reason.to_string(),
    };
    let r: GetSecretValueResponse = serde_json::from_slice(body)
        .map_err(|_| bad("Secrets Manager's answer is not the JSON of GetSecretValue"))?;
    match (r.secret_string, r.secret_binary) {
        (Some(s), _) => Ok(s),
        (None, Some(b64)) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|_| bad("its SecretBinary is not base64"))?;
            String::from_utf8(bytes).map_err(|_| bad("its SecretBinary is not UTF-8 text"))
        }
        (None, None) => Err(bad(
            "the answer holds neither SecretString nor SecretBinary",
        )),
    }
}

/// The error code (the type's last `#` part) and message of a JSON API error answer.
fn error_of(body: &[u8], header_code: Option<String>) -> (String, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let code = v["__type"]
        .as_str()
        .map(str::to_string)
        .or(header_code)
        .unwrap_or_else(|| "UnknownError".into());
    let code = code
        .rsplit('#')
        .next()
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let message = v["message"]
        .as_str()
        .or(v["Message"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect());
    (code, message)
}

/// Throttling, a server error or no answer: worth another attempt.
fn retryable(e: &SecretError) -> bool {
    match e {
        SecretError::NoAnswer { .. } => true,
        SecretError::Refused { status, code, .. } => {
            *status >= 500
                || *status == 429
                || code.contains("Throttling")
                || code == "RequestLimitExceeded"
                || code == "InternalServiceError"
        }
        SecretError::Setup { .. } | SecretError::Value { .. } => false,
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A bearer token from a secret's value: the value itself (surrounding whitespace dropped), or
/// the `token` of a JSON object.
pub(crate) fn bearer_token(secret_id: &str, value: &str) -> Result<String> {
    let bad = |reason: &str| SecretError::Value {
        id: secret_id.to_string(),
        reason: reason.to_string(),
    };
    let token = match json_object(value) {
        Some(o) => o
            .get("token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad("its JSON has no string `token` (or store the token alone)"))?,
        None => value.to_string(),
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(bad("the bearer token in it is empty"));
    }
    // A header cannot carry control characters: refused here, not as an HTTP client error.
    if token.chars().any(|c| c.is_control()) {
        return Err(bad(
            "the bearer token in it holds control characters (line breaks?)",
        ));
    }
    Ok(token)
}

/// OAuth2 client credentials from a secret's value: `client_id:client_secret`, or a JSON object
/// with `client_id` and `client_secret`.
pub(crate) fn client_credential(secret_id: &str, value: &str) -> Result<(String, String)> {
    let bad = |reason: &str| SecretError::Value {
        id: secret_id.to_string(),
        reason: reason.to_string(),
    };
    let (id, secret) = match json_object(value) {
        Some(o) => {
            let field = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
            match (field("client_id"), field("client_secret")) {
                (Some(id), Some(secret)) => (id, secret),
                _ => {
                    return Err(bad(
                        "its JSON needs string `client_id` and `client_secret` (or store client_id:client_secret)",
                    ));
                }
            }
        }
        None => {
            let (id, secret) = value.trim().split_once(':').ok_or_else(|| {
                bad("it holds neither client_id:client_secret nor JSON with client_id and client_secret")
            })?;
            (id.to_string(), secret.to_string())
        }
    };
    if id.trim().is_empty() || secret.is_empty() {
        return Err(bad("its client_id or client_secret is empty"));
    }
    Ok((id.trim().to_string(), secret))
}

/// `value` as a JSON object, if it is one.
fn json_object(value: &str) -> Option<serde_json::Map<String, Value>> {
    if !value.trim_start().starts_with('{') {
        return None;
    }
    match serde_json::from_str(value) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rest/token-AbCdEf";

    #[test]
    fn the_endpoint_is_the_secrets_region_and_partition() {
        assert_eq!(
            endpoint(ARN, Some("us-east-1"), None).unwrap(),
            (
                "eu-west-1".to_string(),
                "https://secretsmanager.eu-west-1.amazonaws.com".to_string()
            )
        );
        let cn = "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:t-AbCdEf";
        assert_eq!(
            endpoint(cn, None, None).unwrap().1,
            "https://secretsmanager.cn-north-1.amazonaws.com.cn"
        );
        // A name: the environment's region.
        assert_eq!(
            endpoint("rest/token", Some("ap-south-1"), None).unwrap(),
            (
                "ap-south-1".to_string(),
                "https://secretsmanager.ap-south-1.amazonaws.com".to_string()
            )
        );
        // An emulator or VPC endpoint: called instead, signed for the secret's region.
        assert_eq!(
            endpoint(ARN, None, Some("http://127.0.0.1:5000".into())).unwrap(),
            ("eu-west-1".to_string(), "http://127.0.0.1:5000".to_string())
        );
        for (id, region, why) in [
            ("rest/token", None, "AWS_REGION"),
            (
                "arn:aws:s3:::bucket/key",
                Some("us-east-1"),
                "not a Secrets Manager ARN",
            ),
            (
                "arn:aws-iso:secretsmanager:us-iso-east-1:1:secret:x-AbCdEf",
                None,
                "AWS_ENDPOINT_URL_SECRETS_MANAGER",
            ),
        ] {
            let e = endpoint(id, region, None).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(id), "{e}");
        }
    }

    #[test]
    fn the_value_is_the_string_or_the_binary_as_text() {
        assert_eq!(
            value_of(ARN, br#"{"ARN":"x","SecretString":"tok"}"#).unwrap(),
            "tok"
        );
        // base64("id:s3cret")
        assert_eq!(
            value_of(ARN, br#"{"SecretBinary":"aWQ6czNjcmV0"}"#).unwrap(),
            "id:s3cret"
        );
        for body in [
            &br#"{"Name":"x"}"#[..],
            b"<html>",
            br#"{"SecretBinary":"%%"}"#,
        ] {
            assert!(value_of(ARN, body).is_err());
        }
    }

    #[test]
    fn errors_name_the_code_and_message() {
        let (code, msg) = error_of(
            br#"{"__type":"com.amazonaws.secretsmanager#ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}"#,
            None,
        );
        assert_eq!(code, "ResourceNotFoundException");
        assert!(msg.contains("can't find"));
        let (code, _) = error_of(b"", Some("AccessDeniedException:http://x".into()));
        assert_eq!(code, "AccessDeniedException");
        let refused = |status, code: &str| SecretError::Refused {
            id: ARN.into(),
            status,
            code: code.into(),
            message: String::new(),
        };
        assert!(retryable(&refused(400, "ThrottlingException")));
        assert!(retryable(&refused(500, "InternalServiceError")));
        assert!(!retryable(&refused(400, "ResourceNotFoundException")));
        assert!(!retryable(&refused(400, "AccessDeniedException")));
    }

    #[test]
    fn tokens_and_credentials_in_both_shapes_and_never_in_an_error() {
        assert_eq!(bearer_token(ARN, "abc.def\n").unwrap(), "abc.def");
        assert_eq!(bearer_token(ARN, r#"{"token": "abc"}"#).unwrap(), "abc");
        assert_eq!(
            client_credential(ARN, "id:s3:cret").unwrap(),
            ("id".to_string(), "s3:cret".to_string())
        );
        assert_eq!(
            client_credential(ARN, r#"{"client_id":"id","client_secret":"s3cret"}"#).unwrap(),
            ("id".to_string(), "s3cret".to_string())
        );
        let secret = "hunter2-do-not-print";
        for e in [
            bearer_token(ARN, &format!(r#"{{"access":"{secret}"}}"#)).unwrap_err(),
            bearer_token(ARN, &format!("{secret}\nmore")).unwrap_err(),
            bearer_token(ARN, "  ").unwrap_err(),
            client_credential(ARN, secret).unwrap_err(),
            client_credential(ARN, &format!(r#"{{"client_id":"{secret}"}}"#)).unwrap_err(),
            client_credential(ARN, &format!(":{secret}")).unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(!text.contains(secret) && text.contains(ARN), "{text}");
            assert_eq!(crate::error::Error::from(e).kind(), "ConfigError");
        }
    }
}
