// The typed table settings and the TOML they are rendered to: read back by a TOML parser
// (Python's tomllib) into exactly the keys and values the ingest function's config parser
// (shared/src/config.rs) takes, every key of which the props cover.

import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { RECOMMENDED_DEFAULTS, renderTablesToml, SOURCE_KEYS, TABLE_KEYS, TablesConfig } from '../lib';
import { ROOT, samTemplate } from './support';
import { Json } from './resolve';

/** TOML text parsed by Python's tomllib (3.11+), as JSON. */
function parseToml(text: string): Json {
  const out = execFileSync('python3', ['-c', 'import json, sys, tomllib; json.dump(tomllib.loads(sys.stdin.read()), sys.stdout)'], {
    input: text,
    encoding: 'utf8',
  });
  return JSON.parse(out) as Json;
}

/** The field names of a `pub struct` in shared/src/config.rs. */
function rustFields(struct: string): string[] {
  const src = fs.readFileSync(path.join(ROOT, 'shared', 'src', 'config.rs'), 'utf8');
  const start = src.indexOf(`pub struct ${struct} {`);
  assert.ok(start >= 0, `no struct ${struct} in shared/src/config.rs`);
  const body = src.slice(start, src.indexOf('\n}', start));
  return [...body.matchAll(/^\s+pub (\w+):/gm)].map((m) => m[1]).sort();
}

const FULL: TablesConfig = {
  source: { bucketFolder: 'dms', parallelLoadFolders: true, cdcPath: 'changes', cdcDelimiter: '|' },
  defaults: { changeSequenceColumn: 'ar_h_change_seq', commitTimestampColumn: 'dms_commit_ts', badRows: 'quarantine' },
  tables: {
    'sales.orders': {
      primaryKey: ['order_id'],
      orderingColumn: 'last_update_time',
      partitionBy: ['day(order_date)', 'bucket(16, customer_id)'],
      formatVersion: 3,
      columns: [{ name: 'zip', type: 'string' }, { name: 'price', type: 'decimal(10,2)' }, { name: 'note' }],
      properties: { 'commit.retry.num-retries': '10', 'write.format.default': 'parquet' },
      skipFiles: ['dms/sales/orders/20220302-1134010000.csv'],
      targetFileSizeBytes: 268435456,
      truncateOnSourceDelete: false,
    },
    'sales.*': { primaryKey: ['id'], timeType: 'time', header: false, delimiter: '\t', nullValue: 'NULL', noSupValue: '#NS#' },
    'audit.events': { mode: 'append', target: 'audit.events_log', dropColumns: ['bi_total'], lowercaseNames: false, inferTypes: false },
    'shop.history': { mode: 'changelog', beforeImagePrefix: 'OLD_', appliedRecordFiles: 5000, largeInputBytes: 1 << 27 },
  },
};

describe('the table settings, rendered', () => {
  test('every key of the config parser is a typed prop, and no other', () => {
    assert.deepEqual(TABLE_KEYS.map(([, k]) => k).sort(), rustFields('TableSettings'));
    assert.deepEqual(SOURCE_KEYS.map(([, k]) => k).sort(), rustFields('SourceSettings'));
  });

  test('read back, the TOML holds every setting under its key', () => {
    assert.deepEqual(parseToml(renderTablesToml(FULL)), {
      source: { bucket_folder: 'dms', parallel_load_folders: true, cdc_path: 'changes', cdc_delimiter: '|' },
      defaults: { change_sequence_column: 'ar_h_change_seq', commit_timestamp_column: 'dms_commit_ts', bad_rows: 'quarantine' },
      tables: {
        'sales.orders': {
          primary_key: ['order_id'],
          ordering_column: 'last_update_time',
          partition_by: ['day(order_date)', 'bucket(16, customer_id)'],
          format_version: 3,
          truncate_on_source_delete: false,
          columns: [{ name: 'zip', type: 'string' }, { name: 'price', type: 'decimal(10,2)' }, { name: 'note' }],
          skip_files: ['dms/sales/orders/20220302-1134010000.csv'],
          target_file_size_bytes: 268435456,
          properties: { 'commit.retry.num-retries': '10', 'write.format.default': 'parquet' },
        },
        'sales.*': { primary_key: ['id'], header: false, time_type: 'time', null_value: 'NULL', no_sup_value: '#NS#', delimiter: '\t' },
        'audit.events': { target: 'audit.events_log', mode: 'append', drop_columns: ['bi_total'], lowercase_names: false, infer_types: false },
        'shop.history': { mode: 'changelog', before_image_prefix: 'OLD_', applied_record_files: 5000, large_input_bytes: 134217728 },
      },
    });
  });

  test('strings come back as given: quotes, backslashes, control characters, non-ASCII', () => {
    const odd = 'a "quoted" \\ back\\slash\nnew line\u0001 é ✓';
    const parsed = parseToml(renderTablesToml({ defaults: { nullValue: odd }, tables: { 'dbo.order line$items': { primaryKey: [odd], target: 'dbo.order_line_items' } } })) as {
      [k: string]: Json;
    };
    assert.equal((parsed.defaults as { [k: string]: Json }).null_value, odd);
    assert.deepEqual(((parsed.tables as { [k: string]: Json })['dbo.order line$items'] as { [k: string]: Json }).primary_key, [odd]);
  });

  test("without tables: the recommended [defaults], as the SAM template's default TablesConfig", () => {
    const ours = parseToml(renderTablesToml({}));
    assert.deepEqual(ours, { defaults: { change_sequence_column: 'ar_h_change_seq', commit_timestamp_column: 'dms_commit_ts' } });
    const samDefault = ((samTemplate().Parameters as { [k: string]: { [k: string]: Json } }).TablesConfig.Default) as string;
    assert.deepEqual(parseToml(samDefault), ours);
    assert.deepEqual(RECOMMENDED_DEFAULTS, { changeSequenceColumn: 'ar_h_change_seq', commitTimestampColumn: 'dms_commit_ts' });
  });

  test('an unknown setting is refused by name', () => {
    assert.throws(() => renderTablesToml({ tables: { 'a.b': { primaryKey: ['id'], primary_key: ['id'] } as never } }), /unknown setting `primary_key`/);
  });
});
