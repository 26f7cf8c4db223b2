// The construct and template.yaml deploy the same thing: for each deployment below, the SAM
// template (as the SAM translator transforms it, its conditions decided for the parameters) and
// the construct's synthesized stack (for the props that say the same) are resolved by one
// resolver (test/resolve.ts) and compared resource by resource: the same resources under the
// same names, each with the same properties (the functions' environment, memory, timeouts and
// architecture; every IAM statement with its actions, resources and conditions; the queues, the
// rule and its targets, the schedules, the alarms, the dashboard's widgets, the buckets, the
// parameters, the Glue database and table bucket, retention and deletion policies). Left out,
// and nothing else: the functions' code (an asset here, `sam build`'s there), SAM's
// `lambda:createdBy` tag, CDK's metadata, DependsOn, and SAM-local's AWS_ENDPOINT_URL, which no
// deployment has (the resolved account is not SAM's pseudo account). A change to either side
// that the other does not make fails here, naming the resource and the property.

import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { Duration, Size, Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Dms2IcebergProps } from '../lib';
import { diff, Json } from './resolve';
import { cdkResolver, FLAG_SETS, normalize, samResolver, synth } from './support';

type Obj = { [k: string]: Json };

const SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:dms2iceberg/rest-AbCdEf';
const KEY = (n: number) => `arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-00000000000${n}`;
const TABLE_BUCKET = 'arn:aws:s3tables:eu-west-1:123456789012:bucket/lake';
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:oncall';

interface Case {
  name: string;
  /** template.yaml's parameters (TablesConfig: the construct's rendered TOML, unless given). */
  sam: Record<string, string>;
  cdk: (stack: Stack) => Dms2IcebergProps;
}

const key = (stack: Stack, id: string, n: number) => kms.Key.fromKeyArn(stack, id, KEY(n));
const bucket = (stack: Stack, id: string, name: string) => s3.Bucket.fromBucketName(stack, id, name);
const secret = (stack: Stack) => secretsmanager.Secret.fromSecretCompleteArn(stack, 'Secret', SECRET_ARN);

export const CASES: Case[] = [
  { name: 'glue, every default', sam: {}, cdk: () => ({}) },
  {
    name: 'glue, existing buckets, database and keys, every setting changed',
    sam: {
      LandingBucketName: 'dms-landing',
      DmsPrefix: 'cdc/',
      LandingBucketKmsKeyArn: KEY(1),
      WarehouseBucketName: 'lake-warehouse',
      WarehousePrefix: 'iceberg/tables/',
      WarehouseKmsKeyArn: KEY(2),
      GlueDatabaseName: 'sales_lake',
      CreateGlueDatabase: 'false',
      FormatVersion: '3',
      LogLevel: 'dms2iceberg=debug,info',
      Architecture: 'x86_64',
      IngestMemorySize: '2048',
      IngestTimeout: '600',
      IngestEphemeralStorage: '8192',
      IngestParallelLoads: '4',
      MaxFilesPerCommit: '5',
      MaxFilesPerInvocation: '50',
      IngestBatchSize: '100',
      IngestBatchingWindowSeconds: '20',
      IngestMaxConcurrency: '8',
      IngestReservedConcurrency: '10',
      QueueVisibilityTimeout: '3600',
      QueueMaxReceiveCount: '3',
      CompactMemorySize: '4096',
      CompactTimeout: '480',
      CompactEphemeralStorage: '4096',
      CompactSchedule: 'rate(10 minutes)',
      MaintenanceSchedule: 'rate(2 hours)',
      Compaction: 'on',
      CompactMaxBytes: '2147483648',
      SnapshotRetentionHours: '48',
      SnapshotRetainMax: '100',
      OrphanMinAgeHours: '96',
      LagAlarmMinutes: '45',
      AlarmEmail: 'oncall@example.com',
      AlarmTopicArn: TOPIC,
      TableMetrics: 'on',
      LogRetentionDays: '90',
      CreateDmsTargetRole: 'false',
    },
    cdk: (stack) => ({
      landingBucket: bucket(stack, 'Landing', 'dms-landing'),
      dmsPrefix: 'cdc/',
      landingKey: key(stack, 'LandingKey', 1),
      warehouse: { bucket: bucket(stack, 'Warehouse', 'lake-warehouse'), prefix: 'iceberg/tables/', key: key(stack, 'WarehouseKey', 2) },
      database: { name: 'sales_lake', create: false },
      formatVersion: 3,
      logLevel: 'dms2iceberg=debug,info',
      architecture: lambda.Architecture.X86_64,
      ingest: {
        memorySize: 2048,
        timeout: Duration.minutes(10),
        ephemeralStorageSize: Size.gibibytes(8),
        parallelLoads: 4,
        maxFilesPerCommit: 5,
        maxFilesPerInvocation: 50,
        batchSize: 100,
        maxBatchingWindow: Duration.seconds(20),
        maxConcurrency: 8,
        reservedConcurrentExecutions: 10,
        visibilityTimeout: Duration.hours(1),
        maxReceiveCount: 3,
      },
      compact: {
        memorySize: 4096,
        timeout: Duration.minutes(8),
        ephemeralStorageSize: Size.mebibytes(4096),
        schedule: events.Schedule.rate(Duration.minutes(10)),
        maintenanceSchedule: events.Schedule.rate(Duration.hours(2)),
        compaction: 'on',
        maxBytes: 2147483648,
        snapshotRetentionHours: 48,
        snapshotRetainMax: 100,
        orphanMinAgeHours: 96,
      },
      lagAlarmMinutes: 45,
      alarmEmail: 'oncall@example.com',
      alarmTopic: sns.Topic.fromTopicArn(stack, 'Topic', TOPIC),
      tableMetrics: true,
      logRetention: logs.RetentionDays.THREE_MONTHS,
      createDmsTargetRole: false,
    }),
  },
  {
    name: 'glue, created buckets with keys, DMS files expiring, the config in S3, no dashboard',
    sam: {
      LandingBucketKmsKeyArn: KEY(1),
      WarehouseKmsKeyArn: KEY(2),
      LandingExpirationDays: '30',
      ConfigS3Uri: 's3://config-bucket/dms2iceberg/prod.toml',
      Dashboard: 'false',
    },
    cdk: (stack) => ({
      landingKey: key(stack, 'LandingKey', 1),
      warehouse: { key: key(stack, 'WarehouseKey', 2) },
      landingExpiration: Duration.days(30),
      configS3Uri: 's3://config-bucket/dms2iceberg/prod.toml',
      dashboard: false,
    }),
  },
  {
    name: 'glue, one existing bucket for the DMS files and the warehouse, the whole config typed',
    sam: { LandingBucketName: 'lake', WarehouseBucketName: 'lake', DmsPrefix: 'dms/', WarehousePrefix: 'warehouse/' },
    cdk: (stack) => {
      const b = bucket(stack, 'Lake', 'lake');
      return {
        landingBucket: b,
        warehouse: { bucket: b },
        tables: {
          source: { bucketFolder: 'dms' },
          defaults: { changeSequenceColumn: 'ar_h_change_seq', commitTimestampColumn: 'dms_commit_ts', badRows: 'quarantine' },
          tables: {
            'sales.orders': { primaryKey: ['order_id'], partitionBy: ['day(order_date)'] },
            'sales.*': { primaryKey: ['id'] },
            'audit.events': { mode: 'append', formatVersion: 3 },
          },
        },
      };
    },
  },
  { name: 's3tables, a table bucket the construct creates', sam: { Catalog: 's3tables' }, cdk: () => ({ catalog: { kind: 's3tables' } }) },
  {
    name: 's3tables, an existing table bucket, a key, compaction on',
    sam: { Catalog: 's3tables', TableBucketArn: TABLE_BUCKET, WarehouseKmsKeyArn: KEY(2), Compaction: 'on', GlueDatabaseName: 'sales' },
    cdk: (stack) => ({
      catalog: { kind: 's3tables', tableBucketArn: TABLE_BUCKET },
      warehouse: { key: key(stack, 'WarehouseKey', 2) },
      compact: { compaction: 'on' },
      database: { name: 'sales' },
    }),
  },
  {
    name: 's3tables, a created table bucket with a key',
    sam: { Catalog: 's3tables', WarehouseKmsKeyArn: KEY(2) },
    cdk: (stack) => ({ catalog: { kind: 's3tables' }, warehouse: { key: key(stack, 'WarehouseKey', 2) } }),
  },
  {
    name: "rest on Glue's Iceberg REST endpoint",
    sam: { Catalog: 'rest', RestAuthentication: 'glue' },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 'glue' } }),
  },
  {
    name: "rest on Glue's endpoint, Lake Formation vending the credentials, a warehouse key",
    sam: { Catalog: 'rest', RestAuthentication: 'glue', RestVendedCredentials: 'true', WarehouseKmsKeyArn: KEY(2) },
    cdk: (stack) => ({ catalog: { kind: 'rest', authentication: 'glue', vendedCredentials: true }, warehouse: { key: key(stack, 'WarehouseKey', 2) } }),
  },
  {
    name: "rest on Glue's endpoint, vended credentials, an existing warehouse bucket (the database's location) and database",
    sam: { Catalog: 'rest', RestAuthentication: 'glue', RestVendedCredentials: 'true', WarehouseBucketName: 'lake-warehouse', GlueDatabaseName: 'sales', CreateGlueDatabase: 'false' },
    cdk: (stack) => ({
      catalog: { kind: 'rest', authentication: 'glue', vendedCredentials: true },
      warehouse: { bucket: bucket(stack, 'Warehouse', 'lake-warehouse') },
      database: { name: 'sales', create: false },
    }),
  },
  {
    name: "rest on Glue's endpoint, vended credentials, an existing warehouse bucket, the database created",
    sam: { Catalog: 'rest', RestAuthentication: 'glue', RestVendedCredentials: 'true', WarehouseBucketName: 'lake-warehouse' },
    cdk: (stack) => ({
      catalog: { kind: 'rest', authentication: 'glue', vendedCredentials: true },
      warehouse: { bucket: bucket(stack, 'Warehouse', 'lake-warehouse') },
    }),
  },
  {
    name: "rest on S3 Tables' endpoint, a table bucket the construct creates",
    sam: { Catalog: 'rest', RestAuthentication: 's3tables' },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 's3tables' } }),
  },
  {
    name: "rest on S3 Tables' endpoint, an existing bucket, another URI, compaction on",
    sam: {
      Catalog: 'rest',
      RestAuthentication: 's3tables',
      TableBucketArn: TABLE_BUCKET,
      RestUri: 'https://s3tables.eu-west-1.amazonaws.com/iceberg',
      Compaction: 'on',
    },
    cdk: () => ({
      catalog: { kind: 'rest', authentication: 's3tables', tableBucketArn: TABLE_BUCKET, uri: 'https://s3tables.eu-west-1.amazonaws.com/iceberg' },
      compact: { compaction: 'on' },
    }),
  },
  {
    name: 'rest elsewhere, a bearer token from Secrets Manager, vended credentials',
    sam: {
      Catalog: 'rest',
      RestAuthentication: 'token',
      RestUri: 'https://polaris.example.com/api/catalog',
      RestWarehouse: 'lake',
      RestSecretArn: SECRET_ARN,
      RestVendedCredentials: 'true',
    },
    cdk: (stack) => ({
      catalog: { kind: 'rest', authentication: 'token', uri: 'https://polaris.example.com/api/catalog', warehouse: 'lake', secret: secret(stack), vendedCredentials: true },
    }),
  },
  {
    name: 'rest elsewhere, OAuth2 credentials from a KMS-encrypted secret, a named warehouse bucket',
    sam: {
      Catalog: 'rest',
      RestAuthentication: 'credential',
      RestUri: 'https://lakekeeper.example.com/catalog',
      RestSecretArn: SECRET_ARN,
      RestSecretKmsKeyArn: KEY(3),
      RestOAuth2Uri: 'https://idp.example.com/oauth2/token',
      RestScope: 'lakekeeper',
      WarehouseBucketName: 'lake-tables',
      WarehouseKmsKeyArn: KEY(2),
    },
    cdk: (stack) => ({
      catalog: {
        kind: 'rest',
        authentication: 'credential',
        uri: 'https://lakekeeper.example.com/catalog',
        secret: secret(stack),
        secretKey: key(stack, 'SecretKey', 3),
        oauth2Uri: 'https://idp.example.com/oauth2/token',
        scope: 'lakekeeper',
      },
      warehouse: { bucket: bucket(stack, 'Warehouse', 'lake-tables'), key: key(stack, 'WarehouseKey', 2) },
    }),
  },
  {
    name: 'rest elsewhere, unauthenticated, vended credentials',
    sam: { Catalog: 'rest', RestUri: 'http://catalog.internal:8181', RestVendedCredentials: 'true' },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 'none', uri: 'http://catalog.internal:8181', vendedCredentials: true } }),
  },
];

/** Both deployments of a case, resolved and normalized: name -> resource. */
export function both(c: Case, context: Record<string, unknown> = {}): { sam: Map<string, Obj>; cdk: Map<string, Obj>; samOutputs: Map<string, Obj>; cdkOutputs: Map<string, Obj> } {
  const s = synth((stack) => c.cdk(stack), {}, (d) => d.addStackOutputs(), context);
  const params = { ...c.sam };
  if (s.construct.tablesToml !== undefined && params.TablesConfig === undefined) params.TablesConfig = s.construct.tablesToml;
  const samR = samResolver(params);
  const broken = samR.brokenRules();
  assert.deepEqual(broken, [], `${c.name}: template.yaml's Rules refuse these parameters`);
  const sam = samR.resolve();
  const cdk = cdkResolver(s).resolve();
  const norm = (m: Map<string, Obj>) => new Map([...m].map(([k, v]) => [k, normalize(v)]));
  return { sam: norm(sam.resources), cdk: norm(cdk.resources), samOutputs: sam.outputs, cdkOutputs: cdk.outputs };
}

describe('the construct deploys what template.yaml deploys', () => {
  for (const [flags, context] of FLAG_SETS)
  for (const c of CASES) {
    test(`${c.name} (${flags})`, () => {
      const { sam, cdk, samOutputs, cdkOutputs } = both(c, context);
      assert.deepEqual([...cdk.keys()].sort(), [...sam.keys()].sort(), `${c.name}: the resources differ (construct, then template.yaml)`);
      const problems: string[] = [];
      for (const [name, r] of sam) {
        for (const d of diff(cdk.get(name), r, name)) problems.push(d);
      }
      // The stack outputs (addStackOutputs): the same names, values and descriptions.
      const outputs = (m: Map<string, Obj>) => Object.fromEntries([...m].sort(([a], [b]) => a.localeCompare(b))) as Json;
      for (const d of diff(outputs(cdkOutputs), outputs(samOutputs), 'Outputs')) problems.push(d);
      assert.deepEqual(problems, [], `${c.name}: construct != template.yaml:\n${problems.join('\n')}`);
    });
  }
});

describe('the comparison is not vacuous', () => {
  test('a setting the construct is not given shows as a difference naming the property', () => {
    const { sam, cdk } = both({ name: 'memory', sam: {}, cdk: () => ({ ingest: { memorySize: 2048 } }) });
    assert.deepEqual(diff(cdk.get('IngestFunction'), sam.get('IngestFunction'), 'IngestFunction'), [
      'IngestFunction/Properties/MemorySize: "2048" != "1769"',
    ]);
  });
  test('another catalog shows as other resources, other statements and other variables', () => {
    const { sam, cdk } = both({ name: 'catalog', sam: {}, cdk: () => ({ catalog: { kind: 's3tables' } }) });
    assert.ok(sam.has('GlueDatabase') && !cdk.has('GlueDatabase'));
    assert.ok(!sam.has('TableBucket') && cdk.has('TableBucket'));
    const d = diff(cdk.get('IngestRole'), sam.get('IngestRole'), 'IngestRole');
    assert.ok(d.some((l) => l.includes('s3tables:')), d.join('\n'));
    const e = diff(cdk.get('CompactFunction'), sam.get('CompactFunction'), 'CompactFunction');
    assert.ok(e.some((l) => l.includes('DMS2ICEBERG_CATALOG')), e.join('\n'));
  });
  test('the order of IAM statements and a resource of another prefix count', () => {
    const { sam, cdk } = both({ name: 'prefix', sam: { DmsPrefix: 'cdc/' }, cdk: () => ({}) });
    const d = diff(cdk.get('IngestRole'), sam.get('IngestRole'), 'IngestRole');
    assert.ok(d.some((l) => l.includes('dms/*') && l.includes('cdc/*')), d.join('\n'));
  });
});

/**
 * Each set of parameters template.yaml's Rules refuse (tests/aws/template.rs's
 * inconsistent_catalog_parameters_are_refused, and the prefix rules), with the props that say
 * the same: the construct refuses them at synth time, with a message that names the setting.
 */
const REFUSED: Array<{ sam: Record<string, string>; cdk: (stack: Stack) => unknown; says: RegExp }> = [
  { sam: { RestUri: 'https://polaris.example.com/api/catalog' }, cdk: () => ({ catalog: { kind: 'glue', uri: 'https://polaris.example.com/api/catalog' } }), says: /only used with kind rest/ },
  { sam: { RestAuthentication: 'glue' }, cdk: () => ({ catalog: { kind: 'glue', authentication: 'glue' } }), says: /only used with kind rest/ },
  { sam: { Catalog: 's3tables', RestVendedCredentials: 'true' }, cdk: () => ({ catalog: { kind: 's3tables', vendedCredentials: true } }), says: /only used with kind rest/ },
  { sam: { Catalog: 'rest' }, cdk: () => ({ catalog: { kind: 'rest', authentication: 'none' } }), says: /needs uri/ },
  {
    sam: { Catalog: 'rest', RestAuthentication: 'token', RestUri: 'https://polaris.example.com/api/catalog' },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 'token', uri: 'https://polaris.example.com/api/catalog' } }),
    says: /catalog\.secret: give it/,
  },
  {
    sam: { Catalog: 'rest', RestAuthentication: 'glue', RestSecretArn: SECRET_ARN },
    cdk: (stack) => ({ catalog: { kind: 'rest', authentication: 'glue', secret: secret(stack) } }),
    says: /secret is only read with authentication token or credential/,
  },
  {
    sam: { Catalog: 'rest', RestAuthentication: 'glue', RestWarehouse: '123456789012' },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 'glue', warehouse: '123456789012' } }),
    says: /warehouse is for other catalogs/,
  },
  {
    sam: { Catalog: 'rest', RestAuthentication: 'token', RestUri: 'https://polaris.example.com/api/catalog', RestSecretArn: SECRET_ARN, RestScope: 'PRINCIPAL_ROLE:ALL' },
    cdk: (stack) => ({ catalog: { kind: 'rest', authentication: 'token', uri: 'https://polaris.example.com/api/catalog', secret: secret(stack), scope: 'PRINCIPAL_ROLE:ALL' } }),
    says: /only used with authentication credential/,
  },
  {
    sam: { Catalog: 'rest', RestAuthentication: 'glue', TableBucketArn: TABLE_BUCKET },
    cdk: () => ({ catalog: { kind: 'rest', authentication: 'glue', tableBucketArn: TABLE_BUCKET } }),
    says: /tableBucketArn is only used with kind s3tables/,
  },
  {
    sam: { Catalog: 'rest', RestUri: 'http://catalog.internal:8181', RestSecretKmsKeyArn: KEY(3) },
    cdk: (stack) => ({ catalog: { kind: 'rest', authentication: 'none', uri: 'http://catalog.internal:8181', secretKey: key(stack, 'K', 3) } }),
    says: /secretKey is the key of catalog\.secret/,
  },
  { sam: { TableBucketArn: TABLE_BUCKET }, cdk: () => ({ catalog: { kind: 'glue', tableBucketArn: TABLE_BUCKET } }), says: /tableBucketArn is only used with kind s3tables/ },
  { sam: { DmsPrefix: 'data/', WarehousePrefix: 'data/' }, cdk: () => ({ dmsPrefix: 'data/', warehouse: { prefix: 'data/' } }), says: /must differ/ },
  {
    sam: { LandingBucketName: 'lake', WarehouseBucketName: 'lake', DmsPrefix: '' },
    cdk: (stack) => {
      const b = bucket(stack, 'Lake', 'lake');
      return { landingBucket: b, warehouse: { bucket: b }, dmsPrefix: '' };
    },
    says: /same bucket: dmsPrefix and warehouse\.prefix must both be set/,
  },
];

describe("what template.yaml's Rules refuse, the construct refuses at synth time", () => {
  for (const r of REFUSED) {
    test(JSON.stringify(r.sam), () => {
      assert.notDeepEqual(samResolver(r.sam).brokenRules(), [], 'template.yaml accepts these parameters');
      assert.throws(() => synth((stack) => r.cdk(stack) as Dms2IcebergProps), r.says);
    });
  }
  test('the defaults are accepted by both', () => {
    assert.deepEqual(samResolver({}).brokenRules(), []);
    synth();
  });
});
