//! Alarms, as docs/runbook.md states them: metric, statistic, threshold and periods, on the
//! stack's own functions, notifying the topics.

use super::*;

/// One alarm as the runbook's table states it.
#[derive(Debug)]
pub(super) struct RunbookAlarm {
    pub(super) name: String,
    /// (namespace, metric, statistic)
    pub(super) metrics: Vec<(String, String, String)>,
    /// `sum` of several metrics, `div60` of one, or the metric itself.
    pub(super) math: &'static str,
    pub(super) of: String,
    pub(super) comparison: String,
    pub(super) threshold: String,
    pub(super) datapoints: i64,
    pub(super) periods: i64,
    pub(super) period_s: i64,
}

/// The table in docs/runbook.md's "Alarms at a glance": `| alarm | of | metric (statistic) |
/// threshold | datapoints | period |`.
pub(super) fn runbook_alarms() -> Vec<RunbookAlarm> {
    let text = std::fs::read_to_string(root().join("docs/runbook.md")).expect("docs/runbook.md");
    let table = text
        .split("| alarm | of | metric (statistic) | threshold | datapoints | period |")
        .nth(1)
        .expect("docs/runbook.md has the alarms table");
    let mut out = Vec::new();
    for line in table.lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 6, "runbook table row: {line}");
        let name = cells[0].trim_matches('`').to_string();
        let metric_text = cells[2];
        let (metric_text, math) = match metric_text.strip_suffix(" / 60") {
            Some(m) => (m, "div60"),
            None if metric_text.contains(" + ") => (metric_text, "sum"),
            None => (metric_text, "one"),
        };
        let metrics = metric_text
            .split(" + ")
            .map(|m| {
                let (ns_name, stat) = m
                    .trim()
                    .strip_suffix(')')
                    .and_then(|m| m.split_once(" ("))
                    .unwrap_or_else(|| panic!("`namespace Metric (Statistic)`: {m}"));
                let (ns, metric) = ns_name.split_once(' ').expect("namespace and metric");
                (ns.to_string(), metric.to_string(), stat.to_string())
            })
            .collect();
        let (comparison, threshold) = cells[3].split_once(' ').expect("`> 0`");
        let (m, n) = cells[4].split_once(" of ").expect("`M of N`");
        let period_s = match cells[5] {
            "5 min" => 300,
            "1 hour" => 3600,
            other => panic!("period {other}"),
        };
        out.push(RunbookAlarm {
            name,
            metrics,
            math,
            of: cells[1].to_string(),
            comparison: comparison.to_string(),
            threshold: threshold.trim_matches('`').to_string(),
            datapoints: m.parse().expect("M"),
            periods: n.parse().expect("N"),
            period_s,
        });
    }
    assert!(!out.is_empty());
    out
}

#[test]
fn alarms_are_the_runbooks() {
    let raw = &loaded().raw;
    let runbook_text =
        std::fs::read_to_string(root().join("docs/runbook.md")).expect("docs/runbook.md");
    let in_runbook = runbook_alarms();
    let alarms: Vec<(&String, &Value)> = raw["Resources"]
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .collect();
    let names: BTreeSet<&str> = alarms.iter().map(|(n, _)| n.as_str()).collect();
    let documented: BTreeSet<&str> = in_runbook.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names, documented,
        "the template's alarms and the runbook's table"
    );
    // What the issue asks alarms for.
    for needed in [
        "DeadLetterQueueAlarm",
        "FilesFailedAlarm",
        "FilesDeadLetteredAlarm",
        "TableBlockedAlarm",
        "LagAlarm",
        "IngestErrorsAlarm",
        "CompactionFailingAlarm",
        "TableRepairedAlarm",
    ] {
        assert!(names.contains(needed), "no {needed}");
    }
    let emitted = emitted_metric_names();
    for want in &in_runbook {
        let name = &want.name;
        let a = &raw["Resources"][name.as_str()]["Properties"];
        // Each has its runbook section, which the description points to.
        assert!(
            runbook_text.contains(&format!("\n### {name}\n")),
            "docs/runbook.md has no `### {name}` section"
        );
        let description = render(&a["AlarmDescription"]).join("");
        assert!(
            description.contains(&format!("docs/runbook.md, \"{name}\"")),
            "{name}: description {description}"
        );
        // It notifies both optional topics.
        assert_eq!(
            a["AlarmActions"],
            json!([
                {"Fn::If": ["HasAlarmTopic", {"Ref": "AlarmTopicArn"}, {"Ref": "AWS::NoValue"}]},
                {"Fn::If": ["HasAlarmEmail", {"Ref": "AlarmTopic"}, {"Ref": "AWS::NoValue"}]}
            ]),
            "{name}: AlarmActions"
        );
        assert_eq!(
            a["TreatMissingData"], "notBreaching",
            "{name}: a quiet period breaches"
        );
        // The metrics, as (namespace, name, statistic, dimension, period), and the expression.
        let (metrics, expression) = match a.get("Metrics") {
            None => (
                vec![(
                    a["Namespace"].clone(),
                    a["MetricName"].clone(),
                    a["Statistic"].clone(),
                    a["Dimensions"].clone(),
                    as_i64(&a["Period"]),
                )],
                None,
            ),
            Some(list) => {
                let list = list.as_array().expect("Metrics");
                let returned: Vec<&Value> =
                    list.iter().filter(|m| m["ReturnData"] == true).collect();
                assert_eq!(returned.len(), 1, "{name}: one expression returned");
                let ids: Vec<&str> = list
                    .iter()
                    .filter(|m| m["ReturnData"] == false)
                    .map(|m| m["Id"].as_str().expect("Id"))
                    .collect();
                let expected = match want.math {
                    "div60" => format!("{} / 60", ids[0]),
                    "sum" => ids
                        .iter()
                        .map(|i| format!("FILL({i}, 0)"))
                        .collect::<Vec<_>>()
                        .join(" + "),
                    other => panic!("{name}: math {other} with Metrics"),
                };
                assert_eq!(returned[0]["Expression"], expected, "{name}: expression");
                (
                    list.iter()
                        .filter(|m| m["ReturnData"] == false)
                        .map(|m| {
                            let s = &m["MetricStat"];
                            (
                                s["Metric"]["Namespace"].clone(),
                                s["Metric"]["MetricName"].clone(),
                                s["Stat"].clone(),
                                s["Metric"]["Dimensions"].clone(),
                                as_i64(&s["Period"]),
                            )
                        })
                        .collect(),
                    Some(expected),
                )
            }
        };
        if want.math == "one" {
            assert!(
                expression.is_none(),
                "{name}: an expression the runbook does not state"
            );
        }
        assert_eq!(metrics.len(), want.metrics.len(), "{name}: metrics");
        for ((ns, metric, stat, dims, period), (wns, wmetric, wstat)) in
            metrics.iter().zip(&want.metrics)
        {
            assert_eq!(ns, wns.as_str(), "{name}: namespace");
            assert_eq!(metric, wmetric.as_str(), "{name}: metric");
            assert_eq!(stat, wstat.as_str(), "{name}: statistic of {wmetric}");
            assert_eq!(*period, want.period_s, "{name}: period");
            let dims = dims.as_array().expect("one dimension");
            assert_eq!(dims.len(), 1, "{name}: dimensions {dims:?}");
            let (dim, value) = (&dims[0]["Name"], render(&dims[0]["Value"]));
            let expect = match (wns.as_str(), want.of.as_str()) {
                ("dms2iceberg", _) => {
                    // Our metrics: the totals over all tables, of the function emitting them.
                    assert!(
                        emitted.contains(wmetric),
                        "{name}: {wmetric} is emitted nowhere"
                    );
                    let f = emitting_function(wmetric);
                    assert_eq!(
                        want.of,
                        if f == "IngestFunction" {
                            "ingest"
                        } else {
                            "compact"
                        },
                        "{name}: {wmetric} is the {f}'s"
                    );
                    ("Function", format!("${{{f}}}"))
                }
                ("AWS/Lambda", "ingest") => ("FunctionName", "${IngestFunction}".into()),
                ("AWS/Lambda", "compact") => ("FunctionName", "${CompactFunction}".into()),
                ("AWS/SQS", "dead-letter queue") => {
                    ("QueueName", "${IngestDeadLetterQueue.QueueName}".into())
                }
                ("AWS/SQS", "ingest queue") => ("QueueName", "${IngestQueue.QueueName}".into()),
                other => panic!("{name}: {other:?} not understood"),
            };
            assert_eq!(
                (dim.as_str().unwrap_or_default(), value),
                (expect.0, vec![expect.1]),
                "{name}"
            );
        }
        let comparison = match a["ComparisonOperator"].as_str() {
            Some("GreaterThanThreshold") => ">",
            Some("GreaterThanOrEqualToThreshold") => "≥",
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(comparison, want.comparison, "{name}: comparison");
        let threshold = render(&a["Threshold"]).join("");
        assert_eq!(
            threshold.trim_start_matches("${").trim_end_matches('}'),
            want.threshold,
            "{name}: threshold"
        );
        let periods = as_i64(&a["EvaluationPeriods"]);
        let datapoints = a.get("DatapointsToAlarm").map_or(periods, as_i64);
        assert_eq!(
            (datapoints, periods),
            (want.datapoints, want.periods),
            "{name}: datapoints to alarm"
        );
    }

    // The `Function` dimension the alarms name is the function's name, so that two stacks in
    // one account never mix: the functions publish under AWS_LAMBDA_FUNCTION_NAME, which
    // `operations::metrics_name_the_deployed_function` checks on the real binaries' output.

    // AlarmEmail creates a topic with that address subscribed; without it, no topic.
    let topic = &raw["Resources"]["AlarmTopic"];
    assert_eq!(topic["Type"], "AWS::SNS::Topic");
    assert_eq!(topic["Condition"], "HasAlarmEmail");
    assert_eq!(
        topic["Properties"]["Subscription"],
        json!([{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}])
    );
    assert!(
        deployed(raw, &[])
            .pointer("/Resources/AlarmTopic")
            .is_none()
    );
    assert!(
        deployed(raw, &[("AlarmEmail", "ops@example.com")])
            .pointer("/Resources/AlarmTopic")
            .is_some()
    );
}
