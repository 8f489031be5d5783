use super::*;

fn memory(pages: usize, set: &[(usize, u8)]) -> Vec<u8> {
    let mut bytes = vec![0u8; pages * WASM_PAGE];
    for &(at, b) in set {
        bytes[at] = b;
    }
    bytes
}

#[test]
fn a_snapshot_holds_the_pages_the_import_wrote_in_runs_with_the_globals_and_sizes() {
    let (before, after) =
        (memory(1, &[(10, 7)]), memory(2, &[(10, 8), (2 * PAGE, 1), (3 * PAGE + 5, 1), (17 * PAGE, 3)]));
    // Pages 0 (changed), 2 and 3 (adjacent), and 17 (in a page the import grew the memory by).
    let (fresh, loaded) = ([Value::Global(1), Value::Memory(&before)], [Value::Global(2), Value::Memory(&after)]);
    let snapshot = Snapshot::diff(&fresh, &loaded, MAX_BYTES).unwrap();
    assert_eq!(snapshot.size(), (4 * PAGE, 3));
    let runs: Vec<_> = snapshot.runs.iter().map(|(m, bytes)| (*m, bytes.len() / PAGE)).collect();
    assert_eq!(runs, [(0, 1), (0, 2), (0, 1)]);
    let u32s = |bytes: &[u8]| bytes.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
    assert_eq!(u32s(&snapshot.head[..4]), [2], "the memory's size in wasm pages");
    assert_eq!(snapshot.head[4..12], 2u64.to_le_bytes(), "the global's value after import");
    assert_eq!(u32s(&snapshot.head[12..]), [0, 2 * PAGE as u32, 17 * PAGE as u32], "each run's address");
    assert_eq!(snapshot.runs[2].1[0], 3);
}

#[test]
fn an_import_that_writes_nothing_leaves_a_snapshot_of_no_runs() {
    let bytes = memory(1, &[(3, 3)]);
    let state = [Value::Memory(&bytes), Value::Global(9)];
    let snapshot = Snapshot::diff(&state, &state, MAX_BYTES).unwrap();
    assert_eq!(snapshot.size(), (0, 0));
}

#[test]
fn an_import_that_writes_more_than_the_limit_or_shrinks_a_memory_has_no_snapshot() {
    let (before, after, larger) = (memory(1, &[]), memory(1, &[(0, 1), (PAGE, 1), (2 * PAGE, 1)]), memory(2, &[]));
    let (fresh, loaded) = ([Value::Memory(&before)], [Value::Memory(&after)]);
    assert_eq!(Snapshot::diff(&fresh, &loaded, 2 * PAGE), Err(Refused::TooLarge(3 * PAGE)));
    assert!(Snapshot::diff(&fresh, &loaded, 3 * PAGE).is_ok());
    assert_eq!(Snapshot::diff(&[Value::Memory(&larger)], &fresh, MAX_BYTES), Err(Refused::Shape));
    assert_eq!(Snapshot::diff(&fresh, &[Value::Global(0)], MAX_BYTES), Err(Refused::Shape));
}
