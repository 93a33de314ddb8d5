//! Replays the fuzz corpus (`gateway/fuzz/corpus/<target>/`, grown by `gateway/fuzz/run.sh`)
//! through the same harnesses on every `cargo test`, plus a few thousand seeded random inputs,
//! so every input that ever found a bug stays fixed on the stable toolchain and in CI.

use std::path::Path;

use lode_gateway::fuzzing;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    rd.filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect()
}

/// Seeded pseudo-random inputs (xorshift), some shaped like the harness's length prefixes.
fn random_inputs(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let len = (next() % 300) as usize;
            (0..len)
                .map(|_| {
                    let r = next();
                    // Mostly printable, sometimes small lengths and separators.
                    match r % 8 {
                        0 => (r >> 8) as u8 % 16,
                        1 => b'/',
                        2 => b'\n',
                        _ => b' ' + ((r >> 8) as u8 % 95),
                    }
                })
                .collect()
        })
        .collect()
}

fn run(target: &str, f: fn(&[u8]), random: usize) -> usize {
    let mut inputs = corpus(target);
    inputs.extend(random_inputs(
        random,
        0x9E37_79B9_7F4A_7C15 ^ target.len() as u64,
    ));
    for i in &inputs {
        f(i);
    }
    inputs.len()
}

#[test]
fn keys_corpus() {
    assert!(run("keys", fuzzing::keys, 5000) >= 5000);
}

#[test]
fn records_corpus() {
    assert!(run("records", fuzzing::records, 5000) >= 5000);
}

#[test]
fn s3_request_corpus() {
    assert!(run("s3_request", fuzzing::s3_request, 2000) >= 2000);
}

#[test]
fn acl_corpus() {
    assert!(run("acl", fuzzing::acl, 3000) >= 3000);
}

#[test]
fn policy_corpus() {
    assert!(run("policy", fuzzing::policy, 3000) >= 3000);
}
