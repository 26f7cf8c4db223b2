import * as fs from 'fs';
import * as path from 'path';
import * as lambda from 'aws-cdk-lib/aws-lambda';

/** The binaries' names (the workspace members functions/ingest and functions/compact). */
export const INGEST_BINARY = 'dms2iceberg-ingest';
export const COMPACT_BINARY = 'dms2iceberg-compact';

/** How to build them, for messages (docs/cdk.md). */
export const BUILD_COMMAND =
  'cargo lambda build --release --arm64 -p dms2iceberg-ingest -p dms2iceberg-compact (from the repository root; --x86-64 for architecture X86_64)';

/** The ELF machine of a bootstrap, if it is an ELF file. */
function elfMachine(file: string): 'arm64' | 'x86_64' | 'other' | undefined {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(20);
    const n = fs.readSync(fd, b, 0, 20, 0);
    if (n < 20 || b.readUInt32BE(0) !== 0x7f454c46) return undefined;
    const little = b[5] === 1;
    const m = little ? b.readUInt16LE(18) : b.readUInt16BE(18);
    return m === 183 ? 'arm64' : m === 62 ? 'x86_64' : 'other';
  } finally {
    fs.closeSync(fd);
  }
}

/** The code of both functions. */
export abstract class FunctionCode {
  /**
   * cargo-lambda's output folder: `<dir>/dms2iceberg-ingest/bootstrap` and
   * `<dir>/dms2iceberg-compact/bootstrap`, as `cargo lambda build --release --arm64 -p
   * dms2iceberg-ingest -p dms2iceberg-compact` leaves them in `target/lambda`.
   */
  public static fromCargoLambda(dir: string): FunctionCode {
    return FunctionCode.fromDirectories(path.join(dir, INGEST_BINARY), path.join(dir, COMPACT_BINARY));
  }

  /**
   * `sam build`'s output folder (the SAM path's own build, `rust-cargolambda`):
   * `<dir>/IngestFunction/bootstrap` and `<dir>/CompactFunction/bootstrap`.
   */
  public static fromSamBuild(dir: string): FunctionCode {
    return FunctionCode.fromDirectories(path.join(dir, 'IngestFunction'), path.join(dir, 'CompactFunction'));
  }

  /** Two folders, each holding the function's `bootstrap` (and nothing else it should not ship). */
  public static fromDirectories(ingestDir: string, compactDir: string): FunctionCode {
    return new DirectoryCode(ingestDir, compactDir);
  }

  /** Any `lambda.Code` (an S3 object, an asset of your own build): used as given, unchecked. */
  public static fromCode(ingest: lambda.Code, compact: lambda.Code): FunctionCode {
    return new GivenCode(ingest, compact);
  }

  /**
   * The code for this architecture. Throws, naming the folder and the build command, when a
   * bootstrap is missing or built for another architecture.
   */
  public abstract bind(architecture: lambda.Architecture): { ingest: lambda.Code; compact: lambda.Code };
}

class DirectoryCode extends FunctionCode {
  constructor(private readonly ingestDir: string, private readonly compactDir: string) {
    super();
  }

  public bind(architecture: lambda.Architecture) {
    const want = architecture.name === lambda.Architecture.ARM_64.name ? 'arm64' : 'x86_64';
    const check = (dir: string, binary: string) => {
      const bootstrap = path.join(dir, 'bootstrap');
      if (!fs.existsSync(bootstrap) || !fs.statSync(bootstrap).isFile()) {
        throw new Error(`Dms2Iceberg: no ${binary} bootstrap at ${bootstrap}. Build the functions with \`${BUILD_COMMAND}\`, or give \`code\` (FunctionCode.fromDirectories, fromSamBuild, fromCode).`);
      }
      const m = elfMachine(bootstrap);
      if (m !== undefined && m !== want) {
        throw new Error(`Dms2Iceberg: ${bootstrap} is built for ${m}, but the functions' architecture is ${want}: build it with --${want === 'arm64' ? 'arm64' : 'x86-64'}, or set \`architecture\` to match.`);
      }
      return lambda.Code.fromAsset(dir);
    };
    return { ingest: check(this.ingestDir, INGEST_BINARY), compact: check(this.compactDir, COMPACT_BINARY) };
  }
}

class GivenCode extends FunctionCode {
  constructor(private readonly ingest: lambda.Code, private readonly compact: lambda.Code) {
    super();
  }

  public bind() {
    return { ingest: this.ingest, compact: this.compact };
  }
}
