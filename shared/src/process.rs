//! How the process runs: settings the CLI and both Lambda functions apply as they start, and
//! how work is put beside the task that starts it.

/// Keeps freed memory in the process instead of handing it back to the kernel.
///
/// glibc's `malloc` serves a block above its mmap threshold (128 KiB to start with) from a
/// fresh mapping and unmaps it when freed, and trims the heap top above 128 KiB. Each change
/// file's buffers (the DMS object, Arrow builders, zstd contexts, Parquet pages) were then
/// mapped, faulted in and zeroed by the kernel again for every file: page faults and page
/// clearing were about a sixth of a warm change file's CPU. With a 32 MiB threshold (glibc's
/// largest) and a 256 MiB trim threshold the next file reuses them. Resident memory stays at
/// its high-water mark, which costs nothing on Lambda (it bills configured memory) and little
/// in a CLI run.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters; it is called before any allocation
    // that depends on them is freed, and glibc serialises it with its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// Hands the memory freed since the last call back to the kernel, in every arena.
///
/// [`tune_allocator`] keeps up to 256 MiB free per arena, and a streamed input's threads (reader,
/// settling, writer, spawn_blocking) each allocate in an arena of their own: a warm function
/// that applied sixteen 256 MiB full-load files one after another held 1.1 GB, though no file
/// needed more than ~120 MiB at once. Called once a large input is done, it costs about a
/// millisecond against seconds of work, and bounds a warm process by its largest input instead
/// of the sum of its arenas' high-water marks.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free pages to the kernel; glibc locks each arena.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Spawns `work` to run beside the calling task, and yields once so that it starts.
///
/// Tokio keeps a task spawned from a worker in that worker's next-task slot, which no other
/// worker takes from: if the caller then runs CPU work without an await (a lookup, or writes
/// and fsyncs on a local warehouse, which block), the spawned work waits until it ends. A
/// profile showed the speculative data file encoded after the lookup instead of beside it.
/// Yielding lets this worker start the spawned work while the caller moves to the queue the
/// other workers take from.
pub async fn spawn_beside<F>(work: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = tokio::spawn(work);
    tokio::task::yield_now().await;
    handle
}
