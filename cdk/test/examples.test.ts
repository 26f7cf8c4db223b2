// `cdk synth` of the example app (examples/app.ts) for each catalog kind, with the AWS CDK CLI
// from npm, offline, no credentials: the app a CDK user writes synthesizes into a stack with
// both functions, the SAM template's outputs and the catalog's own resources.

import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { describe, test } from 'node:test';
import { dummyLambdaDir, scratch } from './support';
import { Json } from './resolve';

type Obj = { [k: string]: Json };

const CDK_ROOT = path.resolve(__dirname, '..', '..');
const CLI = path.join(path.dirname(require.resolve('aws-cdk/package.json')), 'bin', 'cdk');

async function cdkSynth(catalog: string): Promise<Obj> {
  const out = fs.mkdtempSync(path.join(scratch(), `synth-${catalog}-`));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    // Offline: no credentials, no metadata service, nothing reachable through a proxy, no notices or telemetry.
    AWS_EC2_METADATA_DISABLED: 'true',
    HTTPS_PROXY: 'http://127.0.0.1:9',
    HTTP_PROXY: 'http://127.0.0.1:9',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
    CI: 'true',
  };
  await promisify(execFile)(
    process.execPath,
    [CLI, 'synth', '--app', `node ${path.join('dist', 'examples', 'app.js')}`, '-c', `catalog=${catalog}`, '-c', `lambdaDir=${dummyLambdaDir()}`, '-o', out, '--quiet', '--no-notices', '--no-version-reporting'],
    { cwd: CDK_ROOT, env, timeout: 120_000 },
  );
  return JSON.parse(fs.readFileSync(path.join(out, 'dms2iceberg.template.json'), 'utf8')) as Obj;
}

const count = (t: Obj, type: string) => Object.values(t.Resources as Obj).filter((r) => (r as Obj).Type === type).length;

describe('cdk synth of the example app', { concurrency: true }, () => {
  for (const [catalog, own] of [
    ['glue', 'AWS::Glue::Database'],
    ['s3tables', 'AWS::S3Tables::TableBucket'],
    ['rest', undefined],
  ] as const) {
    test(catalog, async () => {
      const t = await cdkSynth(catalog);
      assert.equal(count(t, 'AWS::Lambda::Function'), 2);
      assert.equal(count(t, 'AWS::CloudWatch::Alarm'), 9);
      assert.equal(count(t, 'AWS::Glue::Database'), catalog === 'glue' ? 1 : 0);
      assert.equal(count(t, 'AWS::S3Tables::TableBucket'), catalog === 's3tables' ? 1 : 0);
      if (own) assert.equal(count(t, own), 1);
      const outputs = Object.keys(t.Outputs as Obj);
      for (const o of ['LandingBucket', 'DmsPrefix', 'DmsTargetRoleArn', 'IngestQueueUrl', 'DeadLetterQueueUrl', 'GlueDatabase', 'ConfigParameterName', 'DashboardName']) {
        assert.ok(outputs.includes(o), `output ${o} missing: ${outputs}`);
      }
      assert.ok(outputs.includes(catalog === 'glue' ? 'WarehouseLocation' : catalog === 's3tables' ? 'TableBucketArn' : 'RestCatalogUri'));
      const text = JSON.stringify(t);
      assert.ok(text.includes('primary_key = [\\"order_id\\", \\"line_no\\"]'), 'the typed table settings in the config parameter');
      assert.ok(text.includes(`"DMS2ICEBERG_CATALOG":"${catalog}"`));
    });
  }
});
