//! CloudWatch Embedded Metric Format: one JSON line per table and invocation on stdout, which
//! CloudWatch Logs turns into metrics without API calls (so no `cloudwatch:PutMetricData` grant).

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "dms2iceberg";

/// `(name, unit, value)` metrics of one table, published with dimension `Function` (what
/// alarms and the dashboard's totals read: a fixed number of custom metrics whatever the number
/// of tables) and, with `per_table`, also with `Function` and `Table` (each table's metrics
/// custom metrics of their own, billed as such). The table is in the line either way, for
/// Logs Insights.
pub fn emf_line(
    function: &str,
    table: &str,
    per_table: bool,
    metrics: &[(&str, &str, f64)],
) -> String {
    let dimensions = if per_table {
        json!([["Function"], ["Function", "Table"]])
    } else {
        json!([["Function"]])
    };
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": dimensions,
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
        for per_table in [false, true] {
            let l = super::emf_line(
                "ingest",
                "sales.product",
                per_table,
                &[("RowsInserted", "Count", 3.0)],
            );
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            assert_eq!(v["RowsInserted"], 3.0);
            let m = &v["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(m["Metrics"][0]["Name"], "RowsInserted");
            assert_eq!(v["Table"], "sales.product");
            assert_eq!(m["Dimensions"][0], serde_json::json!(["Function"]));
            assert_eq!(
                m["Dimensions"].as_array().unwrap().len(),
                1 + usize::from(per_table)
            );
        }
    }
}
