//! The files of a local warehouse: iceberg-rust's local storage, with files written around
//! the page cache ([`crate::direct_io`]).
//!
//! A full load writes hundreds of MB of data files that nothing reads back soon; through the
//! page cache each MB cost ~5 ms of CPU on a microVM (pages the host backs lazily), more than
//! encoding it. Written directly, the bytes go from an aligned buffer to the disk; the fsync at
//! close (kept: a commit must not name a file a crash could lose) then has little left to do.
//! Reads, deletes and whole-file writes are iceberg-rust's.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::direct_io::{Aligned, write_at, write_tail};

/// The largest buffer a file is written through.
const WRITE_BUFFER: usize = 1 << 20;
/// The smallest: buffers grow with the file, so that many small files open at once (a
/// partition each) hold little.
const MIN_BUFFER: usize = 64 * 1024;

/// A [`FileIO`] for local paths.
pub(crate) fn file_io() -> FileIO {
    FileIOBuilder::new(Arc::new(LocalFactory)).build()
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LocalFactory;

#[typetag::serde(name = "dms2iceberg-local")]
impl StorageFactory for LocalFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(LocalStorage::default()))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LocalStorage {
    fs: LocalFsStorage,
}

/// A `file:` location or a path, as a path (as iceberg-rust's local storage reads them).
fn local_path(location: &str) -> PathBuf {
    let rest = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    if location.len() != rest.len() && !rest.starts_with('/') {
        PathBuf::from(format!("/{rest}"))
    } else {
        PathBuf::from(rest)
    }
}

fn io_error(what: &str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} {}: {e}", path.display()),
    )
}

#[async_trait]
#[typetag::serde(name = "dms2iceberg-local")]
impl Storage for LocalStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.fs.exists(path).await
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.fs.metadata(path).await
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.fs.read(path).await
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.fs.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.fs.write(path, bs).await
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let path = local_path(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| io_error("cannot create directory", parent, e))?;
        }
        let mut options = File::options();
        options.write(true).create(true).truncate(true);
        let (file, direct) = crate::direct_io::open(&path, &options)
            .map_err(|e| io_error("cannot create file", &path, e))?;
        Ok(Box::new(DirectWrite {
            path,
            file: Some(Arc::new(file)),
            direct,
            buf: None,
            filled: 0,
            at: 0,
            in_flight: None,
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.fs.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.fs.delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        self.fs.delete_stream(paths).await
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// A file written through an aligned buffer: whole buffers as they fill, on a blocking
/// thread while the next one fills (the encoder does not wait for the disk), the rest at close
/// (a direct write takes whole blocks), then synced.
struct DirectWrite {
    path: PathBuf,
    /// `None` once closed.
    file: Option<Arc<File>>,
    direct: bool,
    /// Allocated at the first write, grown up to [`WRITE_BUFFER`].
    buf: Option<Aligned>,
    filled: usize,
    /// Where the buffer's bytes go.
    at: u64,
    /// The full buffer being written: it comes back with whether the file is still direct.
    in_flight: Option<tokio::task::JoinHandle<(Aligned, std::io::Result<bool>)>>,
}

impl DirectWrite {
    fn file(&self) -> iceberg::Result<&Arc<File>> {
        self.file
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "the file is closed"))
    }

    /// Waits for the write in flight, if any; its buffer back.
    async fn settle(&mut self) -> iceberg::Result<Option<Aligned>> {
        let Some(w) = self.in_flight.take() else {
            return Ok(None);
        };
        let (buf, r) = w
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("a file write failed: {e}")))?;
        self.direct = r.map_err(|e| io_error("cannot write", &self.path, e))?;
        Ok(Some(buf))
    }

    /// Hands the full buffer to a blocking thread and goes on in the one written before.
    async fn write_full(&mut self) -> iceberg::Result<()> {
        let spare = self.settle().await?;
        let file = self.file()?.clone();
        let Some(buf) = self.buf.take() else {
            return Ok(());
        };
        self.buf = Some(spare.unwrap_or_else(|| Aligned::new(WRITE_BUFFER)));
        let (at, len, direct) = (self.at, self.filled, self.direct);
        self.in_flight = Some(tokio::task::spawn_blocking(move || {
            let r = write_at(&file, &buf.bytes()[..len], at, direct);
            (buf, r)
        }));
        self.at += len as u64;
        self.filled = 0;
        Ok(())
    }

    /// A buffer with room for `more` bytes after the filled ones, unless it is full-sized.
    fn buffer(&mut self, more: usize) -> &mut Aligned {
        let want = (self.filled + more)
            .next_power_of_two()
            .clamp(MIN_BUFFER, WRITE_BUFFER);
        let filled = self.filled;
        let buf = self.buf.get_or_insert_with(|| Aligned::new(want));
        if buf.cap() < want {
            let mut bigger = Aligned::new(want);
            bigger.bytes_mut()[..filled].copy_from_slice(&buf.bytes()[..filled]);
            *buf = bigger;
        }
        buf
    }
}

#[async_trait]
impl FileWrite for DirectWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        // Refused once closed, as iceberg-rust's local writer does.
        self.file()?;
        let mut data = &bs[..];
        while !data.is_empty() {
            let filled = self.filled;
            let n = self.buffer(data.len()).fill(filled, data);
            data = &data[n..];
            self.filled += n;
            if self.filled == WRITE_BUFFER {
                self.write_full().await?;
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        self.settle().await?;
        let file = self
            .file
            .take()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "the file is closed already"))?;
        if let Some(buf) = &mut self.buf
            && self.filled > 0
        {
            write_tail(&file, buf, self.filled, self.at, self.direct)
                .map_err(|e| io_error("cannot write", &self.path, e))?;
        }
        self.buf = None;
        file.sync_all()
            .map_err(|e| io_error("cannot sync", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_read_as_iceberg_rust_reads_them() {
        assert_eq!(local_path("file:///a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("file://a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("file:/a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("/a/b"), PathBuf::from("/a/b"));
    }

    async fn writer(io: &FileIO, path: &str) -> Box<dyn FileWrite> {
        io.new_output(path)
            .expect("output")
            .writer()
            .await
            .expect("writer")
    }

    async fn read(io: &FileIO, path: &str) -> Bytes {
        io.new_input(path)
            .expect("input")
            .read()
            .await
            .expect("read")
    }

    /// Files written in pieces of every size read back whole, in the temporary folder
    /// (direct where it is on a disk) and in tmpfs (through the cache).
    #[tokio::test]
    async fn files_read_back_what_was_written() {
        let mut dirs = vec![std::env::temp_dir()];
        if std::path::Path::new("/dev/shm").is_dir() {
            dirs.push(PathBuf::from("/dev/shm"));
        }
        let io = file_io();
        let data: Vec<u8> = (0..3 * WRITE_BUFFER + 777)
            .map(|i| (i * 13 % 251) as u8)
            .collect();
        for dir in dirs {
            let dir = dir.join(format!("dms2iceberg-local-{}", uuid::Uuid::new_v4()));
            for len in [0, 1, 4095, 4096, 70_000, WRITE_BUFFER, data.len()] {
                for piece in [1000, 4096, WRITE_BUFFER + 5] {
                    let path = format!("file://{}/f-{len}-{piece}.bin", dir.display());
                    let mut w = writer(&io, &path).await;
                    for p in data[..len].chunks(piece) {
                        w.write(Bytes::copy_from_slice(p)).await.expect("write");
                    }
                    w.close().await.expect("close");
                    let back = read(&io, &path).await;
                    assert!(
                        back[..] == data[..len],
                        "{len} bytes in {piece}-byte writes to {} did not read back",
                        dir.display()
                    );
                }
            }
            // A closed file takes no more bytes.
            let path = format!("file://{}/closed.bin", dir.display());
            let mut w = writer(&io, &path).await;
            w.close().await.expect("close");
            assert!(w.write(Bytes::from_static(b"x")).await.is_err());
            assert!(w.close().await.is_err());
            // Writing over a longer file leaves only the new bytes.
            let path = format!("file://{}/over.bin", dir.display());
            for len in [data.len(), 10] {
                let mut w = writer(&io, &path).await;
                w.write(Bytes::copy_from_slice(&data[..len]))
                    .await
                    .expect("write");
                w.close().await.expect("close");
            }
            assert_eq!(&read(&io, &path).await[..], &data[..10]);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
