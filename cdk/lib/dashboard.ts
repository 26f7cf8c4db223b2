// The dashboard's widgets, as template.yaml's OperationsDashboard draws them: the same JSON
// with the same placeholders (${AWS::StackName}, ${AWS::Region}, ${IngestFunction},
// ${CompactFunction}, ${IngestQueue.QueueName}, ${IngestDeadLetterQueue.QueueName}), filled in
// with this stack's tokens. test/equivalence.test.ts compares the two bodies widget by widget.

/** The totals over every table (dimension Function), the queues and the functions. */
const WIDGETS: unknown[] = [
    {"type": "text", "x": 0, "y": 0, "width": 24, "height": 2, "properties": {"markdown": "## dms2iceberg: ${AWS::StackName}\nTotals over all tables (metrics of namespace `dms2iceberg`, dimension `Function`); per-table widgets at the bottom with TableMetrics=on. Alarms and what to do: docs/runbook.md."}},
    {"type": "metric", "x": 0, "y": 2, "width": 12, "height": 6, "properties": {"title": "Lag: landing to commit (s) and the oldest file waiting (s)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "LagSeconds", "Function", "${IngestFunction}", {"stat": "p50", "label": "lag p50"}], ["dms2iceberg", "LagSeconds", "Function", "${IngestFunction}", {"stat": "p99", "label": "lag p99"}], ["dms2iceberg", "LagSeconds", "Function", "${IngestFunction}", {"stat": "Maximum", "label": "lag max"}], ["dms2iceberg", "BacklogAgeSeconds", "Function", "${IngestFunction}", {"stat": "Maximum", "label": "oldest file waiting, worst table"}]]}},
    {"type": "metric", "x": 12, "y": 2, "width": 12, "height": 6, "properties": {"title": "DMS files, all tables", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "FilesApplied", "Function", "${IngestFunction}", {"stat": "Sum", "label": "applied"}], ["dms2iceberg", "FilesSkipped", "Function", "${IngestFunction}", {"stat": "Sum", "label": "skipped (already applied)"}], ["dms2iceberg", "FilesSuperseded", "Function", "${IngestFunction}", {"stat": "Sum", "label": "superseded"}]]}},
    {"type": "metric", "x": 0, "y": 8, "width": 12, "height": 6, "properties": {"title": "Failures and the dead-letter queue", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "FilesFailed", "Function", "${IngestFunction}", {"stat": "Sum", "label": "files failed"}], ["dms2iceberg", "FilesDeadLettered", "Function", "${IngestFunction}", {"stat": "Sum", "label": "sent to the dead-letter queue at once"}], ["dms2iceberg", "TablesBlocked", "Function", "${IngestFunction}", {"stat": "Maximum", "label": "tables blocked behind a failed file"}], ["dms2iceberg", "FilesLeftAtDeadline", "Function", "${IngestFunction}", {"stat": "Sum", "label": "files left at the deadline"}], ["dms2iceberg", "FilesNotApplicable", "Function", "${IngestFunction}", {"stat": "Sum", "label": "files not applicable"}], ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${IngestDeadLetterQueue.QueueName}", {"stat": "Maximum", "label": "dead-letter queue depth"}], ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "${IngestQueue.QueueName}", {"stat": "Maximum", "label": "oldest queued event (s)", "yAxis": "right"}]]}},
    {"type": "metric", "x": 12, "y": 8, "width": 12, "height": 6, "properties": {"title": "Rows, all tables", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "RowsInserted", "Function", "${IngestFunction}", {"stat": "Sum", "label": "inserted"}], ["dms2iceberg", "RowsUpdated", "Function", "${IngestFunction}", {"stat": "Sum", "label": "updated"}], ["dms2iceberg", "RowsDeleted", "Function", "${IngestFunction}", {"stat": "Sum", "label": "deleted"}]]}},
    {"type": "metric", "x": 0, "y": 14, "width": 12, "height": 6, "properties": {"title": "Commits: attempts and conflicts", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "CommitAttempts", "Function", "${IngestFunction}", {"stat": "Sum", "label": "attempts"}], ["dms2iceberg", "CommitConflicts", "Function", "${IngestFunction}", {"stat": "Sum", "label": "conflicts (retried)"}]]}},
    {"type": "metric", "x": 12, "y": 14, "width": 12, "height": 6, "properties": {"title": "Where a table's time goes per invocation (ms, average)", "region": "${AWS::Region}", "view": "timeSeries", "stacked": true, "period": 300, "metrics": [["dms2iceberg", "ReadMilliseconds", "Function", "${IngestFunction}", {"stat": "Average", "label": "read"}], ["dms2iceberg", "LookupMilliseconds", "Function", "${IngestFunction}", {"stat": "Average", "label": "lookup"}], ["dms2iceberg", "WriteMilliseconds", "Function", "${IngestFunction}", {"stat": "Average", "label": "write"}], ["dms2iceberg", "CommitMilliseconds", "Function", "${IngestFunction}", {"stat": "Average", "label": "commit"}]]}},
    {"type": "metric", "x": 0, "y": 20, "width": 12, "height": 6, "properties": {"title": "Files written", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "DataFilesWritten", "Function", "${IngestFunction}", {"stat": "Sum", "label": "data files"}], ["dms2iceberg", "DeleteFilesWritten", "Function", "${IngestFunction}", {"stat": "Sum", "label": "delete files"}], ["dms2iceberg", "PartitionsWritten", "Function", "${IngestFunction}", {"stat": "Maximum", "label": "most partitions in one commit"}]]}},
    {"type": "metric", "x": 12, "y": 20, "width": 12, "height": 6, "properties": {"title": "Read cost, worst table (what readers open; compaction keeps it low)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "DeleteFilesPerDataFile", "Function", "${CompactFunction}", {"stat": "Maximum", "label": "delete files per data file"}], ["dms2iceberg", "SmallFilesPerPartition", "Function", "${CompactFunction}", {"stat": "Maximum", "label": "small files per partition"}], ["dms2iceberg", "Manifests", "Function", "${CompactFunction}", {"stat": "Maximum", "label": "manifests"}]]}},
    {"type": "metric", "x": 0, "y": 26, "width": 12, "height": 6, "properties": {"title": "Compaction and maintenance", "region": "${AWS::Region}", "view": "timeSeries", "period": 3600, "metrics": [["dms2iceberg", "FilesRewritten", "Function", "${CompactFunction}", {"stat": "Sum", "label": "files rewritten"}], ["dms2iceberg", "DeleteFilesRemoved", "Function", "${CompactFunction}", {"stat": "Sum", "label": "delete files removed"}], ["dms2iceberg", "SnapshotsExpired", "Function", "${CompactFunction}", {"stat": "Sum", "label": "snapshots expired"}], ["dms2iceberg", "OrphansDeleted", "Function", "${CompactFunction}", {"stat": "Sum", "label": "orphans deleted"}], ["dms2iceberg", "BytesRewritten", "Function", "${CompactFunction}", {"stat": "Sum", "label": "bytes rewritten", "yAxis": "right"}]]}},
    {"type": "metric", "x": 12, "y": 26, "width": 12, "height": 6, "properties": {"title": "Compaction health", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["dms2iceberg", "TablesFailed", "Function", "${CompactFunction}", {"stat": "Sum", "label": "tables whose maintenance failed"}], ["dms2iceberg", "TablesRepaired", "Function", "${CompactFunction}", {"stat": "Sum", "label": "damaged tables repaired"}], ["dms2iceberg", "DurationMs", "Function", "${CompactFunction}", {"stat": "Maximum", "label": "slowest table (ms)", "yAxis": "right"}]]}},
    {"type": "metric", "x": 0, "y": 32, "width": 24, "height": 6, "properties": {"title": "The functions", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["AWS/Lambda", "Errors", "FunctionName", "${IngestFunction}", {"stat": "Sum", "label": "ingest errors"}], ["AWS/Lambda", "Throttles", "FunctionName", "${IngestFunction}", {"stat": "Sum", "label": "ingest throttles"}], ["AWS/Lambda", "Errors", "FunctionName", "${CompactFunction}", {"stat": "Sum", "label": "compact errors"}], ["AWS/Lambda", "Duration", "FunctionName", "${IngestFunction}", {"stat": "p99", "label": "ingest duration p99 (ms)", "yAxis": "right"}], ["AWS/Lambda", "ConcurrentExecutions", "FunctionName", "${IngestFunction}", {"stat": "Maximum", "label": "ingest concurrency"}]]}}
];

/** With table metrics on: per-table widgets (SEARCH over dimensions Function and Table). */
const PER_TABLE_WIDGETS: unknown[] = [
    {"type": "text", "x": 0, "y": 38, "width": 24, "height": 1, "properties": {"markdown": "### Per table (TableMetrics=on: dimensions `Function`, `Table`; tables appear by themselves)"}},
    {"type": "metric", "x": 0, "y": 39, "width": 12, "height": 6, "properties": {"title": "Lag per table, p99 (s)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${IngestFunction}\" MetricName=\"LagSeconds\"', 'p99', 300)", "id": "lag99", "label": ""}]]}},
    {"type": "metric", "x": 12, "y": 39, "width": 12, "height": 6, "properties": {"title": "Oldest file waiting per table (s)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${IngestFunction}\" MetricName=\"BacklogAgeSeconds\"', 'Maximum', 300)", "id": "backlog", "label": ""}]]}},
    {"type": "metric", "x": 0, "y": 45, "width": 12, "height": 6, "properties": {"title": "DMS files applied per table", "region": "${AWS::Region}", "view": "timeSeries", "stacked": true, "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${IngestFunction}\" MetricName=\"FilesApplied\"', 'Sum', 300)", "id": "applied", "label": ""}]]}},
    {"type": "metric", "x": 12, "y": 45, "width": 12, "height": 6, "properties": {"title": "Failed files and blocked tables, per table", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${IngestFunction}\" (MetricName=\"FilesFailed\" OR MetricName=\"TablesBlocked\")', 'Sum', 300)", "id": "failed", "label": ""}]]}},
    {"type": "metric", "x": 0, "y": 51, "width": 12, "height": 6, "properties": {"title": "Rows per table (inserted + updated + deleted)", "region": "${AWS::Region}", "view": "timeSeries", "stacked": true, "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${IngestFunction}\" (MetricName=\"RowsInserted\" OR MetricName=\"RowsUpdated\" OR MetricName=\"RowsDeleted\")', 'Sum', 300)", "id": "rows", "label": ""}]]}},
    {"type": "metric", "x": 12, "y": 51, "width": 12, "height": 6, "properties": {"title": "Read cost per table", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [[{"expression": "SEARCH('{dms2iceberg,Function,Table} Function=\"${CompactFunction}\" (MetricName=\"DeleteFilesPerDataFile\" OR MetricName=\"SmallFilesPerPartition\" OR MetricName=\"Manifests\")', 'Maximum', 300)", "id": "cost", "label": ""}]]}}
];

export interface DashboardInputs {
  readonly stackName: string;
  readonly region: string;
  readonly ingest: string;
  readonly compact: string;
  readonly queue: string;
  readonly deadLetterQueue: string;
  readonly perTable: boolean;
}

function fill(v: unknown, values: Record<string, string>): unknown {
  if (typeof v === 'string') return v.replace(/\$\{([A-Za-z:.]+)\}/g, (m, name: string) => {
    const x = values[name];
    if (x === undefined) throw new Error(`dashboard: no value for ${m}`);
    return x;
  });
  if (Array.isArray(v)) return v.map((x) => fill(x, values));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x, values)]));
  return v;
}

/** The dashboard's body, an object for Stack.toJsonString (tokens resolved there). */
export function dashboardBody(i: DashboardInputs): { widgets: unknown[] } {
  const values = {
    'AWS::StackName': i.stackName,
    'AWS::Region': i.region,
    IngestFunction: i.ingest,
    CompactFunction: i.compact,
    'IngestQueue.QueueName': i.queue,
    'IngestDeadLetterQueue.QueueName': i.deadLetterQueue,
  };
  return { widgets: fill([...WIDGETS, ...(i.perTable ? PER_TABLE_WIDGETS : [])], values) as unknown[] };
}
