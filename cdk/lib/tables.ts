// The tables' settings as typed props, rendered to the TOML the ingest function reads
// (docs/configuration.md; shared/src/config.rs is the parser). Every key is optional, as in the
// file: a table takes [defaults], then the most specific matching glob, then its exact entry.

/** How a table's rows apply (`mode`). */
export type TableMode = 'upsert' | 'append' | 'changelog';

/** One column pinned by name (and type): `columns = [{ name = "id", type = "long" }]`. */
export interface ColumnSetting {
  /** The source column's name. */
  readonly name: string;
  /**
   * Its Iceberg type: boolean, int, long, float, double, decimal(P,S), date, time, timestamp,
   * timestamptz, string, binary. Unset: inferred (files with a header) or the table's.
   */
  readonly type?: string;
}

/**
 * Settings of one source table (or of a glob of them, or the defaults), as in
 * docs/configuration.md. Each maps to the TOML key in brackets.
 */
export interface TableSettings {
  /** Key columns (`primary_key`). Required for a new table in `upsert` mode. */
  readonly primaryKey?: string[];
  /** How rows apply (`mode`). @default 'upsert' */
  readonly mode?: TableMode;
  /** Iceberg `namespace.table` (`target`). @default `<schema>.<table>` lower-cased */
  readonly target?: string;
  /** A source column that orders the changes of a key, e.g. `last_update_time` (`ordering_column`). */
  readonly orderingColumn?: string;
  /** The column holding `$AR_H_CHANGE_SEQ` (`change_sequence_column`). */
  readonly changeSequenceColumn?: string;
  /** The endpoint's `TimestampColumnName` (`commit_timestamp_column`). */
  readonly commitTimestampColumn?: string;
  /**
   * Partition spec as Iceberg transforms (`partition_by`): `category`, `identity(c)`,
   * `bucket(16, id)`, `truncate(4, name)`, `year(ts)`, `month(ts)`, `day(ts)`, `hour(ts)`.
   * @default unpartitioned
   */
  readonly partitionBy?: string[];
  /** Iceberg format version of a table ingest creates (`format_version`). @default the construct's `formatVersion` */
  readonly formatVersion?: 2 | 3;
  /** Empty the table when DMS deletes all its files (`truncate_on_source_delete`). @default true */
  readonly truncateOnSourceDelete?: boolean;
  /** Columns not to store (`drop_columns`). */
  readonly dropColumns?: string[];
  /** Columns pinned by name and type, or named in file order for headerless files (`columns`). */
  readonly columns?: ColumnSetting[];
  /** The endpoint's `AddColumnName` (`header`). @default detected */
  readonly header?: boolean;
  /** How a new column of DMS TIME values is stored (`time_type`). @default 'string' */
  readonly timeType?: 'string' | 'long' | 'time';
  /** The endpoint's `CsvNullValue` (`null_value`). @default '' */
  readonly nullValue?: string;
  /** The endpoint's `CsvNoSupValue` (`no_sup_value`). */
  readonly noSupValue?: string;
  /** The endpoint's `CsvDelimiter` (`delimiter`). @default ',' */
  readonly delimiter?: string;
  /** Prefix of before-image columns (`before_image_prefix`). @default 'BI_' */
  readonly beforeImagePrefix?: string;
  /** Lower-case column names (`lowercase_names`). @default true */
  readonly lowercaseNames?: boolean;
  /** Infer the types of new CSV columns (`infer_types`). @default true */
  readonly inferTypes?: boolean;
  /** A row that cannot be read fails its file, or is set aside (`bad_rows`). @default 'fail' */
  readonly badRows?: 'fail' | 'quarantine';
  /** DMS objects never to apply, by key or file name (`skip_files`). */
  readonly skipFiles?: string[];
  /** Change files the applied-file record lists (`applied_record_files`). @default 2000 */
  readonly appliedRecordFiles?: number;
  /** Data files roll over at this size (`target_file_size_bytes`). @default 536870912 */
  readonly targetFileSizeBytes?: number;
  /** A change input larger than this is streamed (`large_input_bytes`). @default 134217728 */
  readonly largeInputBytes?: number;
  /** Table properties set at creation (`properties`). */
  readonly properties?: Record<string, string>;
}

/** How DMS lays out objects (`[source]`). */
export interface SourceSettings {
  /** The endpoint's `BucketFolder` (`bucket_folder`). */
  readonly bucketFolder?: string;
  /** DMS parallel load puts LOAD files one folder deeper (`parallel_load_folders`). @default false */
  readonly parallelLoadFolders?: boolean;
  /** `PreserveTransactions=true` with `CdcPath` (`cdc_path`). */
  readonly cdcPath?: string;
  /** The `CsvDelimiter` of the CDC_TXN files (`cdc_delimiter`). @default ',' */
  readonly cdcDelimiter?: string;
}

/** The whole config file, typed. */
export interface TablesConfig {
  /** `[source]`. */
  readonly source?: SourceSettings;
  /**
   * `[defaults]`, under every table.
   * @default RECOMMENDED_DEFAULTS, what the recommended DMS endpoint settings need (as the SAM template's TablesConfig default)
   */
  readonly defaults?: TableSettings;
  /** `[tables."schema.table"]` entries; a key may be a glob (`sales.*`). */
  readonly tables?: Record<string, TableSettings>;
}

/**
 * The `[defaults]` the recommended endpoint settings need (infra/dms-endpoint-settings.json's
 * TimestampColumnName, infra/dms-table-mappings.json's change sequence column), as in the SAM
 * template's default TablesConfig.
 */
export const RECOMMENDED_DEFAULTS: TableSettings = {
  changeSequenceColumn: 'ar_h_change_seq',
  commitTimestampColumn: 'dms_commit_ts',
};

/** Each table setting and its TOML key (test/tables.test.ts checks them against shared/src/config.rs). */
export const TABLE_KEYS: Array<[keyof TableSettings, string]> = [
  ['target', 'target'],
  ['primaryKey', 'primary_key'],
  ['mode', 'mode'],
  ['orderingColumn', 'ordering_column'],
  ['changeSequenceColumn', 'change_sequence_column'],
  ['commitTimestampColumn', 'commit_timestamp_column'],
  ['partitionBy', 'partition_by'],
  ['formatVersion', 'format_version'],
  ['truncateOnSourceDelete', 'truncate_on_source_delete'],
  ['dropColumns', 'drop_columns'],
  ['columns', 'columns'],
  ['header', 'header'],
  ['timeType', 'time_type'],
  ['nullValue', 'null_value'],
  ['noSupValue', 'no_sup_value'],
  ['delimiter', 'delimiter'],
  ['beforeImagePrefix', 'before_image_prefix'],
  ['lowercaseNames', 'lowercase_names'],
  ['inferTypes', 'infer_types'],
  ['badRows', 'bad_rows'],
  ['skipFiles', 'skip_files'],
  ['appliedRecordFiles', 'applied_record_files'],
  ['targetFileSizeBytes', 'target_file_size_bytes'],
  ['largeInputBytes', 'large_input_bytes'],
  ['properties', 'properties'],
];

/** Each `[source]` setting and its TOML key. */
export const SOURCE_KEYS: Array<[keyof SourceSettings, string]> = [
  ['bucketFolder', 'bucket_folder'],
  ['parallelLoadFolders', 'parallel_load_folders'],
  ['cdcPath', 'cdc_path'],
  ['cdcDelimiter', 'cdc_delimiter'],
];

/** A TOML basic string. */
export function tomlString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\r') out += '\\r';
    else if (c < 0x20 || c === 0x7f) out += '\\u' + c.toString(16).padStart(4, '0');
    else out += ch;
  }
  return out + '"';
}

function tomlKey(k: string): string {
  return /^[A-Za-z0-9_-]+$/.test(k) ? k : tomlString(k);
}

function tomlValue(v: unknown, where: string): string {
  if (typeof v === 'string') return tomlString(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0) throw new Error(`${where}: ${v} is not a whole number of 0 or more`);
    return String(v);
  }
  if (Array.isArray(v)) return '[' + v.map((x, i) => tomlValue(x, `${where}[${i}]`)).join(', ') + ']';
  if (v && typeof v === 'object') {
    const parts = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${tomlKey(k)} = ${tomlValue(x, `${where}.${k}`)}`);
    return '{ ' + parts.join(', ') + ' }';
  }
  throw new Error(`${where}: ${String(v)} cannot be written to TOML`);
}

function section(header: string, entries: Array<[string, unknown]>, where: string): string {
  const lines = entries
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k} = ${tomlValue(k === 'columns' ? (v as ColumnSetting[]).map((c) => ({ name: c.name, type: c.type })) : v, `${where}.${k}`)}`);
  return `[${header}]\n` + lines.join('\n') + (lines.length ? '\n' : '');
}

function tableEntries(s: TableSettings): Array<[string, unknown]> {
  for (const k of Object.keys(s)) {
    if (!TABLE_KEYS.some(([p]) => p === k)) throw new Error(`table settings: unknown setting \`${k}\` (docs/configuration.md lists them)`);
  }
  return TABLE_KEYS.map(([p, key]) => [key, s[p]]);
}

/** The config file, as the ingest function reads it. */
export function renderTablesToml(config: TablesConfig): string {
  const parts: string[] = ['# dms2iceberg table settings (docs/configuration.md), written by the dms2iceberg CDK construct.\n'];
  if (config.source && Object.values(config.source).some((v) => v !== undefined)) {
    for (const k of Object.keys(config.source)) {
      if (!SOURCE_KEYS.some(([p]) => p === k)) throw new Error(`tables.source: unknown setting \`${k}\``);
    }
    parts.push(section('source', SOURCE_KEYS.map(([p, key]) => [key, config.source![p]]), 'source'));
  }
  parts.push(section('defaults', tableEntries(config.defaults ?? RECOMMENDED_DEFAULTS), 'defaults'));
  for (const [name, s] of Object.entries(config.tables ?? {})) {
    parts.push(section(`tables.${tomlString(name)}`, tableEntries(s), `tables."${name}"`));
  }
  return parts.join('\n');
}

const TYPES = new Set([
  'boolean', 'bool', 'int', 'integer', 'int32', 'long', 'bigint', 'int64', 'float', 'real', 'double',
  'date', 'time', 'timestamp', 'timestamptz', 'string', 'varchar', 'text', 'binary',
]);

function typeProblem(t: string): string | undefined {
  const n = t.trim().toLowerCase();
  if (TYPES.has(n)) return undefined;
  const m = /^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$/.exec(n);
  if (!m) return `unknown column type \`${t}\``;
  const p = Number(m[1]);
  const s = Number(m[2]);
  if (p === 0 || p > 38 || s > p) return `decimal type \`${t}\`: precision 1 to 38, scale at most the precision`;
  return undefined;
}

function transformProblem(e: string): string | undefined {
  const t = e.trim();
  const open = t.indexOf('(');
  if (open < 0) return /^[^\s(),]+$/.test(t) ? undefined : `\`${e}\` is not a column or a transform`;
  if (!t.endsWith(')')) return `\`${e}\`: missing \`)\``;
  const name = t.slice(0, open).trim().toLowerCase();
  const args = t.slice(open + 1, -1).split(',').map((a) => a.trim());
  const num = (s: string) => /^\d+$/.test(s) && Number(s) <= 0xffffffff;
  const col = (s: string) => s.length > 0;
  if ((name === 'bucket' || name === 'truncate') && args.length === 2) {
    if (!num(args[0])) return `\`${e}\`: \`${args[0]}\` is not a number`;
    return col(args[1]) ? undefined : `\`${e}\`: no column`;
  }
  if (['year', 'years', 'month', 'months', 'day', 'days', 'hour', 'hours', 'identity'].includes(name) && args.length === 1 && col(args[0])) {
    return undefined;
  }
  return `\`${e}\` is not a known transform (identity, bucket(N, c), truncate(W, c), year, month, day, hour)`;
}

function globMatch(glob: string, s: string): boolean {
  const re = new RegExp('^' + glob.split('').map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[.+^${}()|[\]\\]/g, '\\$&'))).join('') + '$');
  return re.test(s);
}

const IDENTIFIER = /^[a-z0-9_]+$/;

/**
 * What is wrong with these settings, as the ingest function would find it at its first file (or
 * never, for a table that waits): one message per problem; empty = fine.
 */
export function tablesConfigProblems(config: TablesConfig, globalFormatVersion: string): string[] {
  const out: string[] = [];
  const defaults = config.defaults ?? RECOMMENDED_DEFAULTS;
  const check = (where: string, s: TableSettings) => {
    if (s.primaryKey !== undefined && s.primaryKey.length === 0) out.push(`${where}: primaryKey is empty`);
    for (const e of s.partitionBy ?? []) {
      const p = transformProblem(e);
      if (p) out.push(`${where}: partitionBy ${p}`);
    }
    for (const c of s.columns ?? []) {
      if (!c.name) out.push(`${where}: a column without a name`);
      const p = c.type === undefined ? undefined : typeProblem(c.type);
      if (p) out.push(`${where}: columns: ${p}`);
    }
    if (s.formatVersion !== undefined && s.formatVersion !== 2 && s.formatVersion !== 3) {
      out.push(`${where}: formatVersion ${s.formatVersion}: use 2 or 3`);
    }
    if (s.target !== undefined) {
      const parts = s.target.split('.');
      if (parts.length !== 2 || !parts.every((p) => IDENTIFIER.test(p))) {
        out.push(`${where}: target \`${s.target}\` must be \`namespace.table\` in lower-case letters, digits and _`);
      }
    }
    if (s.delimiter === '') out.push(`${where}: delimiter is empty`);
    if (s.noSupValue !== undefined && s.noSupValue === (s.nullValue ?? '')) {
      out.push(`${where}: noSupValue must differ from nullValue`);
    }
  };
  check('defaults', defaults);
  const tables = config.tables ?? {};
  for (const [name, s] of Object.entries(tables)) {
    const where = `tables["${name}"]`;
    if (name.split('.').length !== 2) {
      out.push(`${where}: table keys are \`<schema>.<table>\` as DMS names them (globs allowed)`);
      continue;
    }
    check(where, s);
  }
  // Each entry as the function resolves it: the exact entry over the most specific glob over
  // [defaults] (a glob is resolved over [defaults] alone).
  for (const [name, s] of Object.entries(tables)) {
    if (name.split('.').length !== 2) continue;
    const where = `tables["${name}"]`;
    const isGlob = name.includes('*') || name.includes('?');
    const globs = isGlob
      ? []
      : Object.keys(tables)
          .filter((k) => (k.includes('*') || k.includes('?')) && globMatch(k, name))
          .sort((a, b) => b.replace(/[*?]/g, '').length - a.replace(/[*?]/g, '').length);
    const layers = [defaults, ...(globs.length ? [tables[globs[0]]] : []), s];
    const pick = <K extends keyof TableSettings>(k: K): TableSettings[K] => {
      let v: TableSettings[K] = undefined;
      for (const l of layers) if (l[k] !== undefined) v = l[k];
      return v;
    };
    const mode = pick('mode') ?? 'upsert';
    const key = pick('primaryKey');
    if (mode === 'upsert' && (key === undefined || key.length === 0)) {
      out.push(
        `${where}: a table in upsert mode needs its primaryKey (DMS files do not say which columns form it; ` +
          `without one its first file goes to the dead-letter queue): set primaryKey, or mode 'append' or 'changelog' for a table without a key`,
      );
    }
    const ownKey = layers.slice(1).some((l) => l.primaryKey !== undefined && l.primaryKey.length > 0);
    if (mode === 'append' && ownKey) {
      out.push(`${where}: mode 'append' takes no primaryKey (rows are appended, never merged by key): drop it, or use 'upsert'`);
    }
  }
  if (globalFormatVersion !== '2' && globalFormatVersion !== '3') out.push(`formatVersion ${globalFormatVersion}: use 2 or 3`);
  return out;
}
