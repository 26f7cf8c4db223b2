//! CloudWatch Embedded Metric Format: one JSON line per table and invocation on stdout, which
//! CloudWatch Logs turns into metrics without API calls (so no `cloudwatch:PutMetricData` grant).

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "dms2iceberg";

/// `(name, unit, value)` metrics with dimension `Table`.
pub fn emf_line(function: &str, table: &str, metrics: &[(&str, &str, f64)]) -> String {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function", "Table"]],
                "Metrics": metrics.iter().map(|(n, u, _)| json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        }),
    );
    root.insert("Function".into(), Value::String(function.into()));
    root.insert("Table".into(), Value::String(table.into()));
    for (n, _, v) in metrics {
        root.insert((*n).into(), json!(v));
    }
    Value::Object(root).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn emf_shape() {
        let l = super::emf_line("ingest", "sales.product", &[("RowsInserted", "Count", 3.0)]);
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["RowsInserted"], 3.0);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            "RowsInserted"
        );
        assert_eq!(v["Table"], "sales.product");
    }
}
