//! Memory: measured in a child process (VmHWM is per process; the other tests run in
//! parallel): a huge line costs memory in proportion to it, never more.

use super::*;

/// Length of the enormous line: 16 MiB by default (the test binary is a debug build, where
/// 200 MB takes ~15 s per scenario); `HOSTILE_INPUT_LINE_MB=200` for the full size.
pub(super) fn line_bytes() -> usize {
    std::env::var("HOSTILE_INPUT_LINE_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(16)
        << 20
}

pub(super) fn proc_status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Runs in a child process when `HOSTILE_INPUT_MEM_CHILD` names a scenario; prints the peak RSS
/// growth. Does nothing in a normal run.
#[test]
fn mem_child() {
    let Ok(scenario) = std::env::var("HOSTILE_INPUT_MEM_CHILD") else {
        return;
    };
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "hostile_input_{}_{scenario}.csv",
        std::process::id()
    ));
    let x = vec![b'x'; 1 << 20];
    let data = match scenario.as_str() {
        "data_line" | "header_line" => {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
            if scenario == "data_line" {
                f.write_all(b"Op,id,v\nI,1,").unwrap();
            }
            for _ in 0..line_bytes() / x.len() {
                f.write_all(&x).unwrap();
            }
            f.flush().unwrap();
            SourceData::Path(path.clone())
        }
        "gzip_line" => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(b"Op,id,v\nI,1,").unwrap();
            for _ in 0..line_bytes() / x.len() {
                gz.write_all(&x).unwrap();
            }
            SourceData::Bytes(gz.finish().unwrap().into())
        }
        other => panic!("unknown scenario {other}"),
    };
    let input_kb = data.len().unwrap() / 1024;
    // Reset the peak to the current RSS, so only reading counts.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = proc_status_kb("VmHWM:");
    let start = Instant::now();
    let settings = CsvSettings::simple(",", "");
    let src = SourceFile::open(&object(KEY), data, &settings.table_config(), None);
    let outcome = match read_through(src, &Typing::Strings, vec![PrimitiveType::String]) {
        Ok(b) => format!(
            "ok:{}rows",
            b.iter().map(|b| b.data.num_rows()).sum::<usize>()
        ),
        Err((stage, e)) => {
            let m = e.to_string();
            format!("{stage:?}-error:{}", &m[..m.len().min(160)])
        }
    };
    let after = proc_status_kb("VmHWM:");
    let _ = std::fs::remove_file(&path);
    println!(
        "HOSTILE_MEM scenario={scenario} input_kb={input_kb} growth_kb={} secs={:.2} outcome={outcome}",
        after.saturating_sub(before),
        start.elapsed().as_secs_f64()
    );
}

pub(super) struct MemResult {
    pub(super) input_kb: u64,
    pub(super) growth_kb: u64,
    pub(super) outcome: String,
}

/// Runs `scenario` of `mem_child` in a child process, with a line of `line_mb` MiB (default:
/// `line_bytes()`).
pub(super) fn measure(scenario: &str, line_mb: Option<usize>) -> MemResult {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "memory::mem_child",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env("HOSTILE_INPUT_MEM_CHILD", scenario);
    if let Some(mb) = line_mb {
        child.env("HOSTILE_INPUT_LINE_MB", mb.to_string());
    }
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {scenario} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("HOSTILE_MEM "))
        .unwrap_or_else(|| panic!("no measurement in {stdout}"));
    if verbose() {
        eprintln!("hostile_input: {line}");
    }
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .unwrap_or_default()
            .to_string()
    };
    MemResult {
        input_kb: field("input_kb").parse().unwrap(),
        growth_kb: field("growth_kb").parse().unwrap(),
        outcome: line
            .split("outcome=")
            .nth(1)
            .unwrap_or_default()
            .to_string(),
    }
}

/// An enormous line without a newline (16 MiB by default, `HOSTILE_INPUT_LINE_MB=200` for 200 MiB)
/// in a data record, in the header position, and inside a gzip ~1000x smaller: no panic, and peak
/// memory (VmHWM of a child process) grows by a bounded multiple of the line. Below the record
/// cap (128 MiB) memory follows the line, since the csv crate buffers a whole record; above it the
/// cap bounds it (`slow_record_size_cap_bounds_memory`). Measured before the fixes of 488c9d4
/// (debug build, 24 and 200 MiB lines alike): data ~2.5x, gzip ~2.5x, header ~9x (the name was
/// copied into every layer); now the header is refused as a column name (~4x: the record buffer
/// and one copy).
#[test]
fn enormous_single_line_memory_is_a_bounded_multiple_of_the_line() {
    for (scenario, factor) in [("data_line", 4), ("header_line", 6), ("gzip_line", 4)] {
        let m = measure(scenario, None);
        if scenario == "header_line" {
            assert!(m.outcome.starts_with("Open-error"), "{}", m.outcome);
        }
        let line_kb = (line_bytes() / 1024) as u64;
        assert!(
            m.growth_kb <= factor * line_kb,
            "{scenario}: peak grew {} MB for a {} MB line ({})",
            m.growth_kb / 1024,
            line_kb / 1024,
            m.outcome
        );
        let _ = m.input_kb;
    }
}
