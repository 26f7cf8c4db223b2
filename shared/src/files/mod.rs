//! The table's own files, as stored: metadata.json documents (and, as the layer grows, the
//! manifest lists, manifests and delete files a snapshot's live files are read from).

pub(crate) mod metadata;
