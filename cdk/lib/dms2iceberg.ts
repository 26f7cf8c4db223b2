import * as path from 'path';
import { Arn, Aws, CfnOutput, Duration, Fn, RemovalPolicy, Size, Stack, Token } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import * as glue from 'aws-cdk-lib/aws-glue';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as s3tables from 'aws-cdk-lib/aws-s3tables';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { FunctionCode } from './code';
import { dashboardBody } from './dashboard';
import { renderTablesToml, TablesConfig, tablesConfigProblems } from './tables';

/** The Glue Data Catalog, tables in the warehouse bucket (template `Catalog=glue`). */
export interface GlueCatalog {
  readonly kind: 'glue';
}

/** An Amazon S3 Tables table bucket (template `Catalog=s3tables`). */
export interface S3TablesCatalog {
  readonly kind: 's3tables';
  /**
   * An existing table bucket (`arn:aws:s3tables:<region>:<account>:bucket/<name>`).
   * @default a table bucket this construct creates, retained when the stack is deleted
   */
  readonly tableBucketArn?: string;
}

/** How the functions authenticate to a REST catalog (template `RestAuthentication`). */
export type RestAuthentication = 'none' | 'glue' | 's3tables' | 'token' | 'credential';

/** An Iceberg REST catalog (template `Catalog=rest`; docs/catalogs.md, "On a REST catalog"). */
export interface RestCatalog {
  readonly kind: 'rest';
  /**
   * `glue` / `s3tables`: SigV4 to Glue's or S3 Tables' Iceberg REST endpoint, with IAM for those
   * alone; `token` / `credential`: a bearer token or OAuth2 client credentials read from `secret`;
   * `none`: unauthenticated.
   */
  readonly authentication: RestAuthentication;
  /** The catalog's base URI, before `/v1`. @default the region's endpoint, for `glue` and `s3tables` (required otherwise) */
  readonly uri?: string;
  /** The warehouse asked for in `GET /v1/config` (not with `glue` or `s3tables`). @default the server's */
  readonly warehouse?: string;
  /**
   * `token` / `credential`: the Secrets Manager secret holding the bearer token or
   * `client_id:client_secret` (or JSON). Its full ARN must be known: a Secret of this app, or
   * `Secret.fromSecretCompleteArn`.
   */
  readonly secret?: secretsmanager.ISecret;
  /** The customer managed key of `secret`. @default the secret's `encryptionKey`, else none (aws/secretsmanager needs no grant) */
  readonly secretKey?: kms.IKey;
  /** `credential`: the OAuth2 token endpoint. @default `<uri>/v1/oauth/tokens` */
  readonly oauth2Uri?: string;
  /** `credential`: the OAuth2 scope. @default `catalog` */
  readonly scope?: string;
  /** Ask the catalog for storage credentials per table (with `glue`, Lake Formation vends them). @default false */
  readonly vendedCredentials?: boolean;
  /** `s3tables`: an existing table bucket. @default one this construct creates */
  readonly tableBucketArn?: string;
}

/** Where the tables live. */
export type CatalogProps = GlueCatalog | S3TablesCatalog | RestCatalog;

/** The Iceberg warehouse (Glue, Glue's REST endpoint, or another REST catalog's bucket). */
export interface WarehouseProps {
  /**
   * An existing bucket. With a REST catalog other than Glue's, the bucket its tables are in, to
   * grant both functions read/write under `prefix`.
   * @default Glue (or Glue's REST endpoint): a bucket this construct creates, retained; another REST catalog: no grant
   */
  readonly bucket?: s3.IBucket;
  /** Key prefix of the warehouse in its bucket; '' = the whole bucket. @default 'warehouse/' */
  readonly prefix?: string;
  /**
   * Customer managed KMS key of the tables' files: a bucket (or table bucket) this construct
   * creates encrypts with it (bucket key on), and both functions may GenerateDataKey and Decrypt
   * with it (through S3, for a bucket). An existing bucket encrypted with a key needs it here.
   * @default SSE-S3
   */
  readonly key?: kms.IKey;
}

/** The Glue database (S3 Tables or REST namespace) of every table. */
export interface DatabaseProps {
  /**
   * Its name: lower-case letters, digits and _ (S3 Tables: no _ at either end).
   * @default dms2iceberg_<the first 8 hex digits of the stack id>, unique per stack
   */
  readonly name?: string;
  /**
   * Glue (or Glue's REST endpoint): create the database (retained when the stack is deleted).
   * false: it exists already (a database an earlier stack kept, named in `name`), or ingest
   * creates it on first use.
   * @default true
   */
  readonly create?: boolean;
}

/** The ingest function and its queue. */
export interface IngestProps {
  /** @default 1769 (one full vCPU) */
  readonly memorySize?: number;
  /** @default Duration.seconds(300) */
  readonly timeout?: Duration;
  /** /tmp. @default Size.mebibytes(4096) */
  readonly ephemeralStorageSize?: Size;
  /** Full-load files of a backlog one invocation applies at once (1 to 16). @default 1 */
  readonly parallelLoads?: number;
  /** DMS files per Iceberg snapshot. @default 1 */
  readonly maxFilesPerCommit?: number;
  /** DMS files one invocation applies at most. @default 100 */
  readonly maxFilesPerInvocation?: number;
  /** SQS messages per invocation (1 to 10000). @default 10 */
  readonly batchSize?: number;
  /** Time the event source waits to fill a batch (0 to 300 s; at least 1 s when batchSize > 10). @default Duration.seconds(5) */
  readonly maxBatchingWindow?: Duration;
  /** Concurrent invocations the queue drives at most (2 to 1000). @default 5 */
  readonly maxConcurrency?: number;
  /** Reserved concurrency; 0 pauses ingestion. @default none */
  readonly reservedConcurrentExecutions?: number;
  /** The queue's visibility timeout (60 s to 12 h; AWS recommends 6 x timeout). @default Duration.seconds(1800) */
  readonly visibilityTimeout?: Duration;
  /** Receives of one message before it moves to the dead-letter queue (1 to 1000). @default 5 */
  readonly maxReceiveCount?: number;
}

/** Whether the compact function rewrites small files. */
export type CompactionMode = 'auto' | 'on' | 'off';

/** The compact function and its schedules. */
export interface CompactProps {
  /** @default 3008 */
  readonly memorySize?: number;
  /** At least a minute below the shorter schedule's interval. @default Duration.seconds(240) */
  readonly timeout?: Duration;
  /** /tmp. @default Size.mebibytes(2048) */
  readonly ephemeralStorageSize?: Size;
  /** Compaction by read cost. @default Schedule.expression('rate(5 minutes)') */
  readonly schedule?: events.Schedule;
  /** Snapshot expiry and orphan files. @default Schedule.expression('rate(1 hour)') */
  readonly maintenanceSchedule?: events.Schedule;
  /** auto = on for Glue, off for S3 Tables (which compacts its tables itself). @default 'auto' */
  readonly compaction?: CompactionMode;
  /** Bytes of data files one invocation rewrites at most. @default 1073741824 */
  readonly maxBytes?: number;
  /** Expire snapshots older than this. @default 168 */
  readonly snapshotRetentionHours?: number;
  /** Keep at most this many snapshots (0 = no limit). @default 200 */
  readonly snapshotRetainMax?: number;
  /** Delete unreferenced files older than this. @default 72 */
  readonly orphanMinAgeHours?: number;
}

/** Props of {@link Dms2Iceberg}: each names the template.yaml parameter it stands for. */
export interface Dms2IcebergProps {
  /**
   * The functions' code (built arm64 binaries by default).
   * @default FunctionCode.fromCargoLambda('<repository>/target/lambda'), cargo-lambda's output in the repository this package is in
   */
  readonly code?: FunctionCode;
  /** Instruction set of both functions (`Architecture`). @default lambda.Architecture.ARM_64 */
  readonly architecture?: lambda.Architecture;

  /**
   * The bucket DMS writes to (`LandingBucketName`). A bucket of this app gets EventBridge
   * notifications turned on; an imported one must have them on (infra/README.md, "Using
   * existing buckets").
   * @default a bucket this construct creates, retained, with EventBridge notifications on
   */
  readonly landingBucket?: s3.IBucket;
  /** Key prefix DMS writes under, the endpoint's BucketFolder + '/'; '' = whole bucket (`DmsPrefix`). @default 'dms/' */
  readonly dmsPrefix?: string;
  /** Customer managed key of the DMS files (`LandingBucketKmsKeyArn`). @default none */
  readonly landingKey?: kms.IKey;
  /** A created landing bucket: delete DMS files this many days after they land (`LandingExpirationDays`). @default keep */
  readonly landingExpiration?: Duration;

  /** Where the tables live (`Catalog` and the `Rest*` parameters). @default { kind: 'glue' } */
  readonly catalog?: CatalogProps;
  /** The warehouse (`WarehouseBucketName`, `WarehousePrefix`, `WarehouseKmsKeyArn`). */
  readonly warehouse?: WarehouseProps;
  /** The database (`GlueDatabaseName`, `CreateGlueDatabase`). */
  readonly database?: DatabaseProps;

  /**
   * The tables' settings, typed, rendered to TOML in the Parameter Store parameter
   * /dms2iceberg/<stack>/config that ingest reads at every invocation (`TablesConfig`).
   * @default { defaults: RECOMMENDED_DEFAULTS }, no table
   */
  readonly tables?: TablesConfig;
  /** The same as TOML text, instead of `tables`. */
  readonly tablesToml?: string;
  /** s3://bucket/key of the config instead of the parameter (`ConfigS3Uri`). */
  readonly configS3Uri?: string;
  /** Iceberg format version of the tables ingest creates (`FormatVersion`; a table's formatVersion wins). @default 2 */
  readonly formatVersion?: 2 | 3;
  /** RUST_LOG of both functions (`LogLevel`). @default 'info' */
  readonly logLevel?: string;

  /** The ingest function and its queue. */
  readonly ingest?: IngestProps;
  /** The compact function and its schedules. */
  readonly compact?: CompactProps;

  /** Alarm when a landed file waits this many minutes (5 to 1440; `LagAlarmMinutes`). @default 30 */
  readonly lagAlarmMinutes?: number;
  /** An e-mail address every alarm notifies, through a topic this construct creates (`AlarmEmail`). @default none */
  readonly alarmEmail?: string;
  /** A topic of yours every alarm notifies (`AlarmTopicArn`). @default none */
  readonly alarmTopic?: sns.ITopic;
  /** Metrics per table besides the totals (`TableMetrics`). @default false */
  readonly tableMetrics?: boolean;
  /** A CloudWatch dashboard (`Dashboard`). @default true */
  readonly dashboard?: boolean;
  /** Both log groups' retention (`LogRetentionDays`). @default logs.RetentionDays.ONE_MONTH */
  readonly logRetention?: logs.RetentionDays;
  /** The role DMS assumes to write under the prefix (`CreateDmsTargetRole`). @default true */
  readonly createDmsTargetRole?: boolean;
}

const KMS_KEY_ARN = /^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key\/[A-Za-z0-9-]+$/;
const TABLE_BUCKET_ARN = /^arn:aws[a-z-]*:s3tables:[a-z0-9-]+:[0-9]{12}:bucket\/[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/;
const PREFIX = /^$|^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*\/$/;
const URI = /^https?:\/\/[^\s]+$/;

/** Seconds of a `rate(...)` schedule expression; undefined for cron or tokens. */
function rateSeconds(expr: string): number | undefined {
  const m = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/.exec(expr);
  if (!m) return undefined;
  const unit = m[2].startsWith('minute') ? 60 : m[2].startsWith('hour') ? 3600 : 86400;
  return Number(m[1]) * unit;
}

/** Keep track of the one construct per stack. */
const STACKS = new WeakSet<Stack>();

/**
 * dms2iceberg on AWS: what template.yaml deploys, for a CDK app. The ingest function applies
 * each DMS file landing under the prefix (S3 -> EventBridge rule -> SQS -> Lambda, a dead-letter
 * queue behind), the compact function runs on two schedules, alarms and a dashboard watch them,
 * and each function's role holds only what its catalog needs. One per stack.
 */
export class Dms2Iceberg extends Construct {
  /** The bucket DMS writes to. */
  public readonly landingBucket: s3.IBucket;
  /** The warehouse bucket (Glue, or a REST catalog's named bucket). */
  public readonly warehouseBucket?: s3.IBucket;
  /** The table bucket's ARN (S3 Tables). */
  public readonly tableBucketArn?: string;
  /** The database (namespace) of the tables, as deployed (the Parameter Store parameter's value). */
  public readonly databaseName: string;
  /** The table settings' parameter (unless `configS3Uri`). */
  public readonly configParameter?: ssm.IStringParameter;
  /** The config as rendered (unless `configS3Uri`). */
  public readonly tablesToml?: string;
  public readonly ingestQueue: sqs.Queue;
  public readonly deadLetterQueue: sqs.Queue;
  public readonly ingestFunction: lambda.Function;
  public readonly compactFunction: lambda.Function;
  public readonly ingestLogGroup: logs.LogGroup;
  public readonly compactLogGroup: logs.LogGroup;
  public readonly ingestRole: iam.Role;
  public readonly compactRole: iam.Role;
  /** The EventBridge rule of the DMS files. */
  public readonly rule: events.Rule;
  /** The role DMS assumes (the endpoint's ServiceAccessRoleArn), unless `createDmsTargetRole: false`. */
  public readonly dmsTargetRole?: iam.Role;
  /** The topic `alarmEmail` is subscribed to. */
  public readonly alarmEmailTopic?: sns.ITopic;
  /** Every alarm, by its name in template.yaml and docs/runbook.md. */
  public readonly alarms: Record<string, cloudwatch.CfnAlarm> = {};
  /** The dashboard's name, when there is one. */
  public readonly dashboardName?: string;
  /** The SAM template's outputs: name, value, description. */
  private readonly outputs: Array<{ name: string; value: string; description?: string }> = [];

  constructor(scope: Construct, id: string, props: Dms2IcebergProps = {}) {
    super(scope, id);
    const stack = Stack.of(this);
    if (STACKS.has(stack)) {
      throw new Error(
        `Dms2Iceberg: stack ${stack.node.path} already holds one. Its Parameter Store paths, log groups, dashboard, database and table bucket are named after the stack (as the SAM template's are): give a second deployment a stack of its own.`,
      );
    }

    const problems: string[] = [];
    const refuse = (msg: string) => problems.push(msg);
    const literal = (s: string | undefined): s is string => s !== undefined && !Token.isUnresolved(s);

    // ------------------------------------------------------------ inputs, as the template's parameters
    const catalog: CatalogProps = props.catalog ?? { kind: 'glue' };
    const kind = catalog.kind;
    if (!['glue', 's3tables', 'rest'].includes(kind)) refuse(`catalog.kind ${kind}: use glue, s3tables or rest`);
    const rest = kind === 'rest' ? (catalog as RestCatalog) : undefined;
    const auth: RestAuthentication = rest ? rest.authentication : 'none';
    if (rest && !['none', 'glue', 's3tables', 'token', 'credential'].includes(auth)) {
      refuse(`catalog.authentication ${auth}: use none, glue, s3tables, token or credential`);
    }
    const anyCatalog = catalog as Partial<RestCatalog> & Partial<S3TablesCatalog>;
    const useGlue = kind === 'glue';
    const useS3Tables = kind === 's3tables';
    const useRest = kind === 'rest';
    const restOnGlue = useRest && auth === 'glue';
    const restOnS3Tables = useRest && auth === 's3tables';
    const restElsewhere = useRest && !restOnGlue && !restOnS3Tables;
    const glueTables = useGlue || restOnGlue;
    const tableBucketTables = useS3Tables || restOnS3Tables;
    const vended = useRest && rest!.vendedCredentials === true;

    // The template's Rules, and what its parameters' patterns refuse.
    if (anyCatalog.tableBucketArn !== undefined && !tableBucketTables) {
      refuse('catalog.tableBucketArn is only used with kind s3tables, or kind rest with authentication s3tables.');
    }
    if (!useRest && (anyCatalog.authentication !== undefined || anyCatalog.uri !== undefined || anyCatalog.warehouse !== undefined || anyCatalog.secret !== undefined || anyCatalog.vendedCredentials)) {
      refuse('catalog: authentication, uri, warehouse, secret and vendedCredentials are only used with kind rest.');
    }
    if (rest) {
      if (restElsewhere && !rest.uri) refuse('catalog kind rest needs uri, unless authentication is glue or s3tables (their regional endpoints).');
      if ((auth === 'token' || auth === 'credential') && !rest.secret) {
        refuse('catalog authentication token or credential reads the token or client_id:client_secret from catalog.secret: give it.');
      }
      if (rest.secret && auth !== 'token' && auth !== 'credential') refuse('catalog.secret is only read with authentication token or credential.');
      if (rest.secretKey && !rest.secret) refuse('catalog.secretKey is the key of catalog.secret: give the secret too.');
      if ((rest.oauth2Uri !== undefined || rest.scope !== undefined) && auth !== 'credential') {
        refuse('catalog.oauth2Uri and catalog.scope are only used with authentication credential.');
      }
      if (rest.warehouse !== undefined && (auth === 'glue' || auth === 's3tables')) {
        refuse("Glue's endpoint gets this account's catalog and S3 Tables' the table bucket (catalog.tableBucketArn): catalog.warehouse is for other catalogs.");
      }
      for (const [name, v] of [['uri', rest.uri], ['oauth2Uri', rest.oauth2Uri]] as const) {
        if (literal(v) && !URI.test(v)) refuse(`catalog.${name} ${v}: an http(s) URI`);
      }
      if (rest.secret && rest.secret.secretFullArn === undefined) {
        refuse('catalog.secret: its full ARN (with the six-character suffix) is needed to grant it alone: use Secret.fromSecretCompleteArn, or a Secret of this app.');
      }
    }
    if (literal(anyCatalog.tableBucketArn) && !TABLE_BUCKET_ARN.test(anyCatalog.tableBucketArn)) {
      refuse(`catalog.tableBucketArn ${anyCatalog.tableBucketArn}: arn:aws:s3tables:<region>:<account>:bucket/<name>`);
    }

    const dmsPrefix = props.dmsPrefix ?? 'dms/';
    const warehousePrefix = props.warehouse?.prefix ?? 'warehouse/';
    if (!PREFIX.test(dmsPrefix)) refuse(`dmsPrefix ${JSON.stringify(dmsPrefix)}: '' or folders of A-Za-z0-9._- each ending with / (S3 event keys are URL-encoded; the rule's pattern must match them as they are)`);
    if (!PREFIX.test(warehousePrefix)) refuse(`warehouse.prefix ${JSON.stringify(warehousePrefix)}: '' or folders of A-Za-z0-9._- each ending with /`);
    if (dmsPrefix === warehousePrefix) refuse('dmsPrefix and warehouse.prefix must differ (the buckets may be the same).');
    if (props.warehouse?.bucket && tableBucketTables) {
      refuse('warehouse.bucket is not used with a table bucket (S3 Tables keeps the files): leave it out.');
    }
    const sameBucket = (() => {
      const l = props.landingBucket;
      const w = props.warehouse?.bucket;
      if (!l || !w) return false;
      if (l === w) return true;
      return literal(l.bucketName) && literal(w.bucketName) && l.bucketName === w.bucketName;
    })();
    if (sameBucket) {
      if (dmsPrefix === '' || warehousePrefix === '') {
        refuse('landingBucket and warehouse.bucket are the same bucket: dmsPrefix and warehouse.prefix must both be set, and neither may contain the other (an empty dmsPrefix would send the warehouse\'s own Parquet writes to the ingest function).');
      } else if (dmsPrefix.startsWith(warehousePrefix) || warehousePrefix.startsWith(dmsPrefix)) {
        refuse(`landingBucket and warehouse.bucket are the same bucket: neither prefix may start with the other (${dmsPrefix}, ${warehousePrefix}): use two top-level folders, dms/ and warehouse/.`);
      }
    }
    const keyArn = (name: string, key: kms.IKey | undefined): string | undefined => {
      if (!key) return undefined;
      const arn = key.keyArn;
      if (literal(arn) && !KMS_KEY_ARN.test(arn)) refuse(`${name} ${arn}: a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>), not an alias`);
      return arn;
    };
    const landingKeyArn = keyArn('landingKey', props.landingKey);
    const warehouseKeyArn = keyArn('warehouse.key', props.warehouse?.key);
    const secretKeyArn = keyArn('catalog.secretKey', rest?.secretKey ?? rest?.secret?.encryptionKey);
    if (props.landingExpiration && props.landingBucket) refuse('landingExpiration applies to a landing bucket this construct creates: set a lifecycle rule on yours.');

    const dbName = props.database?.name;
    if (literal(dbName)) {
      if (!/^[a-z0-9_]{1,255}$/.test(dbName)) refuse(`database.name ${dbName}: lower-case letters, digits and _ (as Athena requires)`);
      if (tableBucketTables && (dbName.startsWith('_') || dbName.endsWith('_'))) refuse(`database.name ${dbName}: S3 Tables refuses a namespace with _ at either end`);
    }
    if (props.database?.create !== undefined && !glueTables) refuse('database.create applies to the Glue Data Catalog (kind glue, or rest with authentication glue) only.');

    const ingest = props.ingest ?? {};
    const compact = props.compact ?? {};
    const num = (name: string, v: number | undefined, dflt: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
      const x = v ?? dflt;
      if (!Number.isInteger(x) || x < min || x > max) refuse(`${name} ${x}: a whole number from ${min}${max === Number.MAX_SAFE_INTEGER ? '' : ` to ${max}`}`);
      return x;
    };
    const secs = (name: string, d: Duration | undefined, dflt: number, min: number, max: number) => num(name, d?.toSeconds(), dflt, min, max);
    const mib = (name: string, s: Size | undefined, dflt: number) => num(name, s?.toMebibytes(), dflt, 512, 10240);
    const ingestMemory = num('ingest.memorySize', ingest.memorySize, 1769, 128, 10240);
    const ingestTimeout = secs('ingest.timeout', ingest.timeout, 300, 10, 900);
    const ingestStorage = mib('ingest.ephemeralStorageSize', ingest.ephemeralStorageSize, 4096);
    const parallelLoads = num('ingest.parallelLoads', ingest.parallelLoads, 1, 1, 16);
    const maxFilesPerCommit = num('ingest.maxFilesPerCommit', ingest.maxFilesPerCommit, 1, 1);
    const maxFilesPerInvocation = num('ingest.maxFilesPerInvocation', ingest.maxFilesPerInvocation, 100, 1);
    const batchSize = num('ingest.batchSize', ingest.batchSize, 10, 1, 10000);
    const batchingWindow = secs('ingest.maxBatchingWindow', ingest.maxBatchingWindow, 5, 0, 300);
    const maxConcurrency = num('ingest.maxConcurrency', ingest.maxConcurrency, 5, 2, 1000);
    const reserved = ingest.reservedConcurrentExecutions;
    if (reserved !== undefined) num('ingest.reservedConcurrentExecutions', reserved, 0, 0);
    const visibility = secs('ingest.visibilityTimeout', ingest.visibilityTimeout, 1800, 60, 43200);
    const maxReceive = num('ingest.maxReceiveCount', ingest.maxReceiveCount, 5, 1, 1000);
    if (batchSize > 10 && batchingWindow < 1) refuse(`ingest.batchSize ${batchSize} needs maxBatchingWindow of at least 1 second (SQS event sources above 10 messages).`);
    if (visibility < ingestTimeout) refuse(`ingest.visibilityTimeout ${visibility}s is below ingest.timeout ${ingestTimeout}s: Lambda refuses it (AWS recommends 6 x the timeout).`);
    if (reserved !== undefined && reserved > 0 && reserved < maxConcurrency) {
      refuse(`ingest.reservedConcurrentExecutions ${reserved} is below ingest.maxConcurrency ${maxConcurrency}: throttled batches count as receives and reach the dead-letter queue. Keep it at least maxConcurrency (or 0 to pause).`);
    }
    const compactMemory = num('compact.memorySize', compact.memorySize, 3008, 128, 10240);
    const compactTimeout = secs('compact.timeout', compact.timeout, 240, 60, 900);
    const compactStorage = mib('compact.ephemeralStorageSize', compact.ephemeralStorageSize, 2048);
    const compaction = compact.compaction ?? 'auto';
    if (!['auto', 'on', 'off'].includes(compaction)) refuse(`compact.compaction ${compaction}: auto, on or off`);
    const compactMaxBytes = num('compact.maxBytes', compact.maxBytes, 1073741824, 1);
    const retentionHours = num('compact.snapshotRetentionHours', compact.snapshotRetentionHours, 168, 1);
    const retainMax = num('compact.snapshotRetainMax', compact.snapshotRetainMax, 200, 0);
    const orphanHours = num('compact.orphanMinAgeHours', compact.orphanMinAgeHours, 72, 1);
    const schedule = compact.schedule ?? events.Schedule.expression('rate(5 minutes)');
    const maintenance = compact.maintenanceSchedule ?? events.Schedule.expression('rate(1 hour)');
    for (const [name, s] of [['compact.schedule', schedule], ['compact.maintenanceSchedule', maintenance]] as const) {
      const every = rateSeconds(s.expressionString);
      if (every !== undefined && compactTimeout > every - 60) {
        refuse(`compact.timeout ${compactTimeout}s must be at least a minute below ${name} (${s.expressionString}), so that a run ends before the next one starts.`);
      }
    }
    const lagMinutes = num('lagAlarmMinutes', props.lagAlarmMinutes, 30, 5, 1440);
    if (props.alarmEmail !== undefined && literal(props.alarmEmail) && !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(props.alarmEmail)) {
      refuse(`alarmEmail ${props.alarmEmail}: an e-mail address`);
    }
    const formatVersion = String(props.formatVersion ?? 2);

    const configSources = [props.tables, props.tablesToml, props.configS3Uri].filter((x) => x !== undefined).length;
    if (configSources > 1) refuse('tables, tablesToml and configS3Uri are three places for the one config: give one.');
    if (props.configS3Uri !== undefined && !/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\/.+$/.test(props.configS3Uri)) {
      refuse(`configS3Uri ${props.configS3Uri}: s3://bucket/key`);
    }
    let toml: string | undefined;
    if (props.configS3Uri === undefined) {
      if (props.tablesToml !== undefined) {
        toml = props.tablesToml;
      } else {
        const t = props.tables ?? {};
        for (const p of tablesConfigProblems(t, formatVersion)) refuse(`tables: ${p}`);
        try {
          toml = renderTablesToml(t);
        } catch (e) {
          refuse(`tables: ${(e as Error).message}`);
        }
      }
      if (toml !== undefined && Buffer.byteLength(toml) > 8192) {
        refuse(`the table settings are ${Buffer.byteLength(toml)} bytes: a Parameter Store parameter holds 8 KB at most (Advanced tier): use globs, or put the file in S3 (configS3Uri).`);
      }
    }

    const architecture = props.architecture ?? lambda.Architecture.ARM_64;
    let code: { ingest: lambda.Code; compact: lambda.Code } | undefined;
    try {
      code = (props.code ?? FunctionCode.fromCargoLambda(path.resolve(__dirname, '..', '..', '..', 'target', 'lambda'))).bind(architecture);
    } catch (e) {
      refuse((e as Error).message.replace(/^Dms2Iceberg: /, ''));
    }

    if (problems.length) {
      throw new Error(`Dms2Iceberg ${this.node.path}: ${problems.length === 1 ? problems[0] : '\n  - ' + problems.join('\n  - ')}`);
    }
    STACKS.add(stack);

    // ------------------------------------------------------------ configuration
    const base = `/dms2iceberg/${Aws.STACK_NAME}`;
    let configParameter: ssm.StringParameter | undefined;
    if (toml !== undefined) {
      configParameter = new ssm.StringParameter(this, 'ConfigParameter', {
        parameterName: `${base}/config`,
        simpleName: false,
        description: 'dms2iceberg table settings (TOML), read by the ingest function at every invocation',
        stringValue: toml,
        tier: ssm.ParameterTier.INTELLIGENT_TIERING,
      });
      this.configParameter = configParameter;
      this.tablesToml = toml;
    }
    const databaseParameter = new ssm.StringParameter(this, 'DatabaseName', {
      parameterName: `${base}/glue-database`,
      simpleName: false,
      description: "The Glue database (S3 Tables or REST namespace) of this dms2iceberg stack's tables",
      allowedPattern: '^[a-z0-9_]{1,255}$',
      stringValue: dbName ?? Fn.join('_', ['dms2iceberg', Fn.select(0, Fn.split('-', Fn.select(2, Fn.split('/', Aws.STACK_ID))))]),
    });
    const db = databaseParameter.stringValue;
    this.databaseName = db;

    // ------------------------------------------------------------ storage
    const secureTransport = (bucket: s3.Bucket) =>
      bucket.addToResourcePolicy(
        new iam.PolicyStatement({
          sid: 'DenyInsecureTransport',
          effect: iam.Effect.DENY,
          principals: [new iam.StarPrincipal()],
          actions: ['s3:*'],
          resources: [bucket.bucketArn, bucket.arnForObjects('*')],
          conditions: { Bool: { 'aws:SecureTransport': 'false' } },
        }),
      );
    const encrypted = (key: kms.IKey | undefined) =>
      key
        ? { encryption: s3.BucketEncryption.KMS, encryptionKey: key, bucketKeyEnabled: true }
        : { encryption: s3.BucketEncryption.S3_MANAGED };
    const abortUploads: s3.LifecycleRule = { id: 'abort-incomplete-multipart-uploads', abortIncompleteMultipartUploadAfter: Duration.days(7) };

    let landing: s3.IBucket;
    if (props.landingBucket) {
      landing = props.landingBucket;
      const cfn = landing.node.defaultChild;
      if (cfn instanceof s3.CfnBucket) {
        // A bucket of this app: EventBridge notifications on, as for a bucket the construct creates.
        cfn.addPropertyOverride('NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled', true);
      }
    } else {
      const b = new s3.Bucket(this, 'LandingBucket', {
        ...encrypted(props.landingKey),
        blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
        objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        removalPolicy: RemovalPolicy.RETAIN,
        lifecycleRules: [
          abortUploads,
          ...(props.landingExpiration
            ? [{ id: 'expire-applied-dms-files', prefix: dmsPrefix, expiration: props.landingExpiration }]
            : []),
        ],
      });
      (b.node.defaultChild as s3.CfnBucket).addPropertyOverride('NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled', true);
      secureTransport(b);
      landing = b;
    }
    this.landingBucket = landing;

    let warehouse: s3.IBucket | undefined = props.warehouse?.bucket;
    if (!warehouse && glueTables) {
      const b = new s3.Bucket(this, 'WarehouseBucket', {
        ...encrypted(props.warehouse?.key),
        blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
        objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        removalPolicy: RemovalPolicy.RETAIN,
        lifecycleRules: [abortUploads],
      });
      secureTransport(b);
      warehouse = b;
    }
    this.warehouseBucket = warehouse;

    let tableBucketArn: string | undefined;
    if (tableBucketTables) {
      if (anyCatalog.tableBucketArn) {
        tableBucketArn = anyCatalog.tableBucketArn;
      } else {
        const tb = new s3tables.CfnTableBucket(this, 'TableBucket', {
          tableBucketName: Fn.join('-', ['dms2iceberg', Fn.select(2, Fn.split('/', Aws.STACK_ID))]),
          encryptionConfiguration: warehouseKeyArn ? { sseAlgorithm: 'aws:kms', kmsKeyArn: warehouseKeyArn } : undefined,
        });
        tb.applyRemovalPolicy(RemovalPolicy.RETAIN);
        tableBucketArn = tb.attrTableBucketArn;
      }
    }
    this.tableBucketArn = tableBucketArn;

    if (glueTables && props.database?.create !== false) {
      const gdb = new glue.CfnDatabase(this, 'GlueDatabase', {
        catalogId: Aws.ACCOUNT_ID,
        databaseInput: {
          name: db,
          description: 'Iceberg tables maintained by dms2iceberg from AWS DMS output.',
          locationUri: `s3://${warehouse!.bucketName}/${warehousePrefix}`,
        },
      });
      gdb.applyRemovalPolicy(RemovalPolicy.RETAIN);
    }

    // ------------------------------------------------------------ events and queues
    const dlq = new sqs.Queue(this, 'IngestDeadLetterQueue', {
      retentionPeriod: Duration.seconds(1209600),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const queue = new sqs.Queue(this, 'IngestQueue', {
      visibilityTimeout: Duration.seconds(visibility),
      retentionPeriod: Duration.seconds(345600),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      deadLetterQueue: { queue: dlq, maxReceiveCount: maxReceive },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.deadLetterQueue = dlq;
    this.ingestQueue = queue;

    const rule = new events.Rule(this, 'DmsObjectCreatedRule', {
      description: 'DMS files created or deleted under the landing prefix -> ingest queue',
      enabled: true,
      eventPattern: {
        source: ['aws.s3'],
        detailType: ['Object Created', 'Object Deleted'],
        detail: {
          bucket: { name: [landing.bucketName] },
          object: {
            key: [
              { wildcard: `${dmsPrefix}*.csv` },
              { wildcard: `${dmsPrefix}*.csv.gz` },
              { wildcard: `${dmsPrefix}*.parquet` },
            ],
          },
        },
      },
    });
    // The queue as the target, with no grant of its own: the queue policy below is the template's.
    rule.addTarget({
      bind: () => ({
        arn: queue.queueArn,
        retryPolicy: { maximumRetryAttempts: 185, maximumEventAgeInSeconds: 86400 },
        deadLetterConfig: { arn: dlq.queueArn },
      }),
    });
    (rule.node.defaultChild as events.CfnRule).addPropertyOverride('Targets.0.Id', 'ingest-queue');
    this.rule = rule;

    queue.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'EventBridgeRuleSends',
        principals: [new iam.ServicePrincipal('events.amazonaws.com')],
        actions: ['sqs:SendMessage'],
        resources: [queue.queueArn],
        conditions: { ArnEquals: { 'aws:SourceArn': rule.ruleArn } },
      }),
    );
    queue.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'LandingBucketNotificationsSend',
        principals: [new iam.ServicePrincipal('s3.amazonaws.com')],
        actions: ['sqs:SendMessage'],
        resources: [queue.queueArn],
        conditions: {
          ArnEquals: { 'aws:SourceArn': landing.bucketArn },
          StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID },
        },
      }),
    );
    dlq.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'EventBridgeRuleDeadLetters',
        principals: [new iam.ServicePrincipal('events.amazonaws.com')],
        actions: ['sqs:SendMessage'],
        resources: [dlq.queueArn],
        conditions: { ArnEquals: { 'aws:SourceArn': rule.ruleArn } },
      }),
    );

    // ------------------------------------------------------------ logs
    const logGroup = (id: string, fn: string) =>
      new logs.LogGroup(this, id, {
        logGroupName: `${base}/${fn}`,
        retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
        removalPolicy: RemovalPolicy.DESTROY,
      });
    this.ingestLogGroup = logGroup('IngestLogGroup', 'ingest');
    this.compactLogGroup = logGroup('CompactLogGroup', 'compact');

    // ------------------------------------------------------------ IAM (inline, no managed policy)
    const warehouseGrants = useGlue || (restOnGlue && !vended) || (restElsewhere && warehouse !== undefined);
    const region = Aws.REGION;
    const urlSuffix = Aws.URL_SUFFIX;
    const glueArns = [
      Arn.format({ service: 'glue', resource: 'catalog' }, stack),
      Arn.format({ service: 'glue', resource: 'database', resourceName: db }, stack),
      Arn.format({ service: 'glue', resource: 'table', resourceName: `${db}/*` }, stack),
    ];
    const statement = (sid: string, actions: string[], resources: string[], conditions?: Record<string, unknown>) =>
      new iam.PolicyStatement({ sid, actions, resources, conditions });
    const warehouseStatements = (): iam.PolicyStatement[] =>
      warehouseGrants
        ? [
            statement('ReadWriteWarehouse', ['s3:GetObject', 's3:PutObject', 's3:DeleteObject', 's3:AbortMultipartUpload'], [warehouse!.arnForObjects(`${warehousePrefix}*`)]),
            statement('ListWarehousePrefix', ['s3:ListBucket'], [warehouse!.bucketArn], { StringLike: { 's3:prefix': `${warehousePrefix}*` } }),
          ]
        : [];
    const tableBucketStatements = (first: iam.PolicyStatement): iam.PolicyStatement[] =>
      tableBucketTables
        ? [
            first,
            statement(
              'S3TablesCommitAndData',
              ['s3tables:GetTableMetadataLocation', 's3tables:UpdateTableMetadataLocation', 's3tables:GetTableData', 's3tables:PutTableData'],
              [`${tableBucketArn}/table/*`],
            ),
          ]
        : [];
    const restStatements = (glueActions: string[]): iam.PolicyStatement[] => [
      ...(restOnGlue ? [statement('GlueIcebergRest', glueActions, glueArns)] : []),
      ...(restOnS3Tables ? [statement('S3TablesIcebergRestConfig', ['s3tables:GetTableBucket'], [tableBucketArn!])] : []),
      // GetDataAccess has no resource type (IAM allows it on "*" only): Lake Formation's grants
      // on the database and its location decide what it vends.
      ...(restOnGlue && vended ? [statement('LakeFormationVendedCredentials', ['lakeformation:GetDataAccess'], ['*'])] : []),
      ...(rest?.secret && (auth === 'token' || auth === 'credential')
        ? [statement('ReadRestSecret', ['secretsmanager:GetSecretValue'], [rest.secret.secretFullArn!])]
        : []),
      ...(rest?.secret && secretKeyArn
        ? [statement('DecryptRestSecret', ['kms:Decrypt'], [secretKeyArn], { StringEquals: { 'kms:ViaService': `secretsmanager.${region}.${urlSuffix}` } })]
        : []),
    ];
    const keyStatements = (): iam.PolicyStatement[] => [
      ...(warehouseKeyArn && warehouseGrants
        ? [statement('WarehouseKeyThroughS3', ['kms:GenerateDataKey', 'kms:Decrypt'], [warehouseKeyArn], { StringEquals: { 'kms:ViaService': `s3.${region}.${urlSuffix}` } })]
        : []),
      // The table bucket's key: S3 Tables reads and writes the tables' files with it on the
      // caller's behalf (its kms:ViaService value is not documented: no condition).
      ...(warehouseKeyArn && tableBucketTables ? [statement('TableBucketKey', ['kms:GenerateDataKey', 'kms:Decrypt'], [warehouseKeyArn])] : []),
    ];

    const ingestStatements: iam.PolicyStatement[] = [
      statement('ReadDmsFiles', ['s3:GetObject'], [landing.arnForObjects(`${dmsPrefix}*`)]),
      statement('ListDmsPrefix', ['s3:ListBucket'], [landing.bucketArn], { StringLike: { 's3:prefix': `${dmsPrefix}*` } }),
      ...warehouseStatements(),
      ...(useGlue
        ? [statement('GlueCatalog', ['glue:GetDatabase', 'glue:CreateDatabase', 'glue:GetTable', 'glue:GetTables', 'glue:CreateTable', 'glue:UpdateTable'], glueArns)]
        : []),
      ...tableBucketStatements(statement('S3TablesNamespacesAndTables', ['s3tables:CreateNamespace', 's3tables:CreateTable'], [tableBucketArn!])),
      ...restStatements(['glue:GetCatalog', 'glue:GetDatabase', 'glue:CreateDatabase', 'glue:GetTable', 'glue:CreateTable', 'glue:UpdateTable']),
      statement('ConsumeIngestQueue', ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:ChangeMessageVisibility', 'sqs:GetQueueAttributes'], [queue.queueArn]),
      statement('DeadLetterAtOnce', ['sqs:SendMessage'], [dlq.queueArn]),
      statement('WriteOwnLogs', ['logs:CreateLogStream', 'logs:PutLogEvents'], [this.ingestLogGroup.logGroupArn]),
      ...(props.configS3Uri !== undefined
        ? [statement('ReadConfig', ['s3:GetObject'], [`arn:${Aws.PARTITION}:s3:::${props.configS3Uri.slice('s3://'.length)}`])]
        : []),
      ...(configParameter
        ? [statement('ReadConfigParameter', ['ssm:GetParameter'], [`arn:${Aws.PARTITION}:ssm:${region}:${Aws.ACCOUNT_ID}:parameter${configParameter.parameterName}`])]
        : []),
      ...(landingKeyArn ? [statement('DecryptDmsFiles', ['kms:Decrypt'], [landingKeyArn])] : []),
      ...keyStatements(),
    ];
    const compactStatements: iam.PolicyStatement[] = [
      ...warehouseStatements(),
      ...(useGlue ? [statement('GlueCatalog', ['glue:GetDatabase', 'glue:GetTable', 'glue:GetTables', 'glue:UpdateTable'], glueArns)] : []),
      ...tableBucketStatements(statement('S3TablesList', ['s3tables:ListTables'], [tableBucketArn!])),
      ...restStatements(['glue:GetCatalog', 'glue:GetDatabase', 'glue:GetTable', 'glue:GetTables', 'glue:UpdateTable']),
      statement('WriteOwnLogs', ['logs:CreateLogStream', 'logs:PutLogEvents'], [this.compactLogGroup.logGroupArn]),
      ...keyStatements(),
    ];
    const lambdaRole = (id: string, description: string, policy: string, statements: iam.PolicyStatement[]) =>
      new iam.Role(this, id, {
        description,
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
        inlinePolicies: { [policy]: new iam.PolicyDocument({ statements }) },
      });
    this.ingestRole = lambdaRole('IngestRole', 'dms2iceberg ingest function', 'ingest', ingestStatements);
    this.compactRole = lambdaRole('CompactRole', 'dms2iceberg compact function (no access to the landing bucket)', 'compact', compactStatements);

    if (props.createDmsTargetRole !== false) {
      this.dmsTargetRole = new iam.Role(this, 'DmsTargetRole', {
        description: 'Assumed by AWS DMS to write full-load and change files under the landing prefix',
        assumedBy: new iam.ServicePrincipal('dms.amazonaws.com', { conditions: { StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID } } }),
        inlinePolicies: {
          'dms-s3-target': new iam.PolicyDocument({
            statements: [
              statement('WriteDmsFiles', ['s3:PutObject', 's3:DeleteObject', 's3:PutObjectTagging'], [landing.arnForObjects(`${dmsPrefix}*`)]),
              statement('ListLandingBucket', ['s3:ListBucket'], [landing.bucketArn]),
              ...(landingKeyArn ? [statement('EncryptDmsFiles', ['kms:GenerateDataKey', 'kms:Encrypt', 'kms:Decrypt', 'kms:DescribeKey'], [landingKeyArn])] : []),
            ],
          }),
        },
      });
    }

    // ------------------------------------------------------------ functions
    const commonEnv: Record<string, string> = {
      DMS2ICEBERG_CATALOG: kind,
      DMS2ICEBERG_WAREHOUSE: useGlue ? `s3://${warehouse!.bucketName}/${warehousePrefix}` : '',
      DMS2ICEBERG_TABLE_BUCKET_ARN: useS3Tables ? tableBucketArn! : '',
    };
    if (rest) {
      commonEnv.DMS2ICEBERG_REST_URI =
        rest.uri ?? (restOnGlue ? `https://glue.${region}.${urlSuffix}/iceberg` : `https://s3tables.${region}.${urlSuffix}/iceberg`);
      const restWarehouse = restOnGlue ? Aws.ACCOUNT_ID : restOnS3Tables ? tableBucketArn : rest.warehouse || undefined;
      if (restWarehouse !== undefined) commonEnv.DMS2ICEBERG_REST_WAREHOUSE = restWarehouse;
      if (restOnGlue) commonEnv.DMS2ICEBERG_REST_SIGV4 = 'glue';
      if (restOnS3Tables) commonEnv.DMS2ICEBERG_REST_SIGV4 = 's3tables';
      if (auth === 'token') commonEnv.DMS2ICEBERG_REST_TOKEN_SECRET = rest.secret!.secretFullArn!;
      if (auth === 'credential') {
        commonEnv.DMS2ICEBERG_REST_CREDENTIAL_SECRET = rest.secret!.secretFullArn!;
        if (rest.oauth2Uri) commonEnv.DMS2ICEBERG_REST_OAUTH2_URI = rest.oauth2Uri;
        if (rest.scope) commonEnv.DMS2ICEBERG_REST_SCOPE = rest.scope;
      }
      if (vended) commonEnv.DMS2ICEBERG_REST_VENDED_CREDENTIALS = 'true';
    }
    commonEnv.DMS2ICEBERG_GLUE_DATABASE = db;
    commonEnv.DMS2ICEBERG_TABLE_METRICS = props.tableMetrics ? 'on' : 'off';
    commonEnv.RUST_LOG = props.logLevel ?? 'info';
    commonEnv.DMS2ICEBERG_S3_PATH_STYLE = 'false';

    this.ingestFunction = new lambda.Function(this, 'IngestFunction', {
      description: 'Apply DMS files to Iceberg tables (S3 -> EventBridge -> SQS)',
      runtime: lambda.Runtime.PROVIDED_AL2023,
      handler: 'bootstrap',
      code: code!.ingest,
      architecture,
      role: this.ingestRole,
      memorySize: ingestMemory,
      timeout: Duration.seconds(ingestTimeout),
      ephemeralStorageSize: Size.mebibytes(ingestStorage),
      reservedConcurrentExecutions: reserved,
      logGroup: this.ingestLogGroup,
      environment: {
        ...commonEnv,
        DMS2ICEBERG_CONFIG: configParameter ? `ssm:${configParameter.parameterName}` : props.configS3Uri!,
        DMS2ICEBERG_DEAD_LETTER_QUEUE_URL: dlq.queueUrl,
        DMS2ICEBERG_MAX_FILES_PER_COMMIT: String(maxFilesPerCommit),
        DMS2ICEBERG_MAX_FILES_PER_INVOCATION: String(maxFilesPerInvocation),
        DMS2ICEBERG_PARALLEL_LOADS: String(parallelLoads),
        DMS2ICEBERG_FORMAT_VERSION: formatVersion,
      },
    });
    new lambda.EventSourceMapping(this, 'IngestFunctionDmsFiles', {
      target: this.ingestFunction,
      eventSourceArn: queue.queueArn,
      batchSize,
      maxBatchingWindow: Duration.seconds(batchingWindow),
      reportBatchItemFailures: true,
      maxConcurrency,
    });

    this.compactFunction = new lambda.Function(this, 'CompactFunction', {
      description: 'Compact dms2iceberg tables, expire old snapshots, remove orphan files (bounded per run)',
      runtime: lambda.Runtime.PROVIDED_AL2023,
      handler: 'bootstrap',
      code: code!.compact,
      architecture,
      role: this.compactRole,
      memorySize: compactMemory,
      timeout: Duration.seconds(compactTimeout),
      ephemeralStorageSize: Size.mebibytes(compactStorage),
      logGroup: this.compactLogGroup,
      environment: {
        ...commonEnv,
        DMS2ICEBERG_COMPACTION: restOnS3Tables && compaction === 'auto' ? 'off' : compaction,
        DMS2ICEBERG_COMPACT_MAX_BYTES: String(compactMaxBytes),
        DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS: String(retentionHours),
        DMS2ICEBERG_SNAPSHOT_RETAIN_MAX: String(retainMax),
        DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS: String(orphanHours),
      },
    });
    // A failed run is not retried (the next scheduled run picks the work up); a run the service
    // cannot start within a minute is dropped, so two runs of one schedule never overlap.
    this.compactFunction.configureAsyncInvoke({ retryAttempts: 0, maxEventAge: Duration.seconds(60) });
    const compactFn = this.compactFunction;
    const scheduled = (id: string, s: events.Schedule, description: string, tasks: string[], enabled: boolean) => {
      const r = new events.Rule(this, id, { schedule: s, description, enabled });
      r.addTarget({ bind: () => ({ arn: compactFn.functionArn, input: events.RuleTargetInput.fromObject({ tasks }) }) });
      (r.node.defaultChild as events.CfnRule).addPropertyOverride('Targets.0.Id', `${id}LambdaTarget`);
      new lambda.CfnPermission(this, `${id}Permission`, {
        action: 'lambda:InvokeFunction',
        functionName: compactFn.functionName,
        principal: 'events.amazonaws.com',
        sourceArn: r.ruleArn,
      });
    };
    scheduled('CompactFunctionSchedule', schedule, 'dms2iceberg compaction by read cost', ['compact'], true);
    // A REST catalog's storage is not listed for orphans (only expiry runs); S3 Tables' REST
    // endpoint maintains its tables itself.
    scheduled('CompactFunctionMaintenance', maintenance, 'dms2iceberg snapshot expiry and orphan files', useRest ? ['expire'] : ['expire', 'orphans'], !restOnS3Tables);

    // ------------------------------------------------------------ dashboard
    if (props.dashboard !== false) {
      const d = new cloudwatch.CfnDashboard(this, 'OperationsDashboard', {
        dashboardName: `${Aws.STACK_NAME}-dms2iceberg`,
        dashboardBody: stack.toJsonString(
          dashboardBody({
            stackName: Aws.STACK_NAME,
            region,
            ingest: this.ingestFunction.functionName,
            compact: this.compactFunction.functionName,
            queue: queue.queueName,
            deadLetterQueue: dlq.queueName,
            perTable: props.tableMetrics === true,
          }),
        ),
      });
      this.dashboardName = d.ref;
    }

    // ------------------------------------------------------------ alarms (docs/runbook.md)
    const actions: string[] = [];
    if (props.alarmTopic) actions.push(props.alarmTopic.topicArn);
    if (props.alarmEmail) {
      const topic = new sns.CfnTopic(this, 'AlarmTopic', {
        displayName: `dms2iceberg ${Aws.STACK_NAME}`,
        subscription: [{ protocol: 'email', endpoint: props.alarmEmail }],
      });
      this.alarmEmailTopic = sns.Topic.fromTopicArn(this, 'AlarmEmailTopic', topic.ref);
      actions.push(topic.ref);
    }
    const ingestName = this.ingestFunction.functionName;
    const compactName = this.compactFunction.functionName;
    const fnDim = (v: string) => [{ name: 'Function', value: v }];
    const lambdaDim = (v: string) => [{ name: 'FunctionName', value: v }];
    const alarm = (id: string, p: Omit<cloudwatch.CfnAlarmProps, 'alarmActions' | 'treatMissingData'> & { comparisonOperator: string }) => {
      this.alarms[id] = new cloudwatch.CfnAlarm(this, id, { ...p, treatMissingData: 'notBreaching', alarmActions: actions.length ? [...actions] : undefined });
    };
    const simple = (id: string, description: string, namespace: string, metricName: string, dimensions: cloudwatch.CfnAlarm.DimensionProperty[], statistic: string, extra: Partial<cloudwatch.CfnAlarmProps> = {}) =>
      alarm(id, {
        alarmDescription: `${description} (docs/runbook.md, "${id}")`,
        namespace,
        metricName,
        dimensions,
        statistic,
        period: 300,
        evaluationPeriods: 1,
        threshold: 1,
        comparisonOperator: 'GreaterThanOrEqualToThreshold',
        ...extra,
      });
    simple('DeadLetterQueueAlarm', 'DMS file events wait in the dead-letter queue', 'AWS/SQS', 'ApproximateNumberOfMessagesVisible', [{ name: 'QueueName', value: dlq.queueName }], 'Maximum', {
      threshold: 0,
      comparisonOperator: 'GreaterThanThreshold',
    });
    simple('FilesFailedAlarm', 'A DMS file failed to apply in the last 5 minutes', 'dms2iceberg', 'FilesFailed', fnDim(ingestName), 'Sum');
    simple('FilesDeadLetteredAlarm', 'A DMS file can never be applied as things are and went to the dead-letter queue', 'dms2iceberg', 'FilesDeadLettered', fnDim(ingestName), 'Sum');
    simple('TableBlockedAlarm', 'A table is held back behind a failed DMS file', 'dms2iceberg', 'TablesBlocked', fnDim(ingestName), 'Maximum', {
      evaluationPeriods: 7,
      datapointsToAlarm: 2,
    });
    const stat = (id: string, namespace: string, metricName: string, dimensions: cloudwatch.CfnAlarm.DimensionProperty[], period: number, s: string): cloudwatch.CfnAlarm.MetricDataQueryProperty => ({
      id,
      returnData: false,
      metricStat: { metric: { namespace, metricName, dimensions }, period, stat: s },
    });
    const expr = (id: string, label: string, expression: string): cloudwatch.CfnAlarm.MetricDataQueryProperty => ({ id, label, expression, returnData: true });
    alarm('LagAlarm', {
      alarmDescription: `A landed DMS file has waited more than ${lagMinutes} minutes to be applied (docs/runbook.md, "LagAlarm")`,
      metrics: [stat('age', 'dms2iceberg', 'BacklogAgeSeconds', fnDim(ingestName), 300, 'Maximum'), expr('minutes', 'oldest unapplied DMS file (minutes)', 'age / 60')],
      evaluationPeriods: 7,
      datapointsToAlarm: 1,
      threshold: lagMinutes,
      comparisonOperator: 'GreaterThanThreshold',
    });
    alarm('IngestQueueAgeAlarm', {
      alarmDescription: `A DMS file event has waited more than ${lagMinutes} minutes in the ingest queue (docs/runbook.md, "IngestQueueAgeAlarm")`,
      metrics: [
        stat('age', 'AWS/SQS', 'ApproximateAgeOfOldestMessage', [{ name: 'QueueName', value: queue.queueName }], 300, 'Maximum'),
        expr('minutes', 'oldest queued event (minutes)', 'age / 60'),
      ],
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      threshold: lagMinutes,
      comparisonOperator: 'GreaterThanThreshold',
    });
    alarm('IngestErrorsAlarm', {
      alarmDescription: 'Ingest invocations failed or were throttled (docs/runbook.md, "IngestErrorsAlarm")',
      metrics: [
        stat('errors', 'AWS/Lambda', 'Errors', lambdaDim(ingestName), 300, 'Sum'),
        stat('throttles', 'AWS/Lambda', 'Throttles', lambdaDim(ingestName), 300, 'Sum'),
        expr('failed', 'failed or throttled invocations', 'FILL(errors, 0) + FILL(throttles, 0)'),
      ],
      evaluationPeriods: 1,
      threshold: 1,
      comparisonOperator: 'GreaterThanOrEqualToThreshold',
    });
    alarm('CompactionFailingAlarm', {
      alarmDescription: 'Compaction or maintenance failed in the last hour (docs/runbook.md, "CompactionFailingAlarm")',
      metrics: [
        stat('errors', 'AWS/Lambda', 'Errors', lambdaDim(compactName), 3600, 'Sum'),
        stat('tables', 'dms2iceberg', 'TablesFailed', fnDim(compactName), 3600, 'Sum'),
        expr('failed', 'failed runs and tables', 'FILL(errors, 0) + FILL(tables, 0)'),
      ],
      evaluationPeriods: 1,
      threshold: 1,
      comparisonOperator: 'GreaterThanOrEqualToThreshold',
    });
    simple('TableRepairedAlarm', 'A damaged table was repaired; re-drive the dead-letter queue', 'dms2iceberg', 'TablesRepaired', fnDim(compactName), 'Sum');

    // ------------------------------------------------------------ the SAM template's outputs
    const out = (name: string, value: string, description?: string) => this.outputs.push({ name, value, description });
    out('LandingBucket', landing.bucketName, "Bucket DMS writes to (the endpoint's BucketName)");
    out('DmsPrefix', dmsPrefix, 'Key prefix DMS writes under (BucketFolder = this without the trailing "/")');
    if (glueTables) out('WarehouseLocation', `s3://${warehouse!.bucketName}/${warehousePrefix}`, 'Iceberg warehouse (DMS2ICEBERG_WAREHOUSE)');
    out('GlueDatabase', db, "Glue database of the tables (Catalog=s3tables, the table bucket's namespace; rest, the REST namespace)");
    if (configParameter) {
      out('ConfigParameterName', configParameter.parameterName, 'The Parameter Store parameter holding the table settings (aws ssm put-parameter --overwrite to change them)');
    }
    if (this.alarmEmailTopic) out('AlarmTopicArnCreated', this.alarmEmailTopic.topicArn, 'The SNS topic AlarmEmail is subscribed to (confirm the e-mail AWS sends)');
    if (tableBucketTables) out('TableBucketArn', tableBucketArn!, 'Table bucket of the tables (DMS2ICEBERG_TABLE_BUCKET_ARN; --catalog s3tables --warehouse)');
    if (useRest) out('RestCatalogUri', commonEnv.DMS2ICEBERG_REST_URI, 'The Iceberg REST catalog of the tables (DMS2ICEBERG_REST_URI; --catalog rest --uri)');
    out('IngestQueueUrl', queue.queueUrl, 'Queue of DMS file events');
    out('IngestQueueArn', queue.queueArn);
    out('DeadLetterQueueUrl', dlq.queueUrl, 'Events of files that failed QueueMaxReceiveCount times (re-drive with start-message-move-task)');
    out('DeadLetterQueueArn', dlq.queueArn);
    out('IngestFunctionName', this.ingestFunction.functionName);
    out('IngestFunctionArn', this.ingestFunction.functionArn);
    out('CompactFunctionName', this.compactFunction.functionName);
    out('CompactFunctionArn', this.compactFunction.functionArn);
    out('IngestLogGroupName', this.ingestLogGroup.logGroupName);
    out('CompactLogGroupName', this.compactLogGroup.logGroupName);
    out('DmsObjectCreatedRuleName', rule.ruleName);
    if (this.dashboardName) out('DashboardName', this.dashboardName);
    if (this.dmsTargetRole) out('DmsTargetRoleArn', this.dmsTargetRole.roleArn, 'ServiceAccessRoleArn for the DMS S3 target endpoint');
  }

  /**
   * The SAM template's stack outputs (LandingBucket, DmsTargetRoleArn, IngestQueueUrl, ...), with
   * its names, on the stack: infra/README.md's and docs/runbook.md's commands that read them
   * (`aws cloudformation describe-stacks ... OutputKey=='LandingBucket'`) work unchanged.
   */
  public addStackOutputs(): CfnOutput[] {
    const stack = Stack.of(this);
    return this.outputs.map(({ name, value, description }) => {
      const o = new CfnOutput(stack, name, { value, description });
      o.overrideLogicalId(name);
      return o;
    });
  }
}
