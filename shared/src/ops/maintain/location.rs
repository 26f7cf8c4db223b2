//! Locations as every writer spells them, compared in one form; metadata file versions.

/// The one spelling of a location that every writer's spelling of it maps to, for comparing:
/// `file:/x`, `file:///x`, `file://x` (as iceberg-rust reads it) and `/x` become `file:///x`;
/// `s3a://` and `s3n://` become `s3://`; `%XX` escapes are decoded; repeated slashes in the
/// path collapse and a trailing one goes. Two different files may in rare cases map to one
/// form (`a%20b` and `a b`): the callers only ever keep more because of it, never delete more.
pub fn normalize_location(location: &str) -> String {
    let (scheme, rest) = match split_scheme(location) {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("file".to_string(), location),
    };
    match scheme.as_str() {
        "file" => format!("file:///{}", clean_path(rest.trim_start_matches('/'))),
        "s3" | "s3a" | "s3n" => {
            let rest = rest.trim_start_matches('/');
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            format!("s3://{}/{}", bucket.to_ascii_lowercase(), clean_path(key))
        }
        other => {
            let rest = rest.trim_start_matches('/');
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            format!("{other}://{authority}/{}", clean_path(path))
        }
    }
}

/// `scheme:` and what follows, if `location` starts with a URI scheme (RFC 3986: a letter,
/// then letters, digits, `+`, `-`, `.`). A Windows drive letter is not one we meet.
fn split_scheme(location: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = location.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some((scheme, rest))
}

/// A path with `%XX` decoded, empty segments dropped (repeated and trailing slashes).
fn clean_path(path: &str) -> String {
    percent_decode(path)
        .split('/')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Whether `location` (normalized) lies under the folder `root` (normalized).
pub(super) fn is_under(location: &str, root: &str) -> bool {
    location
        .strip_prefix(root.trim_end_matches('/'))
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The version in a metadata file's name: `00012-<uuid>.metadata.json` (our and Iceberg
/// Java's catalogs, `.gz` variants too) or a Hadoop table's `v12.metadata.json`.
pub fn metadata_version(location: &str) -> Option<u64> {
    let name = location.rsplit('/').next()?;
    let stem = name
        .strip_suffix(".metadata.json.gz")
        .or_else(|| name.strip_suffix(".gz.metadata.json"))
        .or_else(|| name.strip_suffix(".metadata.json"))?;
    let digits = match stem.strip_prefix('v') {
        Some(v) => v,
        None => stem.split_once('-')?.0,
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_location_is_one() {
        let local = [
            "file:///w/sales.db/t/data/a.parquet",
            "file:/w/sales.db/t/data/a.parquet",
            "file://w/sales.db/t/data/a.parquet",
            "/w/sales.db/t/data/a.parquet",
            "FILE:/w//sales.db/t/data/a.parquet",
            "file:/w/sales%2Edb/t/data/a.parquet",
        ];
        for l in local {
            assert_eq!(
                normalize_location(l),
                "file:///w/sales.db/t/data/a.parquet",
                "{l}"
            );
        }
        let s3 = [
            "s3://bucket/wh/t/data/x=a b/f.parquet",
            "s3a://bucket/wh/t/data/x=a%20b/f.parquet",
            "s3n://bucket/wh/t/data/x=a%20b/f.parquet",
            "S3A://Bucket/wh/t//data/x=a b/f.parquet",
        ];
        for l in s3 {
            assert_eq!(
                normalize_location(l),
                "s3://bucket/wh/t/data/x=a b/f.parquet",
                "{l}"
            );
        }
        // Different files stay different.
        assert_ne!(
            normalize_location("s3://a/t/f"),
            normalize_location("s3://b/t/f")
        );
        assert_ne!(
            normalize_location("s3://a/t/f"),
            normalize_location("file:///a/t/f")
        );
        assert_ne!(
            normalize_location("gs://a/t/f"),
            normalize_location("s3://a/t/f")
        );
        // A lone or malformed escape is kept as written.
        assert_eq!(normalize_location("/w/100%"), "file:///w/100%");
        assert_eq!(normalize_location("/w/a%zz"), "file:///w/a%zz");
        assert!(is_under(
            &normalize_location("file:/w/t/data/a"),
            &normalize_location("file:///w/t/")
        ));
        assert!(!is_under(
            &normalize_location("file:///w/t2/data/a"),
            &normalize_location("file:///w/t")
        ));
    }

    #[test]
    fn metadata_versions_from_every_naming() {
        for (name, v) in [
            ("file:/w/t/metadata/00012-0b1c.metadata.json", Some(12)),
            ("s3://b/t/metadata/00003-0b1c.gz.metadata.json", Some(3)),
            ("s3://b/t/metadata/00003-0b1c.metadata.json.gz", Some(3)),
            ("/w/t/metadata/v7.metadata.json", Some(7)),
            ("/w/t/metadata/snap-1-0b1c.avro", None),
            ("/w/t/metadata/version-hint.text", None),
            ("/w/t/metadata/x-0b1c.metadata.json", None),
        ] {
            assert_eq!(metadata_version(name), v, "{name}");
        }
    }
}
