//! `dms2iceberg`: apply AWS DMS output to Iceberg tables in a local warehouse (embedded SQLite
//! catalog). `main` only parses arguments, wires the catalog and calls the library.
#![warn(unreachable_pub)]

mod cmd;
mod output;

use std::io::IsTerminal;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "dms2iceberg",
    version,
    about = "Apply AWS DMS full-load and change files to Apache Iceberg tables"
)]
struct Cli {
    /// Log more (repeat for debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// `sqlite`: the embedded catalog `<warehouse>/catalog.db`; `glue`: the AWS Glue Data
    /// Catalog, with `--warehouse s3://bucket/prefix`; `s3tables`: Amazon S3 Tables, with
    /// `--warehouse arn:aws:s3tables:<region>:<account>:bucket/<name>` (AWS settings from the
    /// environment); `rest`: an Iceberg REST catalog at `--uri` (`--warehouse`, if given, is
    /// the server's warehouse; credentials from DMS2ICEBERG_REST_TOKEN, _CREDENTIAL or _SIGV4).
    #[arg(long, global = true, value_enum, default_value = "sqlite")]
    catalog: cmd::CatalogKind,
    /// The REST catalog's base URI (`--catalog rest`), e.g. `http://localhost:8181`.
    #[arg(long, global = true)]
    uri: Option<String>,
    /// The SQLite catalog's name: the `catalog_name` of its rows in catalog.db. Iceberg's
    /// JdbcCatalog (Spark, Flink, Trino) uses its own configured name there: use the same.
    #[arg(long, global = true, default_value = "default")]
    catalog_name: String,
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() {
    dms2iceberg::process::tune_allocator();
    let cli = Cli::parse();
    // Off EC2 the SDK's region lookup fails at the instance metadata service and logs the
    // whole HTTP response as a warning; a missing region is reported by us, in one line naming
    // AWS_REGION, where a command needs it (`-v` shows the SDK's account again).
    let level = match cli.verbose {
        0 => "warn,aws_config::imds=error",
        1 => "info",
        _ => "debug",
    };
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let catalog = cmd::CatalogArgs {
        kind: cli.catalog,
        name: cli.catalog_name,
        uri: cli.uri,
    };
    match runtime.block_on(cmd::run(&catalog, cli.command)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            // `dms2iceberg scan ... | head` closes the pipe early: not an error.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if !broken_pipe {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        }
    }
}

/// Colour only for a person at a terminal who has not asked for none (no-color.org: `NO_COLOR`
/// set to anything but the empty string).
fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }
}
