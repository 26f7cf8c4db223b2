// The synthesized stack itself, with aws-cdk-lib/assertions: for each catalog kind, the
// resources, every IAM statement (no wildcard action, resources scoped as in the SAM template),
// the alarms, the schedules and both functions' environment; then each unsafe combination the
// construct refuses at synth time, and the code it accepts.

import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { App, CfnResource, Duration, Stack } from 'aws-cdk-lib';
import { Match } from 'aws-cdk-lib/assertions';
import * as events from 'aws-cdk-lib/aws-events';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Dms2Iceberg, Dms2IcebergProps, FunctionCode } from '../lib';
import { Json } from './resolve';
import { dummyCode, scratch, synth, Synth } from './support';

type Obj = { [k: string]: Json };

const SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:dms2iceberg/rest-AbCdEf';

/** One deployment per catalog kind. */
const KINDS: Array<[string, (stack: Stack) => Dms2IcebergProps]> = [
  ['glue', () => ({})],
  ['s3tables', () => ({ catalog: { kind: 's3tables' } })],
  [
    'rest',
    (stack) => ({
      catalog: {
        kind: 'rest',
        authentication: 'token',
        uri: 'https://polaris.example.com/api/catalog',
        secret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Secret', SECRET_ARN),
        vendedCredentials: true,
      },
    }),
  ],
];

/** The variables docs/aws.md documents for each function (as tests/aws/template.rs checks them for the template). */
const COMMON_ENV = [
  'DMS2ICEBERG_CATALOG',
  'DMS2ICEBERG_WAREHOUSE',
  'DMS2ICEBERG_TABLE_BUCKET_ARN',
  'DMS2ICEBERG_GLUE_DATABASE',
  'DMS2ICEBERG_TABLE_METRICS',
  'RUST_LOG',
  'DMS2ICEBERG_S3_PATH_STYLE',
];
const INGEST_ENV = [
  'DMS2ICEBERG_CONFIG',
  'DMS2ICEBERG_DEAD_LETTER_QUEUE_URL',
  'DMS2ICEBERG_MAX_FILES_PER_COMMIT',
  'DMS2ICEBERG_MAX_FILES_PER_INVOCATION',
  'DMS2ICEBERG_PARALLEL_LOADS',
  'DMS2ICEBERG_FORMAT_VERSION',
];
const COMPACT_ENV = [
  'DMS2ICEBERG_COMPACTION',
  'DMS2ICEBERG_COMPACT_MAX_BYTES',
  'DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS',
  'DMS2ICEBERG_SNAPSHOT_RETAIN_MAX',
  'DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS',
];
const REST_ENV = ['DMS2ICEBERG_REST_URI', 'DMS2ICEBERG_REST_TOKEN_SECRET', 'DMS2ICEBERG_REST_VENDED_CREDENTIALS'];

function resources(s: Synth, type: string): Array<[string, Obj]> {
  return Object.entries((s.template.Resources ?? {}) as Obj).filter(([, r]) => (r as Obj).Type === type) as Array<[string, Obj]>;
}

function fnId(s: Synth, which: 'ingest' | 'compact'): string {
  const f = which === 'ingest' ? s.construct.ingestFunction : s.construct.compactFunction;
  return s.stack.resolve((f.node.defaultChild as lambda.CfnFunction).logicalId) as string;
}

/** Every policy statement of the template: where it is, and the statement. */
function allStatements(s: Synth): Array<[string, Obj]> {
  const out: Array<[string, Obj]> = [];
  for (const [id, r] of Object.entries((s.template.Resources ?? {}) as Obj) as Array<[string, Obj]>) {
    const p = (r.Properties ?? {}) as Obj;
    const docs: Json[] = [];
    if (r.Type === 'AWS::IAM::Role') {
      assert.equal(p.ManagedPolicyArns, undefined, `${id}: a managed policy`);
      for (const pol of (p.Policies ?? []) as Obj[]) docs.push(pol.PolicyDocument);
    }
    if (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') assert.fail(`${id}: a policy outside the roles' own (${r.Type})`);
    if (r.Type === 'AWS::SQS::QueuePolicy' || r.Type === 'AWS::S3::BucketPolicy') docs.push(p.PolicyDocument);
    for (const d of docs) for (const st of (d as Obj).Statement as Obj[]) out.push([id, st]);
  }
  return out;
}

const list = (v: Json | undefined): Json[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** A resource rendered to text, tokens as their CloudFormation JSON (to look for wildcards). */
const text = (v: Json) => JSON.stringify(v);

describe('the stack, for each catalog kind', () => {
  for (const [kind, props] of KINDS) {
    describe(kind, () => {
      const s = synth(props);
      const t = s.assertions;

      test('the resources template.yaml creates for it', () => {
        t.resourceCountIs('AWS::Lambda::Function', 2);
        t.resourceCountIs('AWS::SQS::Queue', 2);
        t.resourceCountIs('AWS::Events::Rule', 3);
        t.resourceCountIs('AWS::CloudWatch::Alarm', 9);
        t.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
        t.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
        t.resourceCountIs('AWS::Glue::Database', kind === 'glue' ? 1 : 0);
        t.resourceCountIs('AWS::S3Tables::TableBucket', kind === 's3tables' ? 1 : 0);
        t.resourceCountIs('AWS::S3::Bucket', kind === 'glue' ? 2 : 1);
        t.resourceCountIs('AWS::IAM::Role', 3);
        // Data is kept when the stack goes.
        for (const type of ['AWS::S3::Bucket', 'AWS::Glue::Database', 'AWS::S3Tables::TableBucket']) {
          for (const [id, r] of resources(s, type)) assert.equal(r.DeletionPolicy, 'Retain', `${id} is not retained`);
        }
        // No custom resource, no helper function (CDK's bucket notifications or log retention would add some).
        for (const [id, r] of Object.entries(s.template.Resources as Obj) as Array<[string, Obj]>) {
          assert.ok(!String(r.Type).startsWith('Custom::') && r.Type !== 'AWS::CloudFormation::CustomResource', `${id}: ${r.Type}`);
        }
      });

      test('both functions: the release binaries on provided.al2023, arm64, their own log group', () => {
        for (const which of ['ingest', 'compact'] as const) {
          const r = (s.template.Resources as Obj)[fnId(s, which)] as Obj;
          const p = r.Properties as Obj;
          assert.equal(p.Runtime, 'provided.al2023');
          assert.equal(p.Handler, 'bootstrap');
          assert.deepEqual(p.Architectures, ['arm64']);
          assert.ok((p.Code as Obj).S3Key, 'code from an asset');
          assert.ok((p.LoggingConfig as Obj).LogGroup, 'its log group');
        }
      });

      test('the environment of both functions', () => {
        for (const [which, own] of [['ingest', INGEST_ENV], ['compact', COMPACT_ENV]] as const) {
          const env = (((s.template.Resources as Obj)[fnId(s, which)] as Obj).Properties as Obj).Environment as Obj;
          const vars = env.Variables as Obj;
          const want = [...COMMON_ENV, ...own, ...(kind === 'rest' ? REST_ENV : [])].sort();
          assert.deepEqual(Object.keys(vars).sort(), want, `${which}'s variables`);
          assert.equal(vars.DMS2ICEBERG_CATALOG, kind);
          assert.equal(vars.AWS_ENDPOINT_URL, undefined);
        }
        t.hasResourceProperties('AWS::Lambda::Function', {
          Environment: { Variables: Match.objectLike({ DMS2ICEBERG_CONFIG: Match.anyValue(), DMS2ICEBERG_FORMAT_VERSION: '2', DMS2ICEBERG_MAX_FILES_PER_INVOCATION: '100' }) },
          MemorySize: 1769,
          Timeout: 300,
          EphemeralStorage: { Size: 4096 },
        });
        t.hasResourceProperties('AWS::Lambda::Function', {
          Environment: { Variables: Match.objectLike({ DMS2ICEBERG_COMPACTION: 'auto', DMS2ICEBERG_SNAPSHOT_RETAIN_MAX: '200' }) },
          MemorySize: 3008,
          Timeout: 240,
        });
      });

      test('IAM: no wildcard action, no managed policy, resources scoped as in the SAM template', () => {
        for (const [id, st] of allStatements(s)) {
          const actions = list(st.Action).map(String);
          for (const a of actions) {
            if (st.Effect === 'Deny' && a === 's3:*') continue; // DenyInsecureTransport
            assert.ok(!a.includes('*'), `${id}: wildcard action ${a}`);
          }
          for (const r of list(st.Resource)) {
            const rt = text(r);
            if (r === '*') {
              assert.deepEqual(actions, ['lakeformation:GetDataAccess'], `${id}: Resource "*" for ${actions}`);
              continue;
            }
            if (!rt.includes('*')) continue;
            // The only wildcards the template has: an object prefix, a database's or a table bucket's tables.
            assert.ok(
              /(dms\/|warehouse\/)\*"\]\]\}$/.test(rt) || /\/\*"\]\]\}$/.test(rt) || /\/table\/\*"\]\]\}$/.test(rt),
              `${id}: a wildcard resource ${rt} for ${actions}`,
            );
          }
        }
        const role = (r: Dms2Iceberg['ingestRole']) => ((s.template.Resources as Obj)[s.stack.resolve((r.node.defaultChild as CfnResource).logicalId) as string] as Obj).Properties as Obj;
        const actionsOf = (r: Dms2Iceberg['ingestRole']) =>
          ((role(r).Policies as Obj[])[0].PolicyDocument as Obj).Statement as Obj[];
        const ingest = actionsOf(s.construct.ingestRole).flatMap((st) => list(st.Action).map(String));
        const compact = actionsOf(s.construct.compactRole).flatMap((st) => list(st.Action).map(String));
        // The compact function never touches the landing bucket, the queue or the config.
        for (const a of ['sqs:ReceiveMessage', 'sqs:SendMessage', 'ssm:GetParameter']) assert.ok(!compact.includes(a), `compact may ${a}`);
        assert.ok(ingest.includes('sqs:ReceiveMessage') && ingest.includes('ssm:GetParameter'));
        if (kind === 'glue') {
          assert.ok(ingest.includes('glue:CreateTable') && !compact.includes('glue:CreateTable'));
          assert.ok(!ingest.some((a) => a.startsWith('s3tables:') || a.startsWith('secretsmanager:')));
        }
        if (kind === 's3tables') {
          assert.ok(ingest.includes('s3tables:UpdateTableMetadataLocation') && compact.includes('s3tables:ListTables'));
          assert.ok(!ingest.some((a) => a.startsWith('glue:')), 'glue on s3tables');
          assert.ok(!ingest.includes('s3:PutObject'), 'a warehouse bucket on s3tables');
        }
        if (kind === 'rest') {
          assert.ok(ingest.includes('secretsmanager:GetSecretValue') && compact.includes('secretsmanager:GetSecretValue'));
          assert.ok(!ingest.some((a) => a.startsWith('glue:') || a.startsWith('s3tables:')));
          t.hasResourceProperties('AWS::IAM::Role', {
            Policies: [{ PolicyName: 'ingest', PolicyDocument: { Statement: Match.arrayWith([{ Sid: 'ReadRestSecret', Effect: 'Allow', Action: 'secretsmanager:GetSecretValue', Resource: SECRET_ARN }]) } }],
          });
        }
      });

      test('the alarms: metrics, the Function dimension = the deployed function, statistics, thresholds, periods', () => {
        const ingestRef = { Ref: fnId(s, 'ingest') };
        const compactRef = { Ref: fnId(s, 'compact') };
        for (const [metric, stat, fn, extra] of [
          ['FilesFailed', 'Sum', ingestRef, {}],
          ['FilesDeadLettered', 'Sum', ingestRef, {}],
          ['TablesBlocked', 'Maximum', ingestRef, { EvaluationPeriods: 7, DatapointsToAlarm: 2 }],
          ['TablesRepaired', 'Sum', compactRef, {}],
        ] as const) {
          t.hasResourceProperties('AWS::CloudWatch::Alarm', {
            Namespace: 'dms2iceberg',
            MetricName: metric,
            Dimensions: [{ Name: 'Function', Value: fn }],
            Statistic: stat,
            Period: 300,
            Threshold: 1,
            ComparisonOperator: 'GreaterThanOrEqualToThreshold',
            TreatMissingData: 'notBreaching',
            ...extra,
          });
        }
        t.hasResourceProperties('AWS::CloudWatch::Alarm', {
          Namespace: 'AWS/SQS',
          MetricName: 'ApproximateNumberOfMessagesVisible',
          Threshold: 0,
          ComparisonOperator: 'GreaterThanThreshold',
        });
        t.hasResourceProperties('AWS::CloudWatch::Alarm', {
          Metrics: Match.arrayWith([
            Match.objectLike({ Id: 'age', MetricStat: { Metric: { Namespace: 'dms2iceberg', MetricName: 'BacklogAgeSeconds', Dimensions: [{ Name: 'Function', Value: ingestRef }] }, Period: 300, Stat: 'Maximum' } }),
            Match.objectLike({ Id: 'minutes', Expression: 'age / 60' }),
          ]),
          Threshold: 30,
          EvaluationPeriods: 7,
        });
        t.hasResourceProperties('AWS::CloudWatch::Alarm', {
          Metrics: Match.arrayWith([
            Match.objectLike({ Id: 'tables', MetricStat: { Metric: { Namespace: 'dms2iceberg', MetricName: 'TablesFailed', Dimensions: [{ Name: 'Function', Value: compactRef }] }, Period: 3600, Stat: 'Sum' } }),
          ]),
        });
      });

      test('the schedules and the rule', () => {
        const compactArn = { 'Fn::GetAtt': [fnId(s, 'compact'), 'Arn'] };
        t.hasResourceProperties('AWS::Events::Rule', {
          ScheduleExpression: 'rate(5 minutes)',
          State: 'ENABLED',
          Targets: [Match.objectLike({ Arn: compactArn, Input: '{"tasks":["compact"]}' })],
        });
        t.hasResourceProperties('AWS::Events::Rule', {
          ScheduleExpression: 'rate(1 hour)',
          State: 'ENABLED',
          Targets: [Match.objectLike({ Arn: compactArn, Input: kind === 'rest' ? '{"tasks":["expire"]}' : '{"tasks":["expire","orphans"]}' })],
        });
        t.hasResourceProperties('AWS::Events::Rule', {
          EventPattern: Match.objectLike({ source: ['aws.s3'], 'detail-type': ['Object Created', 'Object Deleted'] }),
          Targets: [Match.objectLike({ Id: 'ingest-queue', RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86400 } })],
        });
        t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 });
        t.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
          BatchSize: 10,
          MaximumBatchingWindowInSeconds: 5,
          FunctionResponseTypes: ['ReportBatchItemFailures'],
          ScalingConfig: { MaximumConcurrency: 5 },
        });
        t.hasResourceProperties('AWS::SQS::Queue', { VisibilityTimeout: 1800, MessageRetentionPeriod: 345600, RedrivePolicy: Match.objectLike({ maxReceiveCount: 5 }) });
        t.hasResourceProperties('AWS::SQS::Queue', { MessageRetentionPeriod: 1209600, SqsManagedSseEnabled: true });
      });
    });
  }
});

describe('unsafe combinations are refused at synth time', () => {
  const refused: Array<[string, (stack: Stack) => Dms2IcebergProps, RegExp]> = [
    ['a prefix the rule cannot match', () => ({ dmsPrefix: 'dms' }), /dmsPrefix "dms"/],
    ['one bucket, one prefix inside the other', (st) => {
      const b = s3.Bucket.fromBucketName(st, 'B', 'lake');
      return { landingBucket: b, warehouse: { bucket: b, prefix: 'dms/iceberg/' } };
    }, /neither prefix may start with the other/],
    ['a key alias instead of a key', (st) => ({ landingKey: kms.Key.fromKeyArn(st, 'K', 'arn:aws:kms:eu-west-1:123456789012:alias/dms') }), /not an alias/],
    ['a visibility timeout below the function timeout', () => ({ ingest: { timeout: Duration.minutes(10), visibilityTimeout: Duration.minutes(5) } }), /below ingest.timeout/],
    ['a large batch without a batching window', () => ({ ingest: { batchSize: 100, maxBatchingWindow: Duration.seconds(0) } }), /at least 1 second/],
    ['reserved concurrency below the queue concurrency', () => ({ ingest: { reservedConcurrentExecutions: 2, maxConcurrency: 5 } }), /below ingest.maxConcurrency/],
    ['a compaction run longer than its schedule', () => ({ compact: { timeout: Duration.minutes(5) } }), /at least a minute below compact.schedule/],
    ['a maintenance schedule shorter than a run', () => ({ compact: { maintenanceSchedule: events.Schedule.rate(Duration.minutes(4)) } }), /compact.maintenanceSchedule/],
    ['a secret named without its suffix', (st) => ({
      catalog: { kind: 'rest', authentication: 'token', uri: 'https://c.example.com', secret: secretsmanager.Secret.fromSecretNameV2(st, 'S', 'rest') },
    }), /full ARN/],
    ['a table without its primary key', () => ({ tables: { tables: { 'sales.orders': {} } } }), /needs its primaryKey/],
    ['a key on an append table', () => ({ tables: { tables: { 'audit.log': { mode: 'append', primaryKey: ['id'] } } } }), /takes no primaryKey/],
    ['an unknown partition transform', () => ({ tables: { tables: { 'sales.orders': { primaryKey: ['id'], partitionBy: ['week(ts)'] } } } }), /not a known transform/],
    ['an unknown column type', () => ({ tables: { tables: { 'sales.orders': { primaryKey: ['id'], columns: [{ name: 'id', type: 'uuid' }] } } } }), /unknown column type/],
    ['a table key that is not schema.table', () => ({ tables: { tables: { orders: { primaryKey: ['id'] } } } }), /schema>\.<table/],
    ['two places for the config', () => ({ tables: {}, configS3Uri: 's3://b/c.toml' }), /give one/],
    ['a namespace S3 Tables refuses', () => ({ catalog: { kind: 's3tables' }, database: { name: '_sales' } }), /S3 Tables refuses/],
    ['a warehouse bucket S3 Tables would not use', (st) => ({ catalog: { kind: 's3tables' }, warehouse: { bucket: s3.Bucket.fromBucketName(st, 'W', 'www') } }), /not used with a table bucket/],
    ['database.create without Glue', () => ({ catalog: { kind: 's3tables' }, database: { create: true } }), /Glue Data Catalog/],
    ['an expiry on a bucket that is not ours', (st) => ({ landingBucket: s3.Bucket.fromBucketName(st, 'L', 'lll'), landingExpiration: Duration.days(7) }), /lifecycle rule on yours/],
    ['a format version other than 2 or 3', () => ({ formatVersion: 4 as 3 }), /use 2 or 3/],
  ];
  for (const [name, props, says] of refused) {
    test(name, () => assert.throws(() => synth(props), says));
  }
  test('every problem is listed at once', () => {
    assert.throws(() => synth({ dmsPrefix: 'x', warehouse: { prefix: 'y' } }), (e: Error) => e.message.includes('dmsPrefix "x"') && e.message.includes('warehouse.prefix "y"'));
  });
  test('one construct per stack', () => {
    const app = new App({ outdir: fs.mkdtempSync(path.join(scratch(), 'out-')) });
    const stack = new Stack(app, 'S');
    new Dms2Iceberg(stack, 'A', { code: dummyCode() });
    assert.throws(() => new Dms2Iceberg(stack, 'B', { code: dummyCode() }), /a stack of its own/);
  });
});

describe('existing resources', () => {
  test('a landing bucket of the app gets EventBridge notifications, without a custom resource', () => {
    const s = synth((stack) => ({ landingBucket: new s3.Bucket(stack, 'Mine') }));
    s.assertions.hasResourceProperties('AWS::S3::Bucket', { NotificationConfiguration: { EventBridgeConfiguration: { EventBridgeEnabled: true } } });
    s.assertions.resourceCountIs('AWS::S3::Bucket', 2); // its own and the warehouse
    s.assertions.resourceCountIs('AWS::Lambda::Function', 2);
  });
  test('a stack with an account and region synthesizes, its region and account literal in the ARNs', () => {
    const s = synth({}, { env: { account: '111122223333', region: 'eu-west-1' } });
    assert.ok(JSON.stringify(s.template).includes(':glue:eu-west-1:111122223333:catalog'));
  });
  test('keys and a secret created in the app are granted by their ARNs', () => {
    const s = synth((stack) => {
      const key = new kms.Key(stack, 'Key');
      return {
        warehouse: { key },
        catalog: { kind: 'rest', authentication: 'credential', uri: 'https://c.example.com', secret: new secretsmanager.Secret(stack, 'Rest', { encryptionKey: key }) },
      };
    });
    const t = JSON.stringify(s.template);
    assert.ok(t.includes('"Sid":"DecryptRestSecret"'), 'the secret\'s own key is granted through Secrets Manager');
    assert.ok(t.includes('"Sid":"ReadRestSecret"'));
  });
});

describe('the functions\' code', () => {
  const elf = (machine: number) => {
    const b = Buffer.alloc(64);
    b.writeUInt32BE(0x7f454c46, 0);
    b[4] = 2;
    b[5] = 1;
    b.writeUInt16LE(machine, 18);
    return b;
  };
  const dirs = (content: Buffer) => {
    const base = fs.mkdtempSync(path.join(scratch(), 'elf-'));
    for (const b of ['dms2iceberg-ingest', 'dms2iceberg-compact']) {
      fs.mkdirSync(path.join(base, b));
      fs.writeFileSync(path.join(base, b, 'bootstrap'), content);
    }
    return base;
  };
  test('a missing bootstrap names the folder and the build command', () => {
    assert.throws(() => synth({ code: FunctionCode.fromCargoLambda(path.join(scratch(), 'nowhere')) }), /no dms2iceberg-ingest bootstrap at .*cargo lambda build --release --arm64/s);
  });
  test('an x86_64 build for arm64 functions is refused; built for the architecture, accepted', () => {
    const x86 = dirs(elf(62));
    assert.throws(() => synth({ code: FunctionCode.fromCargoLambda(x86) }), /built for x86_64, but the functions' architecture is arm64/);
    synth({ code: FunctionCode.fromCargoLambda(x86), architecture: lambda.Architecture.X86_64 });
    synth({ code: FunctionCode.fromCargoLambda(dirs(elf(183))) });
  });
  test("sam build's output folders", () => {
    const base = fs.mkdtempSync(path.join(scratch(), 'sam-'));
    for (const f of ['IngestFunction', 'CompactFunction']) {
      fs.mkdirSync(path.join(base, f));
      fs.writeFileSync(path.join(base, f, 'bootstrap'), elf(183));
    }
    synth({ code: FunctionCode.fromSamBuild(base) });
  });
  test('any lambda.Code', () => {
    const s = synth((stack) => {
      const artifacts = s3.Bucket.fromBucketName(stack, 'Artifacts', 'artifacts');
      return { code: FunctionCode.fromCode(lambda.Code.fromBucket(artifacts, 'ingest.zip'), lambda.Code.fromBucket(artifacts, 'compact.zip')) };
    });
    s.assertions.hasResourceProperties('AWS::Lambda::Function', { Code: { S3Bucket: 'artifacts', S3Key: 'ingest.zip' } });
  });
});
