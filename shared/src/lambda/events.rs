//! The events the functions accept, typed with `aws_lambda_events`:
//!
//! - ingest: an S3 notification ([`S3Event`]), an SQS batch ([`SqsEvent`]) whose message bodies
//!   are S3 notifications or EventBridge "Object Created" / "Object Deleted" events, or such an
//!   EventBridge event ([`EventBridgeEvent`]) invoked directly; `s3:TestEvent` (sent when a
//!   notification is configured) names nothing. Deletions (`ObjectRemoved:*`, "Object Deleted"
//!   with reason `DeleteObject`) are named with their time: DMS deletes a table's objects when
//!   the source table is truncated or dropped. Lifecycle expirations
//!   (`LifecycleExpiration:*`, reason `Lifecycle Expiration`) name nothing: they never change a
//!   table.
//! - compact: an EventBridge "Scheduled Event"; any other payload also means "run now".
//!
//! [`IngestEvent`] deserializes from any JSON: which shape it is, is decided by its
//! discriminating fields (`eventSource`, `detail-type`, `Event`), and a payload of none of these
//! shapes is kept as [`IngestEvent::Unrecognised`] so the handler fails it with an `InputError`
//! naming what it got (a serde error would reach Lambda as an opaque runtime error).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::s3::S3Event;
use aws_lambda_events::sqs::SqsEvent;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::locate::decode_event_key;

/// The `detail` of an S3 EventBridge event (`aws.s3`, e.g. "Object Created").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3EventDetail {
    pub bucket: S3DetailBucket,
    pub object: S3DetailObject,
    /// "Object Deleted": `DeleteObject` (a client's delete, as DMS's) or `Lifecycle Expiration`.
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3DetailBucket {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3DetailObject {
    pub key: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub etag: Option<String>,
}

/// What an ingest invocation receives.
#[derive(Debug, Clone, PartialEq)]
pub enum IngestEvent {
    S3(S3Event),
    Sqs(SqsEvent),
    EventBridge(Box<EventBridgeEvent<S3EventDetail>>),
    /// `s3:TestEvent`: S3 checking the notification target; nothing to do.
    Test,
    /// None of the shapes above (the reason, with the start of the payload).
    Unrecognised(String),
}

impl<'de> Deserialize<'de> for IngestEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(IngestEvent::from_value(Value::deserialize(d)?))
    }
}

impl IngestEvent {
    pub fn from_value(v: Value) -> IngestEvent {
        let is_sqs = v.get("Records").and_then(Value::as_array).is_some_and(|r| {
            r.iter()
                .any(|r| r.get("eventSource").and_then(Value::as_str) == Some("aws:sqs"))
        });
        if is_sqs {
            return match serde_json::from_value::<SqsEvent>(v) {
                Ok(e) => IngestEvent::Sqs(e),
                Err(e) => IngestEvent::Unrecognised(format!("not an SQS event: {e}")),
            };
        }
        match Body::from_value(v) {
            Body::S3(e) => IngestEvent::S3(e),
            Body::EventBridge(e) => IngestEvent::EventBridge(e),
            Body::Test => IngestEvent::Test,
            Body::Invalid(reason) => IngestEvent::Unrecognised(reason),
        }
    }

    /// The records to succeed or fail one by one: each SQS message, or the whole direct event.
    pub fn records(&self) -> Result<Vec<Record>> {
        match self {
            IngestEvent::S3(e) => Ok(vec![Record::direct(objects_of_s3(e))]),
            IngestEvent::EventBridge(e) => Ok(vec![Record::direct(objects_of_eventbridge(e))]),
            IngestEvent::Test => Ok(vec![]),
            IngestEvent::Sqs(e) => Ok(e
                .records
                .iter()
                .map(|m| {
                    let body = m.body.as_deref().unwrap_or_default();
                    let objects = match serde_json::from_str::<Value>(body) {
                        Err(e) => Err(format!("SQS body is not JSON: {e}")),
                        Ok(v) => match Body::from_value(v) {
                            Body::S3(e) => objects_of_s3(&e).map_err(|e| e.to_string()),
                            Body::EventBridge(e) => {
                                objects_of_eventbridge(&e).map_err(|e| e.to_string())
                            }
                            Body::Test => Ok(vec![]),
                            Body::Invalid(reason) => Err(reason),
                        },
                    };
                    let (objects, invalid) = match objects {
                        Ok(o) => (o, None),
                        Err(reason) => (vec![], Some(reason)),
                    };
                    Record {
                        id: m.message_id.clone(),
                        body: m.body.clone(),
                        objects,
                        invalid,
                    }
                })
                .collect()),
            IngestEvent::Unrecognised(reason) => Err(Error::Input(Box::new(
                crate::error::InputError::new("the invocation's event", reason.clone()),
            ))),
        }
    }

    pub fn is_sqs(&self) -> bool {
        matches!(self, IngestEvent::Sqs(_))
    }
}

/// A direct event or an SQS message body.
enum Body {
    S3(S3Event),
    EventBridge(Box<EventBridgeEvent<S3EventDetail>>),
    Test,
    Invalid(String),
}

impl Body {
    fn from_value(v: Value) -> Body {
        if v.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
            return Body::Test;
        }
        if v.get("Records").is_some() {
            return match serde_json::from_value::<S3Event>(v) {
                Ok(e) => Body::S3(e),
                Err(e) => Body::Invalid(format!("not an S3 notification: {e}")),
            };
        }
        if let Some(dt) = v
            .get("detail-type")
            .and_then(Value::as_str)
            .map(str::to_string)
        {
            // Other EventBridge events (another rule's) have no S3 object: nothing to do.
            if dt != "Object Created" && dt != "Object Deleted" {
                let mut e = EventBridgeEvent::<S3EventDetail>::default();
                e.detail_type = dt.to_string();
                return Body::EventBridge(Box::new(e));
            }
            return match serde_json::from_value::<EventBridgeEvent<S3EventDetail>>(v) {
                Ok(e) => Body::EventBridge(Box::new(e)),
                Err(e) => Body::Invalid(format!("not an S3 \"{dt}\" event: {e}")),
            };
        }
        Body::Invalid(format!(
            "unrecognised event (expected an S3 notification, SQS or EventBridge event): {}",
            truncate(&v.to_string())
        ))
    }
}

/// One record to succeed or fail as a unit (an SQS message, or the whole direct event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// SQS `messageId`.
    pub id: Option<String>,
    /// The SQS message body as received (what goes to the dead-letter queue).
    pub body: Option<String>,
    pub objects: Vec<S3Ref>,
    /// The record could not be understood: it fails with this reason.
    pub invalid: Option<String>,
}

impl Record {
    fn direct(objects: Result<Vec<S3Ref>>) -> Record {
        match objects {
            Ok(objects) => Record {
                id: None,
                body: None,
                objects,
                invalid: None,
            },
            Err(e) => Record {
                id: None,
                body: None,
                objects: vec![],
                invalid: Some(e.to_string()),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct S3Ref {
    pub bucket: String,
    /// Decoded key.
    pub key: String,
    /// A deletion by a client (DMS on a truncate or drop, or an operator), at this time (epoch
    /// ms); `None`: the object was created.
    pub deleted_ms: Option<i64>,
}

/// The objects an S3 notification names: created ones, and deleted ones (not by lifecycle).
fn objects_of_s3(e: &S3Event) -> Result<Vec<S3Ref>> {
    let mut out = Vec::new();
    for r in &e.records {
        let name = r.event_name.as_deref().unwrap_or("ObjectCreated:");
        let deleted_ms = if name.starts_with("ObjectCreated:") {
            None
        } else if name.starts_with("ObjectRemoved:") {
            Some(r.event_time.timestamp_millis())
        } else {
            // LifecycleExpiration:*, and anything else: not DMS's doing.
            continue;
        };
        match (&r.s3.bucket.name, &r.s3.object.key) {
            // Notification keys are URL-encoded (`+` for space).
            (Some(b), Some(k)) => out.push(S3Ref {
                bucket: b.clone(),
                key: decode_event_key(k)?,
                deleted_ms,
            }),
            _ => {
                return Err(Error::Input(Box::new(crate::error::InputError::new(
                    "the invocation's event",
                    "S3 record without bucket name or object key",
                ))));
            }
        }
    }
    Ok(out)
}

fn objects_of_eventbridge(e: &EventBridgeEvent<S3EventDetail>) -> Result<Vec<S3Ref>> {
    let deleted_ms = match e.detail_type.as_str() {
        "Object Created" => None,
        // A client's delete (DMS on a truncate); never a lifecycle expiration.
        "Object Deleted" if e.detail.reason.as_deref() != Some("Lifecycle Expiration") => {
            Some(e.time.map_or_else(
                || chrono::Utc::now().timestamp_millis(),
                |t| t.timestamp_millis(),
            ))
        }
        _ => return Ok(vec![]),
    };
    let d = &e.detail;
    if d.bucket.name.is_empty() || d.object.key.is_empty() {
        return Err(Error::Input(Box::new(crate::error::InputError::new(
            "the invocation's event",
            "EventBridge event without detail.bucket.name / detail.object.key",
        ))));
    }
    // AWS does not say whether EventBridge keys are URL-encoded (emulators encode them): decoded
    // as S3 notifications are. Only a table name holding `+` or `%` could tell the difference.
    let key = decode_event_key(&d.object.key).unwrap_or_else(|_| d.object.key.clone());
    Ok(vec![S3Ref {
        bucket: d.bucket.name.clone(),
        key,
        deleted_ms,
    }])
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

/// What a compaction invocation receives: a scheduled EventBridge event, or anything (an
/// on-demand `aws lambda invoke` with `{}`): every payload means "run a pass now". A payload
/// with `"tasks": ["compact", "expire", "orphans"]` (the template's schedules set it) runs
/// those only; any other runs all three. `"tasks": ["repair"]` judges every table whole and
/// repairs the damaged ones (every pass repairs a table whose current metadata is missing).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompactEvent {
    /// The schedule's event, when it is one.
    pub schedule: Option<EventBridgeEvent>,
    /// The tasks named, if any.
    pub tasks: Option<Vec<String>>,
}

impl CompactEvent {
    /// Whether the pass runs `task`.
    pub fn runs(&self, task: &str) -> bool {
        self.tasks
            .as_ref()
            .is_none_or(|t| t.iter().any(|x| x == task))
    }

    /// Whether the event names `task` itself (a task no pass runs unasked: `repair`).
    pub fn names(&self, task: &str) -> bool {
        self.tasks
            .as_ref()
            .is_some_and(|t| t.iter().any(|x| x == task))
    }
}

impl<'de> Deserialize<'de> for CompactEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let tasks = v.get("tasks").and_then(|t| {
            t.as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
        });
        Ok(CompactEvent {
            schedule: serde_json::from_value(v).ok(),
            tasks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s3_event(key: &str) -> Value {
        json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventTime": "2022-03-02T11:34:03.127Z", "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:X"}, "requestParameters": {"sourceIPAddress": "10.0.0.1"},
            "responseElements": {},
            "s3": {"bucket": {"name": "landing"}, "object": {"key": key, "size": 10}}}]})
    }

    fn parse(v: Value) -> IngestEvent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn direct_s3_notification_keys_are_decoded() {
        let ev = parse(s3_event("dms/my+schema/t/LOAD00000001.csv"));
        assert!(matches!(ev, IngestEvent::S3(_)));
        assert_eq!(
            ev.records().unwrap()[0].objects[0].key,
            "dms/my schema/t/LOAD00000001.csv"
        );
    }

    #[test]
    fn sqs_wraps_s3_and_eventbridge_and_bad_bodies() {
        let eb = json!({"detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/t/20220302-1134010000.csv"}}});
        let ev = parse(json!({"Records": [
            {"messageId": "m1", "eventSource": "aws:sqs", "body": s3_event("dms/s/t/LOAD00000001.csv").to_string()},
            {"messageId": "m2", "eventSource": "aws:sqs", "body": eb.to_string()},
            {"messageId": "m3", "eventSource": "aws:sqs", "body": "not json"},
            {"messageId": "m4", "eventSource": "aws:sqs", "body": json!({"Service": "Amazon S3", "Event": "s3:TestEvent"}).to_string()},
            {"messageId": "m5", "eventSource": "aws:sqs", "body": json!({"Records": [{"s3": {}}]}).to_string()},
        ]}));
        assert!(ev.is_sqs());
        let r = ev.records().unwrap();
        assert_eq!(r[0].objects[0].key, "dms/s/t/LOAD00000001.csv");
        assert_eq!(r[0].id.as_deref(), Some("m1"));
        assert_eq!(r[1].objects[0].bucket, "b");
        assert!(r[2].invalid.as_deref().unwrap().contains("not JSON"));
        assert!(r[3].objects.is_empty() && r[3].invalid.is_none());
        assert!(
            r[4].invalid
                .as_deref()
                .unwrap()
                .contains("not an S3 notification"),
            "{r:?}"
        );
    }

    #[test]
    fn eventbridge_and_test_events() {
        let eb = json!({"detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/order line$items/a.csv"}}});
        let ev = parse(eb);
        assert!(matches!(ev, IngestEvent::EventBridge(_)));
        assert_eq!(
            ev.records().unwrap()[0].objects[0].key,
            "dms/s/order line$items/a.csv",
            "a key without escapes is kept as is"
        );
        let enc = json!({"detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/order%20line%24items/a.csv"}}});
        assert_eq!(
            parse(enc).records().unwrap()[0].objects[0].key,
            "dms/s/order line$items/a.csv"
        );
        assert!(
            parse(json!({"Service": "Amazon S3", "Event": "s3:TestEvent"}))
                .records()
                .unwrap()
                .is_empty()
        );
        let e = parse(json!({"hello": 1})).records().unwrap_err();
        assert_eq!(e.kind(), "InputError");
        assert!(e.to_string().contains("unrecognised event"), "{e}");
        let other = parse(
            json!({"detail-type": "Object Restore Completed", "source": "aws.s3", "detail": {}}),
        );
        assert!(other.records().unwrap()[0].objects.is_empty());
    }

    /// Deletions are named with their time (DMS deletes a table's objects on a truncate);
    /// lifecycle expirations name nothing, in both event shapes.
    #[test]
    fn deletions_by_clients_are_named_and_lifecycle_expirations_are_not() {
        let deleted = |reason: &str| {
            json!({"detail-type": "Object Deleted", "source": "aws.s3",
                "time": "2022-03-02T11:34:03Z",
                "detail": {"bucket": {"name": "b"}, "object": {"key": "dms/s/t/LOAD00000001.csv"},
                           "reason": reason, "deletion-type": "Permanently Deleted"}})
        };
        let r = parse(deleted("DeleteObject")).records().unwrap();
        assert_eq!(r[0].objects[0].key, "dms/s/t/LOAD00000001.csv");
        assert_eq!(r[0].objects[0].deleted_ms, Some(1_646_220_843_000));
        let r = parse(deleted("Lifecycle Expiration")).records().unwrap();
        assert!(r[0].objects.is_empty() && r[0].invalid.is_none(), "{r:?}");
        for (name, named) in [
            ("ObjectRemoved:Delete", true),
            ("ObjectRemoved:DeleteMarkerCreated", true),
            ("LifecycleExpiration:Delete", false),
            ("LifecycleExpiration:DeleteMarkerCreated", false),
        ] {
            let mut v = s3_event("dms/s/t/20220302-1134010000.csv");
            v["Records"][0]["eventName"] = json!(name);
            let r = parse(v).records().unwrap();
            assert_eq!(r[0].objects.len(), named as usize, "{name}");
            if named {
                assert_eq!(
                    r[0].objects[0].deleted_ms,
                    Some(1_646_220_843_127),
                    "{name}"
                );
            }
        }
        let created = parse(s3_event("dms/s/t/LOAD00000001.csv"))
            .records()
            .unwrap();
        assert_eq!(created[0].objects[0].deleted_ms, None);
    }

    #[test]
    fn compaction_takes_any_payload() {
        let s: CompactEvent = serde_json::from_value(json!({"detail-type": "Scheduled Event",
            "source": "aws.events", "detail": {}}))
        .unwrap();
        assert_eq!(s.schedule.unwrap().detail_type, "Scheduled Event");
        let any: CompactEvent = serde_json::from_value(json!({})).unwrap();
        assert!(any.schedule.is_none());
        assert!(any.runs("compact") && any.runs("expire") && any.runs("orphans"));
        let some: CompactEvent = serde_json::from_value(json!({"tasks": ["compact"]})).unwrap();
        assert!(some.runs("compact") && !some.runs("expire") && !some.runs("orphans"));
    }
}
