import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { App, Stack, StackProps } from 'aws-cdk-lib';
import * as cxapi from 'aws-cdk-lib/cx-api';
import { Template } from 'aws-cdk-lib/assertions';
import { Dms2Iceberg, Dms2IcebergProps, FunctionCode } from '../lib';
import { cdkCanonical, Json, Resolver } from './resolve';

type Obj = { [k: string]: Json };

/** The repository root (cdk/dist/test -> the root). */
export const ROOT = path.resolve(__dirname, '..', '..', '..');

let tmp: string | undefined;
/** A scratch folder for this test process, removed at exit. */
export function scratch(): string {
  if (!tmp) {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dms2iceberg-cdk-'));
    process.on('exit', () => fs.rmSync(tmp!, { recursive: true, force: true }));
  }
  return tmp;
}

/** cargo-lambda's layout with a stand-in `bootstrap` for each function (never a real Rust build). */
export function dummyLambdaDir(): string {
  const base = fs.mkdtempSync(path.join(scratch(), 'lambda-'));
  for (const b of ['dms2iceberg-ingest', 'dms2iceberg-compact']) {
    fs.mkdirSync(path.join(base, b));
    fs.writeFileSync(path.join(base, b, 'bootstrap'), `#!/bin/sh\n# stand-in for ${b}\n`, { mode: 0o755 });
  }
  return base;
}

/** The stand-in code. */
export function dummyCode(): FunctionCode {
  return FunctionCode.fromCargoLambda(dummyLambdaDir());
}

let code: FunctionCode | undefined;
function sharedCode(): FunctionCode {
  return (code ??= dummyCode());
}

export interface Synth {
  stack: Stack;
  construct: Dms2Iceberg;
  template: Obj;
  assertions: Template;
}

/**
 * One stack named `dms2iceberg` (environment-agnostic unless `stackProps.env`), holding the
 * construct with these props (the stand-in code unless `code` is given). a function builds props
 * that need the stack (imported buckets, keys); `after` runs on the construct before synthesis.
 */
export function synth(
  props: Dms2IcebergProps | ((stack: Stack) => Dms2IcebergProps) = {},
  stackProps: StackProps = {},
  after?: (d: Dms2Iceberg) => void,
  context: Record<string, unknown> = {},
): Synth {
  const app = new App({ outdir: fs.mkdtempSync(path.join(scratch(), 'cdk.out-')), analyticsReporting: false, context });
  const stack = new Stack(app, 'dms2iceberg', stackProps);
  const p = typeof props === 'function' ? props(stack) : props;
  const construct = new Dms2Iceberg(stack, 'Dms2Iceberg', { code: sharedCode(), ...p });
  after?.(construct);
  const assertions = Template.fromStack(stack);
  return { stack, construct, template: assertions.toJSON() as Obj, assertions };
}

/**
 * The feature flags an app may have: none (an app without cdk.json context), or every flag
 * `cdk init` sets for a new project today. The construct must synthesize the same under both.
 */
export const FLAG_SETS: Array<[string, Record<string, unknown>]> = [
  ['no feature flags', {}],
  ["the feature flags of a new project (cdk init's)", { ...cxapi.NEW_PROJECT_DEFAULT_CONTEXT, ...cxapi.CURRENTLY_RECOMMENDED_FLAGS }],
];

let sam: Obj | undefined;
/** template.yaml as SAM transforms it (test/sam_template.py, in the repository's infra venv). */
export function samTemplate(): Obj {
  if (sam) return sam;
  const candidates = [process.env.DMS2ICEBERG_INFRA_PYTHON, path.join(ROOT, '.venv-infra', 'bin', 'python')].filter(
    (p): p is string => !!p,
  );
  const python = candidates.find((p) => fs.existsSync(p));
  if (!python) {
    throw new Error(
      'The equivalence tests read template.yaml through the SAM translator in .venv-infra (cfn-lint and aws-sam-translator, ' +
        'tests/support/requirements-infra.txt). Run scripts/test once (it builds the venv and exports DMS2ICEBERG_INFRA_PYTHON), ' +
        'or set DMS2ICEBERG_INFRA_PYTHON to its python.',
    );
  }
  const out = execFileSync(python, [path.join(ROOT, 'cdk', 'test', 'sam_template.py'), path.join(ROOT, 'template.yaml')], {
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    env: { ...process.env, AWS_EC2_METADATA_DISABLED: 'true', HTTPS_PROXY: 'http://127.0.0.1:9', HTTP_PROXY: 'http://127.0.0.1:9' },
  });
  sam = JSON.parse(out) as Obj;
  return sam;
}

/** The SAM deployment with these parameters, resolved. */
export function samResolver(params: Record<string, string>): Resolver {
  return new Resolver(samTemplate(), params, (id) => id);
}

/** The construct's deployment, resolved with the same pseudo parameters. */
export function cdkResolver(s: Synth): Resolver {
  return new Resolver(s.template, {}, cdkCanonical(s.construct));
}

function statements(doc: Json): void {
  const st = (doc as Obj | undefined)?.Statement as Obj[] | undefined;
  for (const s of st ?? []) {
    // Lists of actions and resources are sets to IAM (CDK's minimizePolicies flag sorts them).
    for (const k of ['Action', 'Resource']) {
      if (s[k] === undefined) continue;
      s[k] = (Array.isArray(s[k]) ? (s[k] as Json[]) : [s[k]]).slice().sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
    }
    const p = s.Principal as Obj | undefined;
    if (p && typeof p === 'object' && p.Service !== undefined && !Array.isArray(p.Service)) p.Service = [p.Service];
  }
}

function stringify(v: Json): Json {
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return v.map(stringify);
  if (v && typeof v === 'object') {
    const out: Obj = {};
    for (const [k, x] of Object.entries(v)) {
      const y = stringify(x);
      if (y && typeof y === 'object' && Object.keys(y).length === 0) continue; // {} and [] = absent
      out[k] = y;
    }
    return out;
  }
  return v;
}

/**
 * A resolved resource in the form both are compared in: scalars as strings, empty lists and
 * objects as absent (CloudFormation's reading), IAM actions and resources as sorted lists (sets,
 * to IAM), a principal's service as a list, JSON strings (a rule target's input, the
 * dashboard's body) parsed; the function's code (an asset here, a placeholder there) and SAM's
 * `lambda:createdBy` tag left out.
 */
export function normalize(r: Obj): Obj {
  const x = stringify(JSON.parse(JSON.stringify(r)) as Obj) as Obj;
  const p = (x.Properties ?? {}) as Obj;
  switch (x.Type) {
    case 'AWS::Lambda::Function':
      delete p.Code;
      delete p.Tags;
      break;
    case 'AWS::IAM::Role':
      statements(p.AssumeRolePolicyDocument);
      for (const pol of (p.Policies ?? []) as Obj[]) statements(pol.PolicyDocument);
      break;
    case 'AWS::SQS::QueuePolicy':
    case 'AWS::S3::BucketPolicy':
      statements(p.PolicyDocument);
      break;
    case 'AWS::Events::Rule':
      // JSON text: compared as the JSON it holds (types kept).
      for (const t of (p.Targets ?? []) as Obj[]) if (typeof t.Input === 'string') t.Input = JSON.parse(t.Input);
      break;
    case 'AWS::CloudWatch::Dashboard':
      p.DashboardBody = JSON.parse(p.DashboardBody as string);
      break;
  }
  return x;
}
