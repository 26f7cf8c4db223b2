//! AWS SigV4 for REST catalog requests (Glue's Iceberg endpoint signs as `glue`, S3 Tables'
//! as `s3tables`), with credentials from the standard chain, fetched per request so rotated
//! credentials (a Lambda's, an assumed role's) are picked up.

use std::time::SystemTime;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;

use crate::error::{Error, Result};

#[derive(Clone)]
pub struct Signer {
    credentials: SharedCredentialsProvider,
    region: String,
    service: String,
}

impl Signer {
    pub fn new(credentials: SharedCredentialsProvider, region: &str, service: &str) -> Signer {
        Signer {
            credentials,
            region: region.to_string(),
            service: service.to_string(),
        }
    }

    /// The region requests are signed for (the table files' region too).
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Adds the signature headers (`authorization`, `x-amz-date`, the session token if any)
    /// to `req`, over its method, URL, headers and body.
    pub async fn sign(&self, req: &mut reqwest::Request) -> Result<()> {
        let creds = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| Error::Config(format!("AWS credentials for SigV4: {e}")))?;
        self.sign_with(req, creds, SystemTime::now())
    }

    fn sign_with(
        &self,
        req: &mut reqwest::Request,
        creds: aws_credential_types::Credentials,
        at: SystemTime,
    ) -> Result<()> {
        let identity = creds.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(at)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| Error::Internal(format!("SigV4 parameters: {e}")))?
            .into();
        let body = req
            .body()
            .and_then(|b| b.as_bytes())
            .unwrap_or_default()
            .to_vec();
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let signable = SignableRequest::new(
            req.method().as_str(),
            req.url().as_str(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(&body),
        )
        .map_err(|e| Error::Internal(format!("SigV4 request: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| Error::Internal(format!("SigV4 signing: {e}")))?
            .into_parts();
        for (name, value) in instructions.headers() {
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|e| Error::Internal(format!("SigV4 header {name}: {e}")))?;
            req.headers_mut().insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| Error::Internal(format!("SigV4 header {name}: {e}")))?,
                value,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_for_the_service_and_region_it_was_given() {
        let creds = aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "secret",
            Some("tok".into()),
            None,
            "test",
        );
        let signer = Signer::new(
            SharedCredentialsProvider::new(creds.clone()),
            "eu-west-1",
            "glue",
        );
        let client = reqwest::Client::new();
        let mut req = client
            .post("https://glue.eu-west-1.amazonaws.com/iceberg/v1/catalogs/123/namespaces")
            .header("content-type", "application/json")
            .body(r#"{"namespace":["sales"]}"#)
            .build()
            .unwrap();
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_796_000_000);
        signer.sign_with(&mut req, creds.clone(), at).unwrap();
        let h = |n: &str| req.headers()[n].to_str().unwrap().to_string();
        let auth = h("authorization");
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261130/eu-west-1/glue/aws4_request"
            ),
            "{auth}"
        );
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{auth}"
        );
        assert_eq!(h("x-amz-date"), "20261130T005320Z");
        assert_eq!(h("x-amz-security-token"), "tok");
        // The signature covers the body: another body, another signature.
        let mut other = client
            .post("https://glue.eu-west-1.amazonaws.com/iceberg/v1/catalogs/123/namespaces")
            .header("content-type", "application/json")
            .body(r#"{"namespace":["other"]}"#)
            .build()
            .unwrap();
        signer.sign_with(&mut other, creds, at).unwrap();
        assert_ne!(
            other.headers()["authorization"],
            req.headers()["authorization"]
        );
    }
}
