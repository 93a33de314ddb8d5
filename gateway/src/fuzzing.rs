//! Fuzz harnesses, shared by the cargo-fuzz targets in `gateway/fuzz/` and by the regression
//! test that replays their corpus (`gateway/tests/fuzz_corpus.rs`) on every `cargo test`.
//! Each takes arbitrary bytes and panics only on a real bug.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use lode_metadata::keys;
use lode_metadata::records::{
    self, BucketRecord, ExtentRecord, ObjectRecord, PartRecord, UploadRecord,
};

/// Cuts `data` into `n` pieces, each prefixed by a one-byte length (the last takes the rest).
fn pieces(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = vec![];
    let mut rest = data;
    for i in 0..n {
        if i + 1 == n {
            out.push(rest);
            break;
        }
        let Some((&len, tail)) = rest.split_first() else {
            out.push(&[][..]);
            continue;
        };
        let len = (len as usize).min(tail.len());
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Key encoding: byte order equals (bucket, key) order; splits and parses invert encodes;
/// `prefix_successor` bounds exactly the keys under the prefix; the POSIX name rules agree
/// with the key they build.
pub fn keys(data: &[u8]) {
    let p = pieces(data, 5);
    let (b1, k1, b2, k2) = (text(p[0]), text(p[1]), text(p[2]), text(p[3]));
    if [&b1, &b2].iter().any(|b| b.contains('\0')) || [&k1, &k2].iter().any(|k| k.contains('\0')) {
        return; // refused at the door (bucket names and keys never hold NUL)
    }
    let (e1, e2) = (keys::object(&b1, &k1), keys::object(&b2, &k2));
    assert_eq!(
        (b1.as_bytes(), k1.as_bytes()).cmp(&(b2.as_bytes(), k2.as_bytes())),
        e1.cmp(&e2),
        "encoded order differs from (bucket, key) order"
    );
    let id = text(p[4]).replace('\0', "");
    let up = keys::upload(&b1, &k1, &id);
    let rest = &up[keys::bucket_prefix(&b1).len()..];
    assert_eq!(
        keys::split_upload(rest),
        Some((k1.as_bytes(), id.as_bytes()))
    );
    let dev = u32::from_le_bytes([data.first().copied().unwrap_or(0), 0, 0, 1]);
    let off = data.len() as u64 * 4096;
    assert_eq!(
        keys::parse_extent(&keys::extent(dev, off)),
        Some((dev, off))
    );
    // prefix_successor: every key under the prefix sorts below it, every other key above the
    // prefix sorts at or above it.
    let prefix = keys::object(&b1, &k1);
    if let Some(succ) = keys::prefix_successor(&prefix) {
        let under = keys::object(&b1, &format!("{k1}{k2}"));
        assert!(under < succ);
        if e2 > prefix && !e2.starts_with(&prefix) {
            assert!(e2 >= succ);
        }
    }
    // POSIX: a name accepted for a directory gives back that name from the listing entry.
    let dir = if k1.is_empty() {
        String::new()
    } else {
        format!("{}/", k1.trim_end_matches('/'))
    };
    if let Ok(key) = crate::posix::names::child_key(&dir, k2.as_bytes()) {
        assert_eq!(
            crate::posix::names::entry_name(&dir, &key),
            Some(k2.as_str())
        );
    }
}

fn roundtrip<T>(data: &[u8])
where
    T: records::Record + PartialEq + std::fmt::Debug,
{
    if let Ok(r) = records::decode::<T>(data) {
        let again: T = records::decode(&records::encode(&r)).expect("re-encoded record decodes");
        assert_eq!(again, r);
    }
}

/// Bucket policies: arbitrary text never panics the parser; a policy that parses evaluates
/// (anonymous and a user, several actions and resources, condition values taken from the
/// input) without a panic, and a refusal always names its reason.
/// ACL inputs from requests: `x-amz-grant-*` values (resolved against a directory that knows
/// one id and one address), stored (grantee, permission) pairs, canned names and object writes
/// under every ownership. Invariants: a parsed ACL holds at most 100 grants and round-trips
/// through its stored form; an enforced bucket never stores an owner or an ACL; a refusal is
/// one of the ACL errors.
pub fn acl(data: &[u8]) {
    use lode_objects::ObjError;
    use lode_objects::acl::{Acl, Directory, Ownership, Permission, object_write};
    struct Dir;
    impl Directory for Dir {
        fn by_id(&self, id: &str) -> Option<String> {
            (id == "c0ffee").then(|| "carol".to_owned())
        }
        fn by_email(&self, e: &str) -> Option<String> {
            (e == "dan@example.com").then(|| "dan".to_owned())
        }
    }
    let p = pieces(data, 3);
    let (a, b, c) = (text(p[0]), text(p[1]), text(p[2]));
    let headers = [
        (Permission::Read, a.as_str()),
        (Permission::WriteAcp, b.as_str()),
    ];
    let expected = |e: &ObjError| {
        matches!(
            e,
            ObjError::InvalidArgument(_)
                | ObjError::UnresolvableGrantByEmail(_)
                | ObjError::MalformedAcl(_)
                | ObjError::InvalidRequest(_)
                | ObjError::NotImplemented(_)
                | ObjError::AclNotSupported
                | ObjError::PublicAclBlocked
        )
    };
    match Acl::from_headers(&headers, &Dir) {
        Ok(acl) => {
            assert!(acl.grants.len() <= lode_objects::acl::MAX_GRANTS);
            assert_eq!(Acl::decode(&acl.encode()), acl);
            assert_eq!(Acl::decode_setting(&acl.encode_setting()), Some(acl));
        }
        Err(e) => assert!(expected(&e), "{e:?}"),
    }
    let pairs: Vec<(String, String)> = c
        .split('\n')
        .filter_map(|l| l.split_once(' '))
        .map(|(g, p)| (g.to_owned(), p.to_owned()))
        .collect();
    let stored = Acl::decode(&pairs);
    assert_eq!(Acl::decode(&stored.encode()), stored);
    for ownership in [
        Ownership::ObjectWriter,
        Ownership::BucketOwnerPreferred,
        Ownership::BucketOwnerEnforced,
    ] {
        for canned in [None, Some(c.as_str())] {
            match object_write(
                "wr",
                "bo",
                ownership,
                canned,
                &headers,
                a.len() % 2 == 0,
                &Dir,
            ) {
                Ok((owner, acl)) => {
                    if !ownership.acls_enabled() {
                        assert_eq!((owner, acl), (None, None));
                    } else if let Some(pairs) = acl {
                        assert_eq!(Acl::decode(&pairs).encode(), pairs);
                    }
                }
                Err(e) => assert!(expected(&e), "{e:?}"),
            }
        }
    }
}

pub fn policy(data: &[u8]) {
    use lode_objects::policy::{Context, Policy, Principal, Request};
    let text = String::from_utf8_lossy(data);
    let p = match Policy::parse(&text, "bucket") {
        Ok(p) => p,
        Err(e) => {
            assert!(!e.0.is_empty());
            return;
        }
    };
    let tail = String::from_utf8_lossy(&data[..data.len().min(64)]).into_owned();
    let mut cx = Context::default();
    for key in [
        "aws:SourceIp",
        "aws:CurrentTime",
        "aws:EpochTime",
        "aws:username",
        "s3:prefix",
        "s3:max-keys",
        "aws:SecureTransport",
    ] {
        cx.set(key, tail.clone());
    }
    cx.set_many("s3:RequestObjectTagKeys", vec![tail.clone(), "team".into()]);
    let resources = [
        "arn:aws:s3:::bucket".to_owned(),
        format!("arn:aws:s3:::bucket/{tail}"),
    ];
    for who in [Principal::Anonymous, Principal::User("alice")] {
        for action in [
            "s3:GetObject",
            "s3:PutObject",
            "s3:ListBucket",
            tail.as_str(),
        ] {
            for resource in &resources {
                let _ = p.evaluate(&Request {
                    principal: who,
                    action,
                    resource,
                    context: &cx,
                });
            }
        }
    }
    let _ = (p.is_public(), p.needs_existing_tags());
}

/// Record decoding: arbitrary bytes never panic; whatever decodes re-encodes to itself.
pub fn records(data: &[u8]) {
    roundtrip::<ObjectRecord>(data);
    roundtrip::<UploadRecord>(data);
    roundtrip::<PartRecord>(data);
    roundtrip::<ExtentRecord>(data);
    roundtrip::<BucketRecord>(data);
    let _ = crate::posix::names::Attrs::from_meta(&lode_metadata::records::ObjectMeta {
        user: vec![
            ("mode".into(), text(data)),
            ("mtime".into(), text(data)),
            ("uid".into(), text(data)),
        ],
        ..Default::default()
    });
    let _ = lode_config::ByteSize::parse(&text(data));
}

/// Bytes as URI text: unreserved characters and URI delimiters kept, the rest percent-encoded.
fn uri_text(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if c.is_ascii_alphanumeric() || b"-._~/=&%+".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

struct Harness {
    rt: tokio::runtime::Runtime,
    s3: s3s::service::S3Service,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let meta: Arc<dyn lode_metadata::MetadataStore> =
            Arc::new(lode_metadata::MemMetadataStore::new());
        let dp = Arc::new(lode_datapath::Datapath::new(
            Arc::new(lode_datapath::MemChunkStore::new(&[256 << 20])),
            true,
        ));
        let cfg = lode_objects::ServiceConfig {
            chunk_size: 64 << 10,
            inline_threshold: 1024,
            ..Default::default()
        };
        let svc =
            Arc::new(crate::server::local_service(Arc::clone(&meta), dp, cfg).expect("service"));
        let root = crate::auth::Credentials {
            access_key: "FUZZROOT".into(),
            secret_key: "fuzz-secret-key".into(),
        };
        let users = Arc::new(
            rt.block_on(crate::users::Users::open(
                Arc::new(lode_catalog_kv::KvCatalog::new(meta)),
                [1; 32],
                root,
            ))
            .expect("users"),
        );
        rt.block_on(async {
            svc.create_bucket("fzz", crate::users::ROOT)
                .await
                .expect("bucket");
            for (k, n) in [("a", 10usize), ("dir/b", 3000), ("big", 200_000)] {
                let body =
                    futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(vec![7u8; n]))]);
                svc.put_object(
                    "fzz",
                    k,
                    Default::default(),
                    body,
                    Some(n as i64),
                    Default::default(),
                    Default::default(),
                )
                .await
                .expect("seed object");
            }
        });
        // No auth provider: requests reach the handlers and parsers unsigned.
        let s3 = s3s::service::S3ServiceBuilder::new(crate::s3::LodeS3::new(
            crate::access::Authz { users, svc },
            "us-east-1".into(),
        ))
        .build();
        Harness { rt, s3 }
    })
}

/// One arbitrary HTTP request through the whole S3 door (routing, header and XML parsing,
/// aws-chunked decoding, handlers, the object service) over memory stores. Never a panic, never
/// a 500.
pub fn s3_request(data: &[u8]) {
    let h = harness();
    let p = pieces(data, 6);
    let method = match p[0].first().copied().unwrap_or(0) % 5 {
        0 => "GET",
        1 => "PUT",
        2 => "POST",
        3 => "DELETE",
        _ => "HEAD",
    };
    // Most requests aim at the seeded bucket and objects, so they get past routing.
    let sel = p[1].first().copied().unwrap_or(0);
    let tail = uri_text(p[1].get(1..).unwrap_or(&[]));
    let path = match sel % 6 {
        0 => format!("/{tail}"),
        1 => "/fzz".to_owned(),
        2 => format!("/fzz/{tail}"),
        3 => "/fzz/a".to_owned(),
        4 => "/fzz/big".to_owned(),
        _ => format!("/fzz/dir/{tail}"),
    };
    let query = uri_text(p[2]);
    let uri = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let Ok(uri) = uri.parse::<http::Uri>() else {
        return;
    };
    let mut req = http::Request::builder().method(method).uri(uri);
    const NAMES: &[&str] = &[
        "content-length",
        "content-md5",
        "x-amz-content-sha256",
        "x-amz-decoded-content-length",
        "content-encoding",
        "x-amz-trailer",
        "x-amz-checksum-crc32c",
        "x-amz-sdk-checksum-algorithm",
        "range",
        "if-match",
        "if-none-match",
        "x-amz-copy-source",
        "x-amz-copy-source-range",
        "x-amz-meta-m",
        "content-type",
        "x-amz-checksum-mode",
    ];
    for line in p[3].split(|&b| b == b'\n').take(8) {
        let Some((&n, v)) = line.split_first() else {
            continue;
        };
        if let Ok(v) = http::HeaderValue::from_bytes(v) {
            req = req.header(NAMES[n as usize % NAMES.len()], v);
        }
    }
    let body = Bytes::copy_from_slice(p[4]);
    let Ok(req) = req.body(s3s::Body::from(body)) else {
        return;
    };
    h.rt.block_on(async {
        let resp = h.s3.call(req).await;
        if let Ok(mut resp) = resp {
            let status = resp.status().as_u16();
            let _ = resp.body_mut().store_all_limited(1 << 20).await;
            assert!(
                status < 500 || [501, 503, 507].contains(&status),
                "internal error answering {method} {}",
                text(p[1])
            );
        }
    });
}

/// A PUT of `body` through the whole S3 door over memory stores (the harness above), as
/// aws-cli sends it by default (`aws-chunked`, 64 KiB chunks, unsigned payload, CRC32C
/// trailer) or as a plain body. Returns the HTTP status. Used by the criterion benchmarks.
pub fn put_through_door(key: &str, body: &Bytes, chunked: bool) -> u16 {
    use base64::Engine;
    let h = harness();
    let mut req = http::Request::builder()
        .method("PUT")
        .uri(format!("/fzz/{key}"));
    let payload = if chunked {
        let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, body) as u32;
        let mut v = Vec::with_capacity(body.len() + body.len() / 8192 + 128);
        for c in body.chunks(64 << 10) {
            v.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            v.extend_from_slice(c);
            v.extend_from_slice(b"\r\n");
        }
        v.extend_from_slice(
            format!(
                "0\r\nx-amz-checksum-crc32c:{}\r\n\r\n",
                base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
            )
            .as_bytes(),
        );
        req = req
            .header("content-encoding", "aws-chunked")
            .header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            .header("x-amz-decoded-content-length", body.len().to_string())
            .header("x-amz-trailer", "x-amz-checksum-crc32c")
            .header("x-amz-sdk-checksum-algorithm", "CRC32C");
        Bytes::from(v)
    } else {
        body.clone()
    };
    let req = req
        .header("content-length", payload.len().to_string())
        .body(s3s::Body::from(payload))
        .expect("request");
    h.rt.block_on(async {
        match h.s3.call(req).await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        }
    })
}
