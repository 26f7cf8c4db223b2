//! The events the ingest function accepts: S3 notifications, S3 notifications (or EventBridge
//! events) inside SQS messages, and EventBridge "Object Created" events. Each becomes records of
//! (bucket, key) with the SQS message id to report a partial batch failure against.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::locate::decode_event_key;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    S3,
    Sqs,
    EventBridge,
}

/// One record to succeed or fail as a unit (an SQS message, or the whole direct event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// SQS `messageId`.
    pub id: Option<String>,
    pub objects: Vec<S3Ref>,
    /// The record could not be understood: it fails with this reason.
    pub invalid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct S3Ref {
    pub bucket: String,
    /// Decoded key.
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub source: Source,
    pub records: Vec<Record>,
}

pub fn parse(event: &Value) -> Result<Invocation> {
    if let Some(records) = event.get("Records").and_then(Value::as_array) {
        let is_sqs = records
            .iter()
            .any(|r| r.get("eventSource").and_then(Value::as_str) == Some("aws:sqs"));
        if is_sqs {
            let records = records
                .iter()
                .map(|r| {
                    let id = r
                        .get("messageId")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    let body = r.get("body").and_then(Value::as_str).unwrap_or_default();
                    match serde_json::from_str::<Value>(body)
                        .map_err(|e| Error::Other(format!("SQS body is not JSON: {e}")))
                        .and_then(|b| objects_of(&b))
                    {
                        Ok(objects) => Record {
                            id,
                            objects,
                            invalid: None,
                        },
                        Err(e) => Record {
                            id,
                            objects: vec![],
                            invalid: Some(e.to_string()),
                        },
                    }
                })
                .collect();
            return Ok(Invocation {
                source: Source::Sqs,
                records,
            });
        }
        return Ok(Invocation {
            source: Source::S3,
            records: vec![Record {
                id: None,
                objects: objects_of(event)?,
                invalid: None,
            }],
        });
    }
    if event.get("detail-type").is_some() {
        return Ok(Invocation {
            source: Source::EventBridge,
            records: vec![Record {
                id: None,
                objects: objects_of(event)?,
                invalid: None,
            }],
        });
    }
    if is_test_event(event) {
        return Ok(Invocation {
            source: Source::S3,
            records: vec![],
        });
    }
    Err(Error::Other(format!(
        "unrecognised event (expected an S3 notification, SQS or EventBridge event): {}",
        truncate(&event.to_string())
    )))
}

/// The objects an S3 notification or EventBridge event names. `s3:TestEvent` has none.
fn objects_of(v: &Value) -> Result<Vec<S3Ref>> {
    if is_test_event(v) {
        return Ok(vec![]);
    }
    if let Some(records) = v.get("Records").and_then(Value::as_array) {
        let mut out = Vec::new();
        for r in records {
            let name = r
                .get("eventName")
                .and_then(Value::as_str)
                .unwrap_or("ObjectCreated:");
            if !name.starts_with("ObjectCreated:") {
                continue;
            }
            let s3 = r
                .get("s3")
                .ok_or_else(|| Error::Other("S3 record without `s3`".into()))?;
            let bucket = s3.pointer("/bucket/name").and_then(Value::as_str);
            let key = s3.pointer("/object/key").and_then(Value::as_str);
            match (bucket, key) {
                // Notification keys are URL-encoded (`+` for space).
                (Some(b), Some(k)) => out.push(S3Ref {
                    bucket: b.to_string(),
                    key: decode_event_key(k)?,
                }),
                _ => {
                    return Err(Error::Other(
                        "S3 record without bucket name or object key".into(),
                    ));
                }
            }
        }
        return Ok(out);
    }
    if let Some(detail_type) = v.get("detail-type").and_then(Value::as_str) {
        if detail_type != "Object Created" {
            return Ok(vec![]);
        }
        let bucket = v.pointer("/detail/bucket/name").and_then(Value::as_str);
        let key = v.pointer("/detail/object/key").and_then(Value::as_str);
        return match (bucket, key) {
            // AWS does not say whether EventBridge keys are URL-encoded (emulators encode them).
            // Decoding is safe either way for DMS keys: table names cannot hold `%` or `+`.
            (Some(b), Some(k)) => Ok(vec![S3Ref {
                bucket: b.to_string(),
                key: decode_event_key(k).unwrap_or_else(|_| k.to_string()),
            }]),
            _ => Err(Error::Other(
                "EventBridge event without detail.bucket.name / detail.object.key".into(),
            )),
        };
    }
    Err(Error::Other(format!(
        "not an S3 or EventBridge event: {}",
        truncate(&v.to_string())
    )))
}

fn is_test_event(v: &Value) -> bool {
    v.get("Event").and_then(Value::as_str) == Some("s3:TestEvent")
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s3_event(key: &str) -> Value {
        json!({"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
            "s3": {"bucket": {"name": "landing"}, "object": {"key": key, "size": 10}}}]})
    }

    #[test]
    fn direct_s3_notification_keys_are_decoded() {
        let inv = parse(&s3_event("dms/my+schema/t/LOAD00000001.csv")).unwrap();
        assert_eq!(inv.source, Source::S3);
        assert_eq!(
            inv.records[0].objects[0].key,
            "dms/my schema/t/LOAD00000001.csv"
        );
    }

    #[test]
    fn sqs_wraps_s3_and_eventbridge_and_bad_bodies() {
        let eb = json!({"detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/t/20220302-1134010000.csv"}}});
        let ev = json!({"Records": [
            {"messageId": "m1", "eventSource": "aws:sqs", "body": s3_event("dms/s/t/LOAD00000001.csv").to_string()},
            {"messageId": "m2", "eventSource": "aws:sqs", "body": eb.to_string()},
            {"messageId": "m3", "eventSource": "aws:sqs", "body": "not json"},
            {"messageId": "m4", "eventSource": "aws:sqs", "body": json!({"Service": "Amazon S3", "Event": "s3:TestEvent"}).to_string()},
        ]});
        let inv = parse(&ev).unwrap();
        assert_eq!(inv.source, Source::Sqs);
        assert_eq!(inv.records[0].objects[0].key, "dms/s/t/LOAD00000001.csv");
        assert_eq!(inv.records[1].objects[0].bucket, "b");
        assert!(inv.records[2].invalid.is_some());
        assert!(inv.records[3].objects.is_empty() && inv.records[3].invalid.is_none());
    }

    #[test]
    fn eventbridge_and_test_events() {
        let eb = json!({"detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/t/a+b.csv"}}});
        let inv = parse(&eb).unwrap();
        assert_eq!(inv.source, Source::EventBridge);
        assert_eq!(inv.records[0].objects[0].key, "dms/s/t/a b.csv");
        assert!(
            parse(&json!({"Service": "Amazon S3", "Event": "s3:TestEvent"}))
                .unwrap()
                .records
                .is_empty()
        );
        assert!(parse(&json!({"hello": 1})).is_err());
    }
}
