//! Spool files: written once, read once, never cached ([`crate::direct_io`]: `O_DIRECT`
//! where the file system takes it).
//!
//! Nothing waits for the disk: the writes and reads run on threads of their own
//! ([`SpoolIo`]), each file with one buffer in flight while the next one fills (writing) or
//! empties (reading).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use crate::direct_io::{ALIGN, Aligned, write_at, write_tail};
use crate::error::{Error, Result};

/// Threads doing the spool's I/O: a merge of two key ranges reads ~250 MB/s in 128 KiB
/// reads, which kept one thread half busy and the merges waiting on its queue.
const IO_THREADS: usize = 2;

/// Bytes written at once.
const WRITE_BUFFER: usize = 1 << 20;

/// A buffer handed back by the I/O thread, with what came of its job.
type Done<T> = (Aligned, std::io::Result<T>);

enum Job {
    /// Writes the first `len` bytes of `buf` at `at`; answers whether the file is still
    /// direct.
    Write {
        file: Arc<File>,
        at: u64,
        buf: Aligned,
        len: usize,
        direct: bool,
        done: Sender<Done<bool>>,
    },
    /// Reads up to a buffer's worth at `at`; answers the bytes read.
    Read {
        file: Arc<File>,
        at: u64,
        buf: Aligned,
        done: Sender<Done<usize>>,
    },
}

/// The threads that write and read spool files (each file has one job at a time, so they
/// never race on one). They end once every handle (and every file using it) is dropped.
#[derive(Clone)]
pub(super) struct SpoolIo {
    tx: Sender<Job>,
}

impl SpoolIo {
    pub(super) fn start() -> Result<SpoolIo> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..IO_THREADS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name("dms2iceberg-spool".into())
                .spawn(move || {
                    while let Some(job) = next_job(&rx) {
                        job.run();
                    }
                })
                .map_err(|e| Error::io("the spool thread", e))?;
        }
        Ok(SpoolIo { tx })
    }

    fn send(&self, job: Job) -> std::io::Result<()> {
        self.tx
            .send(job)
            .map_err(|_| std::io::Error::other("the spool thread is gone"))
    }
}

/// The next job, `None` once every handle is dropped.
fn next_job(rx: &Mutex<Receiver<Job>>) -> Option<Job> {
    rx.lock().ok()?.recv().ok()
}

impl Job {
    fn run(self) {
        // A file dropped meanwhile (an abandoned sort) no longer takes the answer.
        match self {
            Job::Write {
                file,
                at,
                buf,
                len,
                direct,
                done,
            } => {
                let r = write_at(&file, &buf.bytes()[..len], at, direct);
                let _ = done.send((buf, r));
            }
            Job::Read {
                file,
                at,
                mut buf,
                done,
            } => {
                let r = read_full_at(&file, buf.bytes_mut(), at);
                let _ = done.send((buf, r));
            }
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        // Direct reads past a short one would start unaligned: only the end reads short.
        if n % ALIGN != 0 {
            break;
        }
    }
    Ok(n)
}

/// A new file in `dir`, already unlinked, direct where the file system allows.
pub(super) fn create(dir: &Path, io: &SpoolIo) -> Result<SpoolWriter> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    let path = dir.join(format!("dms2iceberg-run-{}", uuid::Uuid::new_v4()));
    let mut options = File::options();
    options.read(true).write(true).create_new(true);
    let (file, direct) = crate::direct_io::open(&path, &options)
        .map_err(|e| Error::io(path.display().to_string(), e))?;
    // Unlinked at once: the open handle keeps the data, nothing outlives the process.
    let _ = std::fs::remove_file(&path);
    Ok(SpoolWriter {
        file: Arc::new(file),
        io: io.clone(),
        direct,
        buf: Aligned::new(WRITE_BUFFER),
        spare: None,
        in_flight: None,
        filled: 0,
        len: 0,
    })
}

/// Writes a spool file through aligned buffers, in whole blocks while direct: a full buffer
/// goes to an I/O thread while the next one fills.
pub(super) struct SpoolWriter {
    file: Arc<File>,
    io: SpoolIo,
    direct: bool,
    buf: Aligned,
    spare: Option<Aligned>,
    in_flight: Option<Receiver<Done<bool>>>,
    filled: usize,
    /// Bytes taken so far (the file's length once finished).
    len: u64,
}

impl SpoolWriter {
    /// Waits for the write in flight, if any: its buffer becomes the spare.
    fn settle(&mut self) -> std::io::Result<()> {
        if let Some(rx) = self.in_flight.take() {
            let (buf, r) = rx
                .recv()
                .map_err(|_| std::io::Error::other("the spool thread is gone"))?;
            self.spare = Some(buf);
            self.direct = r?;
        }
        Ok(())
    }

    /// Hands the full buffer to an I/O thread and goes on in the spare.
    fn write_full(&mut self) -> std::io::Result<()> {
        self.settle()?;
        let next = self
            .spare
            .take()
            .unwrap_or_else(|| Aligned::new(WRITE_BUFFER));
        let buf = std::mem::replace(&mut self.buf, next);
        let (done, rx) = channel();
        self.io.send(Job::Write {
            file: self.file.clone(),
            at: self.len - self.filled as u64,
            buf,
            len: self.filled,
            direct: self.direct,
            done,
        })?;
        self.in_flight = Some(rx);
        self.filled = 0;
        Ok(())
    }

    /// Writes what is buffered and returns the file, sized to the bytes written.
    pub(super) fn finish(mut self) -> std::io::Result<(Arc<File>, u64)> {
        self.settle()?;
        if self.filled > 0 {
            let at = self.len - self.filled as u64;
            write_tail(&self.file, &mut self.buf, self.filled, at, self.direct)?;
        }
        Ok((self.file, self.len))
    }
}

impl Write for SpoolWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.buf.fill(self.filled, data);
        self.filled += n;
        self.len += n as u64;
        if self.filled == self.buf.cap() {
            self.write_full()?;
        }
        Ok(n)
    }

    /// Whole buffers are written as they fill; the rest only at [`SpoolWriter::finish`]
    /// (a direct write takes whole blocks).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a spool file from its start through two aligned buffers of `cap` bytes each (rounded
/// up to whole blocks): one read from while an I/O thread fills the other.
pub(super) struct SpoolReader {
    file: Arc<File>,
    io: SpoolIo,
    buf: Aligned,
    pos: usize,
    end: usize,
    /// The read in flight (none past the file's end).
    next: Option<Receiver<Done<usize>>>,
    /// Where the read in flight started.
    at: u64,
}

impl SpoolReader {
    pub(super) fn new(file: Arc<File>, io: &SpoolIo, cap: usize) -> std::io::Result<SpoolReader> {
        let mut r = SpoolReader {
            file,
            io: io.clone(),
            buf: Aligned::new(cap),
            pos: 0,
            end: 0,
            next: None,
            at: 0,
        };
        r.request(Aligned::new(cap))?;
        Ok(r)
    }

    /// Asks the I/O thread to fill `buf` from `self.at`.
    fn request(&mut self, buf: Aligned) -> std::io::Result<()> {
        let (done, rx) = channel();
        self.io.send(Job::Read {
            file: self.file.clone(),
            at: self.at,
            buf,
            done,
        })?;
        self.next = Some(rx);
        Ok(())
    }
}

impl Read for SpoolReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.end {
            let Some(rx) = self.next.take() else {
                return Ok(0);
            };
            let (buf, n) = rx
                .recv()
                .map_err(|_| std::io::Error::other("the spool thread is gone"))?;
            let n = n?;
            let empty = std::mem::replace(&mut self.buf, buf);
            self.pos = 0;
            self.end = n;
            self.at += n as u64;
            // A short read is the file's end.
            if n == self.buf.cap() {
                self.request(empty)?;
            }
        }
        let n = out.len().min(self.end - self.pos);
        out[..n].copy_from_slice(&self.buf.bytes()[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `data` in pieces of `piece` bytes, reads it back in reads of `read` bytes.
    fn round_trip(dir: &Path, data: &[u8], piece: usize, read: usize) -> (Vec<u8>, bool) {
        let io = SpoolIo::start().expect("spool thread");
        let mut w = create(dir, &io).expect("create");
        let direct = w.direct;
        for p in data.chunks(piece.max(1)) {
            w.write_all(p).expect("write");
        }
        let (file, len) = w.finish().expect("finish");
        assert_eq!(len, data.len() as u64);
        assert_eq!(file.metadata().expect("metadata").len(), len);
        let mut r = SpoolReader::new(file, &io, 64 * 1024).expect("reader");
        let mut out = Vec::new();
        let mut buf = vec![0u8; read];
        loop {
            let n = r.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        (out, direct)
    }

    #[test]
    fn spool_files_read_back_what_was_written() {
        let mut dirs = vec![std::env::temp_dir().join("dms2iceberg-spool-tests")];
        // tmpfs refuses O_DIRECT: the same files through the cache.
        if Path::new("/dev/shm").is_dir() {
            dirs.push(Path::new("/dev/shm").join("dms2iceberg-spool-tests"));
        }
        let data: Vec<u8> = (0..3 * WRITE_BUFFER + 5000)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        for dir in &dirs {
            for len in [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, WRITE_BUFFER, data.len()] {
                for (piece, read) in [(1000, 7), (WRITE_BUFFER + 3, 100_000), (64, 1 << 20)] {
                    let (out, direct) = round_trip(dir, &data[..len], piece, read);
                    assert!(
                        out == data[..len],
                        "{} bytes in {piece}-byte writes, {read}-byte reads (direct: {direct}) \
                         in {} did not read back",
                        len,
                        dir.display()
                    );
                }
            }
            // Nothing is left behind in the folder.
            let left = std::fs::read_dir(dir)
                .expect("dir")
                .filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("dms2iceberg-run-")
                })
                .count();
            assert_eq!(left, 0);
        }
    }
}
