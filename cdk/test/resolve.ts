import { CfnResource, Stack } from 'aws-cdk-lib';
import { IConstruct } from 'constructs';

// One resolver for both templates: template.yaml as SAM transforms it (its Conditions, Fn::If
// and Parameters decided for one parameter set) and the construct's synthesized stack. Each
// becomes a map from a canonical resource name (the SAM logical ID; for the construct, the path
// of construct IDs below the Dms2Iceberg construct, which the construct names after the SAM
// logical IDs) to its Type and Properties with every intrinsic evaluated: parameters and pseudo
// parameters to their values, references to other resources to symbols («IngestQueue»,
// «IngestQueue.Arn») that are equal exactly when both point at the same resource. What is left
// are two plain JSON values that can be compared with deepStrictEqual.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

/** The pseudo parameters of the deployment both are resolved for (as tests/aws/template.rs's). */
export const PSEUDO: Record<string, string> = {
  'AWS::AccountId': '111122223333',
  'AWS::Region': 'eu-west-1',
  'AWS::Partition': 'aws',
  'AWS::URLSuffix': 'amazonaws.com',
  'AWS::StackName': 'dms2iceberg',
  'AWS::StackId': 'arn:aws:cloudformation:eu-west-1:111122223333:stack/dms2iceberg/4f9b2c1e-5a3d-11ef-9c2b-0a1b2c3d4e5f',
};

const NO_VALUE = Symbol('AWS::NoValue');
type Value = Json | typeof NO_VALUE;

export interface Resolved {
  /** Canonical name -> { Type, Properties, DeletionPolicy, UpdateReplacePolicy }. */
  resources: Map<string, Obj>;
  /** The decided conditions (SAM); empty for the construct. */
  conditions: Record<string, boolean>;
  /** The stack's outputs whose conditions hold: name -> { Value, Description }. */
  outputs: Map<string, Obj>;
}

export class Resolver {
  private readonly conditionCache = new Map<string, boolean>();

  constructor(
    private readonly template: Obj,
    private readonly params: Record<string, string>,
    /** Canonical name of a logical ID; undefined: not ours (left out, and an error if referenced). */
    private readonly canonical: (logicalId: string) => string | undefined,
  ) {
    const declared = (template.Parameters ?? {}) as Obj;
    for (const p of Object.keys(params)) {
      if (!(p in declared)) throw new Error(`parameter ${p} is not declared by the template`);
    }
  }

  private resources(): Obj {
    return (this.template.Resources ?? {}) as Obj;
  }

  param(name: string): string {
    if (name in this.params) return this.params[name];
    if (name in PSEUDO) return PSEUDO[name];
    const p = ((this.template.Parameters ?? {}) as Obj)[name] as Obj | undefined;
    if (!p) throw new Error(`Ref ${name}: no such parameter`);
    if (!('Default' in p)) throw new Error(`parameter ${name} has no default and no value`);
    return scalar(p.Default);
  }

  condition(name: string): boolean {
    const cached = this.conditionCache.get(name);
    if (cached !== undefined) return cached;
    const c = ((this.template.Conditions ?? {}) as Obj)[name];
    if (c === undefined) throw new Error(`no condition ${name}`);
    const v = this.test(c);
    this.conditionCache.set(name, v);
    return v;
  }

  /** A condition expression (Fn::Equals, And, Or, Not, Condition). */
  test(c: Json): boolean {
    const [k, a] = Object.entries(c as Obj)[0];
    const list = a as Json[];
    switch (k) {
      case 'Fn::Equals':
        return scalar(this.value(list[0])) === scalar(this.value(list[1]));
      case 'Fn::And':
        return list.every((x) => this.test(x));
      case 'Fn::Or':
        return list.some((x) => this.test(x));
      case 'Fn::Not':
        return !this.test(list[0]);
      case 'Condition':
        return this.condition(a as string);
      default:
        throw new Error(`condition function ${k} not understood`);
    }
  }

  private symbol(id: string, attr?: string): string {
    const c = this.canonical(id);
    if (c === undefined) throw new Error(`reference to ${id}, which is not one of the deployment's resources`);
    return attr ? `«${c}.${attr}»` : `«${c}»`;
  }

  private resource(id: string): Obj {
    const r = this.resources()[id] as Obj | undefined;
    if (!r) throw new Error(`reference to ${id}: no such resource`);
    return r;
  }

  ref(id: string): Json {
    if (id in this.params || id in PSEUDO || id in ((this.template.Parameters ?? {}) as Obj)) return this.param(id);
    const r = this.resource(id);
    const p = (r.Properties ?? {}) as Obj;
    // Where Ref returns what the resource was given, compare that (names chosen by the stack).
    switch (r.Type) {
      case 'AWS::SSM::Parameter':
        return this.value(p.Name) as Json;
      case 'AWS::Logs::LogGroup':
        return this.value(p.LogGroupName) as Json;
      case 'AWS::Glue::Database':
        return this.value((p.DatabaseInput as Obj).Name) as Json;
      default:
        return this.symbol(id);
    }
  }

  getAtt(id: string, attr: string): Json {
    const r = this.resource(id);
    const p = (r.Properties ?? {}) as Obj;
    if (r.Type === 'AWS::SSM::Parameter' && attr === 'Value') return this.value(p.Value) as Json;
    if (r.Type === 'AWS::S3::Bucket' && attr === 'Arn') return `arn:${PSEUDO['AWS::Partition']}:s3:::${this.symbol(id)}`;
    return this.symbol(id, attr);
  }

  private sub(template: string, vars: Obj): string {
    return template.replace(/\$\{([^}]+)\}/g, (_m, name: string) => {
      if (name.startsWith('!')) return '${' + name.slice(1) + '}';
      if (name in vars) return scalar(this.value(vars[name]));
      if (name.includes('.') && !name.startsWith('AWS::')) {
        const [id, attr] = name.split('.', 2);
        return scalar(this.getAtt(id, attr));
      }
      return scalar(this.ref(name));
    });
  }

  /** A value with every intrinsic evaluated. */
  value(v: Json | undefined): Value {
    if (v === undefined) return NO_VALUE;
    if (Array.isArray(v)) {
      return v.map((x) => this.value(x)).filter((x): x is Json => x !== NO_VALUE);
    }
    if (v === null || typeof v !== 'object') return v;
    const keys = Object.keys(v);
    if (keys.length === 1) {
      const k = keys[0];
      const a = v[k];
      switch (k) {
        case 'Ref':
          return a === 'AWS::NoValue' ? NO_VALUE : this.ref(a as string);
        case 'Fn::GetAtt': {
          const [id, attr] = Array.isArray(a) ? (a as string[]) : (a as string).split('.', 2);
          return this.getAtt(id, attr);
        }
        case 'Fn::If': {
          const [c, yes, no] = a as Json[];
          return this.value(this.condition(c as string) ? yes : no);
        }
        case 'Fn::Sub':
          return Array.isArray(a) ? this.sub(a[0] as string, a[1] as Obj) : this.sub(a as string, {});
        case 'Fn::Join': {
          const [sep, parts] = a as [string, Json];
          const list = this.value(parts) as Json[];
          return list.map(scalar).join(sep);
        }
        case 'Fn::Split': {
          const [sep, s] = a as [string, Json];
          return scalar(this.value(s)).split(sep);
        }
        case 'Fn::Select': {
          const [i, list] = a as [Json, Json];
          const l = this.value(list) as Json[];
          return l[Number(scalar(this.value(i)))];
        }
        case 'Condition':
          break;
        default:
          if (k.startsWith('Fn::')) throw new Error(`intrinsic ${k} not understood`);
      }
    }
    const out: Obj = {};
    for (const [k, x] of Object.entries(v)) {
      const r = this.value(x);
      if (r !== NO_VALUE) out[k] = r;
    }
    return out;
  }

  /** Every resource the deployment creates, resolved. */
  resolve(): Resolved {
    const resources = new Map<string, Obj>();
    for (const [id, r] of Object.entries(this.resources()) as Array<[string, Obj]>) {
      if (typeof r.Condition === 'string' && !this.condition(r.Condition)) continue;
      const name = this.canonical(id);
      if (name === undefined) continue;
      if (resources.has(name)) throw new Error(`two resources are named ${name}`);
      const out: Obj = { Type: r.Type };
      out.Properties = this.value(r.Properties ?? {}) as Json;
      for (const k of ['DeletionPolicy', 'UpdateReplacePolicy']) if (r[k] !== undefined) out[k] = r[k];
      resources.set(name, out);
    }
    const conditions: Record<string, boolean> = {};
    for (const c of Object.keys((this.template.Conditions ?? {}) as Obj)) conditions[c] = this.condition(c);
    const outputs = new Map<string, Obj>();
    for (const [name, o] of Object.entries((this.template.Outputs ?? {}) as Obj) as Array<[string, Obj]>) {
      if (typeof o.Condition === 'string' && !this.condition(o.Condition)) continue;
      const v: Obj = { Value: this.value(o.Value) as Json };
      if (o.Description !== undefined) v.Description = o.Description;
      outputs.set(name, v);
    }
    return { resources, conditions, outputs };
  }

  /** The template's Rules these parameters break: "<rule>: <description>" each. */
  brokenRules(): string[] {
    const out: string[] = [];
    for (const [name, rule] of Object.entries((this.template.Rules ?? {}) as Obj) as Array<[string, Obj]>) {
      if (rule.RuleCondition !== undefined && !this.test(rule.RuleCondition)) continue;
      for (const a of (rule.Assertions ?? []) as Obj[]) {
        if (!this.test(a.Assert)) out.push(`${name}: ${a.AssertDescription}`);
      }
    }
    return out;
  }
}

export function scalar(v: Value | undefined): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  throw new Error(`not a scalar: ${JSON.stringify(v)}`);
}

/**
 * The canonical names of the resources under a construct: their construct path below it,
 * "Resource" and "Default" left out, the rest joined: `<root>/IngestQueue/Policy/Resource` ->
 * `IngestQueuePolicy`.
 */
export function cdkCanonical(root: IConstruct): (id: string) => string | undefined {
  const map = new Map<string, string>();
  for (const c of root.node.findAll()) {
    if (!CfnResource.isCfnResource(c)) continue;
    const id = Stack.of(c).resolve(c.logicalId) as string;
    const name = c.node.path
      .slice(root.node.path.length + 1)
      .split('/')
      .filter((s) => s !== 'Resource' && s !== 'Default')
      .join('');
    map.set(id, name);
  }
  return (id) => map.get(id);
}

/** Differences between two JSON values, one line each ("path: a != b"). */
export function diff(a: Json | undefined, b: Json | undefined, path = ''): string[] {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  if (a && b && typeof a === 'object' && typeof b === 'object' && Array.isArray(a) === Array.isArray(b)) {
    const keys = Array.isArray(a)
      ? [...Array(Math.max(a.length, (b as Json[]).length)).keys()].map(String)
      : [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => diff((a as Obj)[k], (b as Obj)[k], `${path}/${k}`));
  }
  return [`${path || '/'}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`];
}
