//! The record's rules and its codec: round trips, the window, generations, the bytes.

use super::*;

fn cdc(n: u32) -> OrderKey {
    OrderKey::parse(&format!("1/20220302-{:06}000000000000", 113400 + n)).unwrap()
}
fn load(n: u32) -> OrderKey {
    OrderKey::parse(&format!("0/{n:016X}/")).unwrap()
}
fn meta(size: u64, md5: &str, modified_ms: i64) -> ObjectMeta {
    ObjectMeta {
        size: Some(size),
        modified_ms: Some(modified_ms),
        etag: None,
        md5: Some(md5.into()),
        xxh3: None,
    }
}

/// A truncate supersedes what the table held (the load's files, change files up to the last
/// applied and any written before it), forgets files written after it so they apply again,
/// and happens once: the new generation lists nothing.
#[test]
fn a_truncate_starts_an_empty_generation() {
    let m = |t: i64| meta(10, &format!("m{t}"), t);
    let r = AppliedRecord::default().applied(
        &[
            input(load(1), m(100)),
            input(cdc(1), m(200)),
            input(cdc(2), m(300)),
        ],
        false,
        None,
        100,
        1_000,
    );
    assert_eq!(r.current_objects().len(), 3);
    // cdc(3) was written (at 600) after DMS deleted the folder (at 500), and applied
    // before the deletion was seen.
    let r = r.applied(&[input(cdc(3), m(600))], false, None, 100, 2_000);
    let t = Truncation {
        at_ms: 500,
        written_after: [cdc(3)].into(),
    };
    let after = r.truncated(&t);
    assert!(
        after.current_objects().is_empty(),
        "{:?}",
        after.current_objects()
    );
    assert!(after.load.truncated && after.load.number == 2);
    assert_eq!(after.load.since, Some(cdc(2)));
    assert_eq!(after.watermark, Some(cdc(2)));
    // What the truncate removed never applies again, whenever it arrives.
    assert!(matches!(
        after.classify(&cdc(1), FileKind::Cdc, &m(200)),
        Standing::Applied
    ));
    assert!(matches!(
        after.classify(&load(1), FileKind::Load, &m(100)),
        Standing::Superseded(_)
    ));
    let e = after.classify(&cdc(2), FileKind::Cdc, &m(300));
    assert!(matches!(e, Standing::Applied), "{e:?}");
    // A change file written before the truncate that was never applied: superseded.
    let early = OrderKey::parse("1/20220302-1134025000000000000").unwrap();
    match after.classify(&early, FileKind::Cdc, &m(400)) {
        Standing::Superseded(why) => assert!(why.contains("truncate"), "{why}"),
        s => panic!("{s:?}"),
    }
    // The file written after the truncate, and later ones, apply on top.
    assert_eq!(
        after.classify(&cdc(3), FileKind::Cdc, &m(600)),
        Standing::Pending { late: false }
    );
    assert_eq!(
        after.classify(&cdc(4), FileKind::Cdc, &m(700)),
        Standing::Pending { late: false }
    );
    // A new full load after a drop and create starts on the empty table.
    assert_eq!(
        after.classify(&load(1), FileKind::Load, &meta(10, "new", 800)),
        Standing::Pending { late: false }
    );
    // Encoded and read back the same.
    assert_eq!(
        AppliedRecord::decode(&after.encode().unwrap()).unwrap(),
        after
    );
}

/// A LOAD file recorded with an XXH3 digest (as applied now), or with an MD5 alone (as
/// records kept before): an arriving file under its name with the same size (and another
/// modification time) is the same file or a reload by the digest the record has.
#[test]
fn load_files_are_known_by_xxh3_and_by_md5_in_older_records() {
    let xx = |x: &str, m: i64| ObjectMeta {
        size: Some(10),
        modified_ms: Some(m),
        xxh3: Some(x.into()),
        ..Default::default()
    };
    let now = 1_000;
    let r = AppliedRecord::default().applied(&[input(load(1), xx("aa", 1))], false, None, 10, now);
    // Same size, another modification time: only a digest can tell.
    let arriving = ObjectMeta {
        size: Some(10),
        modified_ms: Some(5),
        ..Default::default()
    };
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &arriving),
        Standing::NeedsDigest
    );
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &xx("aa", 5)),
        Standing::Applied
    );
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &xx("bb", 5)),
        Standing::Reload
    );
    // An older record kept an MD5: the arriving file's MD5 (computed for it) decides.
    let old = AppliedRecord::default().applied(
        &[input(load(1), meta(10, "m1", 1))],
        false,
        None,
        10,
        now,
    );
    let both = |m: &str| ObjectMeta {
        md5: Some(m.into()),
        ..xx("cc", 5)
    };
    assert_eq!(
        old.classify(&load(1), FileKind::Load, &both("m1")),
        Standing::Applied
    );
    assert_eq!(
        old.classify(&load(1), FileKind::Load, &both("m2")),
        Standing::Reload
    );
}
fn input(order: OrderKey, meta: ObjectMeta) -> AppliedInput {
    let kind = if is_load(&order) {
        FileKind::Load
    } else {
        FileKind::Cdc
    };
    AppliedInput {
        key: format!("s3://b/dms/s/t/{order}.csv"),
        order,
        kind,
        meta,
    }
}
fn apply(r: &AppliedRecord, inputs: Vec<AppliedInput>, reload: bool) -> AppliedRecord {
    r.applied(&inputs, reload, None, 3, 1_000)
}

#[test]
fn round_trips_and_stays_small() {
    let mut r = AppliedRecord::default();
    r = apply(&r, vec![input(load(1), meta(10, "a", 100))], false);
    for n in 0..2_000 {
        r = r.applied(
            &[input(cdc(n), meta(5, "c", 200 + n as i64))],
            false,
            Some(format!("{n:035}")),
            crate::config::DEFAULT_WINDOW,
            5_000,
        );
    }
    let text = r.encode().unwrap();
    assert_eq!(AppliedRecord::decode(&text).unwrap(), r);
    assert!(
        text.len() < 20_000,
        "record of 2000 files is {} bytes",
        text.len()
    );
}

#[test]
fn applied_late_and_pending_change_files() {
    let r = apply(
        &AppliedRecord::default(),
        vec![
            input(load(1), meta(10, "a", 100)),
            input(cdc(2), meta(1, "x", 200)),
        ],
        false,
    );
    let m = meta(1, "y", 300);
    assert_eq!(r.classify(&cdc(2), FileKind::Cdc, &m), Standing::Applied);
    assert_eq!(
        r.classify(&cdc(1), FileKind::Cdc, &m),
        Standing::Pending { late: true }
    );
    assert_eq!(
        r.classify(&cdc(3), FileKind::Cdc, &m),
        Standing::Pending { late: false }
    );
}

#[test]
fn the_window_moves_the_horizon_and_late_files_beyond_it_are_loud() {
    let mut r = AppliedRecord::default();
    for n in 1..=5 {
        r = apply(&r, vec![input(cdc(n * 2), meta(1, "x", 100))], false);
    }
    assert_eq!(r.files.len(), 3);
    assert_eq!(r.horizon, Some(cdc(4)));
    // Unknown whether applied: quiet when the object is older than the move, loud if newer.
    let old = meta(1, "z", 900);
    let new = meta(1, "z", 2_000);
    assert_eq!(
        r.classify(&cdc(3), FileKind::Cdc, &old),
        Standing::BeyondRecord { loud: false }
    );
    assert_eq!(
        r.classify(&cdc(3), FileKind::Cdc, &new),
        Standing::BeyondRecord { loud: true }
    );
    // A late file inside the window re-merges with what follows it; before it, it cannot.
    assert_eq!(
        r.applied_after(&cdc(7)).unwrap(),
        vec![
            (cdc(8), r.files[&cdc(8)].clone()),
            (cdc(10), r.files[&cdc(10)].clone())
        ]
    );
    assert!(r.applied_after(&cdc(3)).is_err());
}

#[test]
fn a_load_file_of_the_same_load_appends_and_a_new_version_reloads() {
    let r = apply(
        &AppliedRecord::default(),
        vec![input(load(1), meta(10, "a", 100))],
        false,
    );
    // LOAD2 of the same load, before any change file.
    assert_eq!(
        r.classify(&load(2), FileKind::Load, &meta(7, "b", 110)),
        Standing::Pending { late: false }
    );
    // LOAD1 again: same content under any timestamps.
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &meta(10, "a", 999)),
        Standing::Applied
    );
    // LOAD1 with other content: a reload.
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &meta(11, "q", 999)),
        Standing::Reload
    );
    // Same size, no digest known for the arriving copy: the digest decides.
    let no_digest = ObjectMeta {
        size: Some(10),
        modified_ms: Some(500),
        ..Default::default()
    };
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &no_digest),
        Standing::NeedsDigest
    );
}

#[test]
fn after_changes_a_new_load_file_is_late_and_a_reload_takes_it_along() {
    let r = apply(
        &AppliedRecord::default(),
        vec![input(load(1), meta(10, "a", 100))],
        false,
    );
    let r = apply(&r, vec![input(cdc(1), meta(3, "c", 300))], false);
    // Whatever its modification time (copies change it): a late file of this load.
    for m in [150, 400] {
        assert_eq!(
            r.classify(&load(2), FileKind::Load, &meta(7, "b", m)),
            Standing::Pending { late: true }
        );
    }
    let r = apply(&r, vec![input(load(2), meta(7, "b", 400))], false);
    let joined: Vec<&LoadFile> = r.load.files.iter().filter(|f| f.joined_late).collect();
    assert_eq!(joined.len(), 1);
    // LOAD1 rewritten: a reload, which carries the late joiner into the new load.
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &meta(11, "a2", 500)),
        Standing::Reload
    );
    let carried = vec![joined[0].clone()];
    let r2 = r.applied_with(
        &[input(load(1), meta(11, "a2", 500))],
        &carried,
        true,
        None,
        3,
        1_000,
    );
    assert_eq!(r2.load.number, 2);
    assert_eq!(r2.load.files.len(), 2);
    assert!(r2.load.files.iter().all(|f| !f.joined_late));
}

#[test]
fn a_reload_supersedes_older_change_files_and_the_old_load() {
    let r = apply(
        &AppliedRecord::default(),
        vec![input(load(1), meta(10, "a", 100))],
        false,
    );
    let r = apply(&r, vec![input(cdc(1), meta(3, "c", 200))], false);
    let r = apply(&r, vec![input(load(1), meta(12, "a2", 1_000))], true);
    assert_eq!(r.load.number, 2);
    assert_eq!(r.load.since, Some(cdc(1)));
    assert_eq!(r.load.started_ms, Some(1_000));
    // Another file of the new load appends; the old LOAD1 is superseded.
    assert_eq!(
        r.classify(&load(2), FileKind::Load, &meta(8, "b2", 1_010)),
        Standing::Pending { late: false }
    );
    assert!(matches!(
        r.classify(&load(1), FileKind::Load, &meta(10, "a", 100)),
        Standing::Superseded(_)
    ));
    // A change file written before the reload, arriving late: superseded by order or time.
    assert!(matches!(
        r.classify(&cdc(0), FileKind::Cdc, &meta(1, "o", 150)),
        Standing::Superseded(_)
    ));
    assert!(matches!(
        r.classify(&cdc(2), FileKind::Cdc, &meta(1, "o", 900)),
        Standing::Superseded(_)
    ));
    // One written after it applies.
    assert_eq!(
        r.classify(&cdc(3), FileKind::Cdc, &meta(1, "n", 1_100)),
        Standing::Pending { late: false }
    );
    // Daily full-load-only reruns: each new LOAD1 is the next reload.
    let r3 = apply(&r, vec![input(load(1), meta(13, "a3", 2_000))], true);
    assert_eq!(r3.load.number, 3);
    assert!(matches!(
        r3.classify(&load(1), FileKind::Load, &meta(12, "a2", 1_000)),
        Standing::Superseded(_)
    ));
}

#[test]
fn re_merge_after_a_reload_only_reaches_this_generation() {
    let r = apply(
        &AppliedRecord::default(),
        vec![input(load(1), meta(10, "a", 100))],
        false,
    );
    let r = apply(&r, vec![input(cdc(1), meta(3, "c", 200))], false);
    let r = apply(&r, vec![input(load(1), meta(12, "a2", 1_000))], true);
    let r = apply(&r, vec![input(cdc(5), meta(3, "c", 1_200))], false);
    let after: Vec<OrderKey> = r
        .applied_after(&load(1))
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(after, vec![cdc(5)]);
}

#[test]
fn declared_record_counts_everything_before_as_applied() {
    let r = AppliedRecord::declared(&cdc(5), 1_000);
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &meta(9, "l", 500)),
        Standing::BeyondRecord { loud: false }
    );
    assert_eq!(
        r.classify(&load(1), FileKind::Load, &meta(9, "l", 5_000)),
        Standing::BeyondRecord { loud: true }
    );
    assert_eq!(
        r.classify(&cdc(4), FileKind::Cdc, &meta(1, "x", 500)),
        Standing::BeyondRecord { loud: false }
    );
    assert_eq!(
        r.classify(&cdc(6), FileKind::Cdc, &meta(1, "x", 2_000)),
        Standing::Pending { late: false }
    );
}

#[test]
fn a_damaged_record_is_an_error_that_says_what_to_do() {
    let e = AppliedRecord::decode("{\"v\":1,\"count\":1,\"files\":\"!!\",\"load\":{}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mark-applied"), "{e}");
}

/// The stored form, pinned byte for byte: the property is persisted in tables and read by every
/// dms2iceberg that meets them, so a change here is a format change, never a refactoring.
#[test]
fn the_stored_bytes_are_pinned() {
    let mut r = apply(
        &AppliedRecord::default(),
        vec![input(load(1), meta(10, "a", 100))],
        false,
    );
    r = r.applied(
        &[
            input(cdc(1), meta(5, "c1", 200)),
            input(cdc(2), meta(6, "c2", 300)),
        ],
        false,
        Some("00000000000000000007".into()),
        3,
        2_000,
    );
    r = apply(&r, vec![input(load(2), meta(11, "b", 400))], true);
    r = apply(&r, vec![input(cdc(3), meta(7, "c3", 500))], false);
    assert_eq!(r.encode().unwrap(), GOLDEN);
    assert_eq!(AppliedRecord::decode(GOLDEN).unwrap(), r);
}

/// [`the_stored_bytes_are_pinned`]'s record as written when the codec moved to its own file
/// (`files` is deflate output: should a new flate2 write other bytes, the old ones must still
/// decode to the same record; re-pin only then).
const GOLDEN: &str = r#"{"v":1,"watermark":"1/20220302-113403000000000000","change_seq":"00000000000000000007","count":3,"files":"M7Ay1DcyMDIyMDYw0jU0NDYxMDRAAlyGZlZG6ALGKAIMBlbFxlb6+kn6KbnF+sX6Jfp4TdRLLi7jMjZENRUmiGIyWBAA","load":{"number":2,"files":[{"order":"0/0000000000000002/","key":"s3://b/dms/s/t/0/0000000000000002/.csv","size":11,"modified_ms":400,"md5":"b","applied_ms":1000}],"since":"1/20220302-113402000000000000","started_ms":400},"superseded":[{"order":"0/0000000000000001/","key":"s3://b/dms/s/t/0/0000000000000001/.csv","size":10,"modified_ms":100,"md5":"a","applied_ms":1000}]}"#;
