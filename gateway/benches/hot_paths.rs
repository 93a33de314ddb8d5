//! Criterion micro-benchmarks of the hot paths: key encoding, extent allocation, the
//! aws-chunked payload decoder (a whole PUT through the S3 door over memory stores, chunked vs
//! plain: the difference is the decoder and its trailer check) and the checksums.
//!
//! `cargo bench -p lode-gateway --bench hot_paths`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use md5::Digest;

fn keys(c: &mut Criterion) {
    let mut g = c.benchmark_group("keys");
    let long = "datasets/imagenet/train/n01440764/".to_owned() + &"x".repeat(60) + ".JPEG";
    for (name, key) in [("short", "a/b.jpg"), ("100B", long.as_str())] {
        g.bench_with_input(BenchmarkId::new("object", name), key, |b, k| {
            b.iter(|| lode_metadata::keys::object(black_box("training-bucket"), black_box(k)))
        });
    }
    g.bench_function("extent", |b| {
        b.iter(|| lode_metadata::keys::extent(black_box(3), black_box(0x1234_5678_9000)))
    });
    g.finish();
}

fn allocator(c: &mut Criterion) {
    let mut g = c.benchmark_group("extent_alloc");
    // A 64 GiB device, fragmented: every other 4 MiB extent of the first 4 GiB freed.
    g.bench_function("alloc_free_4MiB_fragmented", |b| {
        let mut a = lode_datapath::ExtentAllocator::new(&[64 << 30]);
        let held: Vec<_> = (0..1024).map(|_| a.allocate(4 << 20).unwrap()).collect();
        for e in held.into_iter().step_by(2) {
            a.free(e).unwrap();
        }
        b.iter(|| {
            let e = a.allocate(black_box(4 << 20)).unwrap();
            a.free(e).unwrap();
        })
    });
    g.bench_function("alloc_free_64KiB", |b| {
        let mut a = lode_datapath::ExtentAllocator::new(&[64 << 30]);
        b.iter(|| {
            let e = a.allocate(black_box(64 << 10)).unwrap();
            a.free(e).unwrap();
        })
    });
    g.finish();
}

fn checksums(c: &mut Criterion) {
    let data = vec![0x5au8; 1 << 20];
    let mut g = c.benchmark_group("checksum_1MiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("crc32c", |b| {
        b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, black_box(&data)))
    });
    g.bench_function("crc32", |b| {
        b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32IsoHdlc, black_box(&data)))
    });
    g.bench_function("crc64nvme", |b| {
        b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, black_box(&data)))
    });
    g.bench_function("md5", |b| b.iter(|| md5::Md5::digest(black_box(&data))));
    g.finish();
}

fn chunked_decoder(c: &mut Criterion) {
    let mut g = c.benchmark_group("put_through_door");
    for size in [4usize << 10, 1 << 20] {
        let body = Bytes::from(vec![0x33u8; size]);
        g.throughput(Throughput::Bytes(size as u64));
        for (name, chunked) in [("plain", false), ("aws_chunked_crc32c_trailer", true)] {
            g.bench_with_input(BenchmarkId::new(name, size), &body, |b, body| {
                b.iter(|| {
                    let st = lode_gateway::fuzzing::put_through_door("bench", body, chunked);
                    assert_eq!(st, 200);
                })
            });
        }
    }
    g.finish();
}

/// A 10-statement bucket policy (nine Allows for other principals with IP and user-agent
/// conditions, one conditional Deny) judged for one GET: what authorization adds per request
/// under a policy (the context of the three keys it reads, then the evaluation).
fn bucket_policy(c: &mut Criterion) {
    use lode_objects::policy::{Context, Policy, Principal, Request};
    let mut st = vec![];
    for i in 0..9 {
        st.push(format!(
            r#"{{"Sid":"s{i}","Effect":"Allow","Principal":{{"AWS":"arn:aws:iam::000000000000:user/team{i}"}},
            "Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::lode-bench/team{i}/*",
            "Condition":{{"IpAddress":{{"aws:SourceIp":"10.0.0.0/8"}},"StringLike":{{"aws:UserAgent":"*train*"}}}}}}"#
        ));
    }
    st.push(
        r#"{"Sid":"deny-plain","Effect":"Deny","Principal":"*","Action":"s3:DeleteObject",
        "Resource":"arn:aws:s3:::lode-bench/keep/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}"#
            .into(),
    );
    let text = format!(
        r#"{{"Version":"2012-10-17","Statement":[{}]}}"#,
        st.join(",")
    );
    let p = Policy::parse(&text, "lode-bench").expect("policy");
    let mut g = c.benchmark_group("policy");
    g.bench_function("context_and_evaluate_10_statements", |b| {
        b.iter(|| {
            let mut cx = Context::default();
            for k in p.reads() {
                cx.set_many(
                    k,
                    vec![match k {
                        "aws:sourceip" => "127.0.0.1".to_owned(),
                        "aws:securetransport" => "false".to_owned(),
                        _ => "Botocore/1.40 lode-bench".to_owned(),
                    }],
                );
            }
            let resource = format!("arn:aws:s3:::{}/{}", "lode-bench", black_box("obj/000123"));
            p.evaluate(&Request {
                principal: Principal::User(black_box("alice")),
                action: "s3:GetObject",
                resource: &resource,
                context: &cx,
            })
        })
    });
}

criterion_group!(
    benches,
    keys,
    allocator,
    checksums,
    chunked_decoder,
    bucket_policy
);
criterion_main!(benches);
