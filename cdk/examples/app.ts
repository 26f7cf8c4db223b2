#!/usr/bin/env node
// A complete app: one stack with dms2iceberg for the catalog named by the context value
// `catalog` (glue, the default; s3tables; rest), the functions from cargo-lambda's output.
//
//   cargo lambda build --release --arm64 -p dms2iceberg-ingest -p dms2iceberg-compact   # repository root
//   cd cdk && npm ci && npm run build
//   npx cdk synth -c catalog=glue                  # or deploy; -c lambdaDir=<dir> for another build
//
// docs/cdk.md walks through it.

import * as path from 'path';
import { App, Stack, StackProps } from 'aws-cdk-lib';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { CatalogProps, Dms2Iceberg, FunctionCode } from '../lib';

export interface DmsLakeStackProps extends StackProps {
  /** glue, s3tables or rest. */
  readonly catalog: string;
  /** cargo-lambda's output folder: <dir>/dms2iceberg-ingest/bootstrap, <dir>/dms2iceberg-compact/bootstrap. */
  readonly lambdaDir: string;
  /** Where the alarms go. */
  readonly alarmEmail?: string;
  /** Catalog=rest: the catalog's URI and the secret holding its OAuth2 client credentials. */
  readonly restUri?: string;
  readonly restSecretArn?: string;
}

export class DmsLakeStack extends Stack {
  constructor(scope: Construct, id: string, props: DmsLakeStackProps) {
    super(scope, id, props);

    let catalog: CatalogProps;
    switch (props.catalog) {
      case 'glue':
        catalog = { kind: 'glue' };
        break;
      case 's3tables':
        catalog = { kind: 's3tables' };
        break;
      case 'rest':
        // Any Iceberg REST catalog (Polaris, Lakekeeper, Nessie, ...) with OAuth2 client
        // credentials in Secrets Manager, storage credentials vended by the catalog.
        catalog = {
          kind: 'rest',
          authentication: 'credential',
          uri: props.restUri ?? 'https://polaris.example.com/api/catalog',
          secret: secretsmanager.Secret.fromSecretCompleteArn(
            this,
            'RestSecret',
            props.restSecretArn ?? `arn:aws:secretsmanager:${this.region}:${this.account}:secret:dms2iceberg/rest-AbCdEf`,
          ),
          scope: 'PRINCIPAL_ROLE:ALL',
          vendedCredentials: true,
        };
        break;
      default:
        throw new Error(`catalog ${props.catalog}: glue, s3tables or rest`);
    }

    const lake = new Dms2Iceberg(this, 'Dms2Iceberg', {
      code: FunctionCode.fromCargoLambda(props.lambdaDir),
      catalog,
      // The table settings, typed; [defaults] stays the recommended one (ar_h_change_seq, dms_commit_ts).
      tables: {
        tables: {
          'sales.orders': { primaryKey: ['order_id'], partitionBy: ['day(order_date)'] },
          'sales.order_lines': { primaryKey: ['order_id', 'line_no'] },
          'sales.*': { primaryKey: ['id'] },
          'audit.events': { mode: 'append' },
        },
      },
      alarmEmail: props.alarmEmail,
    });
    // The SAM template's outputs (LandingBucket, DmsTargetRoleArn, ...): infra/README.md's
    // endpoint commands read them.
    lake.addStackOutputs();
  }
}

const app = new App();
const ctx = (k: string) => app.node.tryGetContext(k) as string | undefined;
new DmsLakeStack(app, ctx('stackName') ?? 'dms2iceberg', {
  catalog: ctx('catalog') ?? 'glue',
  lambdaDir: ctx('lambdaDir') ?? path.resolve(__dirname, '..', '..', '..', 'target', 'lambda'),
  alarmEmail: ctx('alarmEmail'),
  restUri: ctx('restUri'),
  restSecretArn: ctx('restSecretArn'),
  // Environment-agnostic unless the CLI's account and region are set: `cdk deploy` fills them in.
  env: process.env.CDK_DEFAULT_ACCOUNT ? { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION } : undefined,
});
app.synth();
