//! Files written (and read) around the page cache: `O_DIRECT` from aligned buffers.
//!
//! The spool's runs and a local warehouse's files are written once and not read back soon,
//! so the page cache only costs: a copy, and pages that a microVM (Firecracker: Lambda, and
//! the machines we measure on) backs lazily, so a page the guest has not used lately costs a
//! host fault the first time it is written (~10 ms per MB, against ~0.3 for a page in use:
//! a 500 MB data file through the cache took 2.7 s of CPU). With `O_DIRECT` the disk's DMA
//! moves the bytes. A file system that refuses it (tmpfs at open; some at the first write)
//! gets the same writes through the cache.

use std::fs::{File, OpenOptions};
use std::path::Path;

/// Alignment of direct I/O: buffers, offsets and lengths in multiples of it.
pub(crate) const ALIGN: usize = 4096;

/// Opens `path` with `options`, direct where the file system takes it; whether it is.
pub(crate) fn open(path: &Path, options: &OpenOptions) -> std::io::Result<(File, bool)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut direct = options.clone();
        direct.custom_flags(libc::O_DIRECT);
        match direct.open(path) {
            Ok(f) => return Ok((f, true)),
            // tmpfs refuses O_DIRECT at open.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    options.open(path).map(|f| (f, false))
}

/// Writes `data` at `at` (while `direct`: aligned, a whole number of blocks). A file system
/// that takes `O_DIRECT` at open but not the write gets it, and every write after, through
/// the cache. Whether the file is still direct.
pub(crate) fn write_at(file: &File, data: &[u8], at: u64, direct: bool) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    match file.write_all_at(data, at) {
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
            clear_direct(file)?;
            file.write_all_at(data, at).map(|()| false)
        }
        r => r.map(|()| direct),
    }
}

/// Writes the last `len` bytes of a file (at `at`, aligned) from `buf`: while direct, padded
/// with zeros to a whole block, the padding then cut off.
pub(crate) fn write_tail(
    file: &File,
    buf: &mut Aligned,
    len: usize,
    at: u64,
    direct: bool,
) -> std::io::Result<()> {
    if !direct {
        return write_at(file, &buf.bytes()[..len], at, false).map(|_| ());
    }
    let padded = len.next_multiple_of(ALIGN);
    buf.bytes_mut()[len..padded].fill(0);
    // Through the cache or not, the padding was written: cut it off.
    write_at(file, &buf.bytes()[..padded], at, true)?;
    file.set_len(at + len as u64)
}

/// A byte buffer whose usable part starts at an [`ALIGN`] boundary.
pub(crate) struct Aligned {
    raw: Vec<u8>,
    start: usize,
    cap: usize,
}

impl Aligned {
    /// `cap` rounded up to a whole number of blocks.
    pub(crate) fn new(cap: usize) -> Aligned {
        let cap = cap.next_multiple_of(ALIGN);
        let raw = vec![0u8; cap + ALIGN];
        let start = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        Aligned { raw, start, cap }
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Copies as much of `data` as fits after the first `filled` bytes; how much.
    pub(crate) fn fill(&mut self, filled: usize, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - filled);
        self.bytes_mut()[filled..filled + n].copy_from_slice(&data[..n]);
        n
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.cap]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.cap]
    }
}

/// Clears `O_DIRECT` on an open file.
#[cfg(target_os = "linux")]
fn clear_direct(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL / F_SETFL on a descriptor `file` owns and keeps open; only the status
    // flags change.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn clear_direct(_file: &File) -> std::io::Result<()> {
    Ok(())
}
