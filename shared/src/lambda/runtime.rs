//! What the functions tell the Lambda Runtime API themselves. `lambda_runtime` reports
//! invocation errors, but an initialisation that fails before its loop starts (bad
//! environment, no CA store) would only exit the process: Lambda then shows a bare
//! `Runtime.ExitError`. [`report_init_error`] posts the reason to `/runtime/init/error` first,
//! so it reaches the caller (`aws lambda invoke`, `sam local invoke`) and the function's metrics.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::FunctionError;

/// Posts `error` to `http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime/init/error`. Outside
/// Lambda (no `AWS_LAMBDA_RUNTIME_API`) it does nothing. Failing to report is logged, never
/// fatal: the process exits with the error anyway.
pub fn report_init_error(error: &FunctionError) {
    let Some(api) = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return;
    };
    if let Err(e) = post_init_error(&api, error) {
        tracing::error!(error = %e, "could not report the initialisation error to the Runtime API");
    }
}

fn post_init_error(api: &str, error: &FunctionError) -> std::io::Result<u16> {
    let body = serde_json::json!({
        "errorType": error.kind,
        "errorMessage": error.message,
    })
    .to_string();
    let mut s = TcpStream::connect(api)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    // The header carries the type for Lambda's own metrics; it must be one line of ASCII.
    let kind: String = error
        .kind
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
        .collect();
    let req = format!(
        "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nHost: {api}\r\n\
         Lambda-Runtime-Function-Error-Type: {kind}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    // Read the whole answer (the server closes: `Connection: close`): closing with unread bytes
    // resets the connection, and a server that records the error after answering loses it.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(_) if !answer.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    let status = String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if !(200..300).contains(&status) {
        return Err(std::io::Error::other(format!(
            "/runtime/init/error answered {status}"
        )));
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn init_errors_are_posted_with_their_type() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&buf).contains("\"errorMessage\"") {
                let n = c.read(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            c.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            String::from_utf8(buf).unwrap()
        });
        let e = FunctionError::new("ConfigError", "config: DMS2ICEBERG_WAREHOUSE is not set");
        assert_eq!(post_init_error(&addr, &e).unwrap(), 202);
        let req = server.join().unwrap();
        assert!(
            req.starts_with("POST /2018-06-01/runtime/init/error HTTP/1.1\r\n"),
            "{req}"
        );
        assert!(
            req.contains("Lambda-Runtime-Function-Error-Type: ConfigError\r\n"),
            "{req}"
        );
        let body: serde_json::Value =
            serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["errorType"], "ConfigError");
        assert_eq!(
            body["errorMessage"],
            "config: DMS2ICEBERG_WAREHOUSE is not set"
        );
    }
}
