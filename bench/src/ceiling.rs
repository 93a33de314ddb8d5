//! `lode bench-ceiling`: a bare in-memory S3 handler on hyper + tokio (no auth, no hashing, no
//! metadata store, no disk) that answers what the bench workloads send: bucket PUT, object
//! PUT/GET (with Range)/HEAD, ListObjectsV2 (a real listing of the keys it holds: prefix,
//! delimiter, max-keys, continuation) and multipart (parts kept in memory). Running a workload
//! against it measures the ceiling of the HTTP stack and the bench client on this machine; Lode's
//! ops/s against it is the share Lode's own work costs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::report::esc;

/// Objects by path (`/bucket/key`); a multipart part is `path\0upload\0number`.
type Store = Arc<RwLock<BTreeMap<String, Bytes>>>;

/// One ListObjectsV2 page of `bucket`: keys after `after` (the continuation token or
/// start-after) under `prefix`, at most `max` entries, keys under one `delimiter` rolled up into
/// a common prefix. The token of a truncated page is its last key or common prefix.
fn list_v2(
    store: &BTreeMap<String, Bytes>,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> String {
    let root = format!("/{bucket}/");
    let start = format!("{root}{}", after.unwrap_or(prefix).max(prefix));
    let mut contents = String::new();
    let mut prefixes: Vec<String> = vec![];
    let (mut n, mut last, mut truncated) = (0usize, String::new(), false);
    for (path, body) in store.range(start..) {
        let Some(key) = path.strip_prefix(&root) else {
            break;
        };
        if !key.starts_with(prefix) {
            break;
        }
        // A token that ends with the delimiter is a common prefix: all of it was listed.
        let listed = after.is_some_and(|a| {
            key <= a || delimiter.is_some_and(|d| a.ends_with(d) && key.starts_with(a))
        });
        if key.contains('\0') || listed {
            continue;
        }
        let rolled = delimiter.and_then(|d| {
            key[prefix.len()..]
                .find(d)
                .map(|i| key[..prefix.len() + i + d.len()].to_owned())
        });
        if let Some(cp) = &rolled
            && prefixes.last() == Some(cp)
        {
            continue;
        }
        if n == max {
            truncated = true;
            break;
        }
        n += 1;
        match rolled {
            Some(cp) => {
                last = cp.clone();
                prefixes.push(cp);
            }
            None => {
                last = key.to_owned();
                contents += &format!(
                    "<Contents><Key>{}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>\
                     <ETag>&quot;0&quot;</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
                    esc(key),
                    body.len()
                );
            }
        }
    }
    let mut out = format!(
        "<ListBucketResult><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{n}</KeyCount>\
         <MaxKeys>{max}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        esc(bucket),
        esc(prefix)
    );
    if truncated {
        out += &format!(
            "<NextContinuationToken>{}</NextContinuationToken>",
            esc(&last)
        );
    }
    out += &contents;
    for p in prefixes {
        out += &format!(
            "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
            esc(&p)
        );
    }
    out + "</ListBucketResult>"
}

fn resp(status: u16, body: Bytes) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(body));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r.headers_mut()
        .insert(http::header::ETAG, http::HeaderValue::from_static("\"0\""));
    r
}

/// `bytes=A-B` of a body of `len` bytes.
fn range(h: &http::HeaderMap, len: usize) -> Option<(usize, usize)> {
    let v = h
        .get(http::header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (a, b) = v.split_once('-')?;
    let a: usize = a.parse().ok()?;
    let b: usize = b.parse::<usize>().ok()?.min(len.checked_sub(1)?);
    (a <= b).then_some((a, b + 1))
}

async fn handle(
    store: Store,
    req: http::Request<hyper::body::Incoming>,
) -> crate::error::Result<http::Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let is_key = path.trim_start_matches('/').contains('/');
    let method = req.method().clone();
    let headers = req.headers().clone();
    let body = req.into_body().collect().await?.to_bytes();
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .map(|v| {
                urlencoding::decode(&v.replace('+', " "))
                    .map(|c| c.into_owned())
                    .unwrap_or_else(|_| v.to_owned())
            })
    };
    Ok(match (method.as_str(), is_key) {
        ("PUT", false) => resp(200, Bytes::new()),
        ("GET", false) => {
            let token = param("continuation-token").or_else(|| param("start-after"));
            let page = list_v2(
                &store.read().expect("store"),
                path.trim_matches('/'),
                &param("prefix").unwrap_or_default(),
                param("delimiter").as_deref().filter(|d| !d.is_empty()),
                token.as_deref(),
                param("max-keys")
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(1000)
                    .min(1000),
            );
            resp(200, Bytes::from(page))
        }
        ("POST", true) if query.starts_with("uploads") => resp(
            200,
            Bytes::from(format!(
                "<InitiateMultipartUploadResult><UploadId>{}</UploadId></InitiateMultipartUploadResult>",
                rand::random::<u64>()
            )),
        ),
        ("PUT", true) => {
            let name = match (param("partNumber"), param("uploadId")) {
                (Some(n), Some(u)) => format!("{path}\0{u}\0{n:0>5}"),
                _ => path,
            };
            store.write().expect("store").insert(name, body);
            resp(200, Bytes::new())
        }
        ("POST", true) => {
            let Some(u) = param("uploadId") else {
                return Ok(resp(400, Bytes::new()));
            };
            let mut s = store.write().expect("store");
            let prefix = format!("{path}\0{u}\0");
            let mut parts: Vec<String> = s
                .keys()
                .filter(|k| k.starts_with(&prefix))
                .cloned()
                .collect();
            parts.sort();
            let mut whole = BytesMut::new();
            for p in parts {
                whole.extend_from_slice(&s.remove(&p).unwrap_or_default());
            }
            s.insert(path, whole.freeze());
            resp(200, Bytes::from_static(b"<CompleteMultipartUploadResult/>"))
        }
        ("GET" | "HEAD", true) => match store.read().expect("store").get(&path) {
            None => resp(404, Bytes::new()),
            Some(b) if method == "HEAD" => {
                let mut r = resp(200, Bytes::new());
                r.headers_mut()
                    .insert(http::header::CONTENT_LENGTH, b.len().into());
                r
            }
            Some(b) => match range(&headers, b.len()) {
                Some((s, e)) => {
                    let mut r = resp(206, b.slice(s..e));
                    let cr = format!("bytes {s}-{}/{}", e - 1, b.len());
                    r.headers_mut().insert(
                        http::header::CONTENT_RANGE,
                        http::HeaderValue::from_str(&cr).expect("ascii"),
                    );
                    r
                }
                None => resp(200, b.clone()),
            },
        },
        ("DELETE", true) => {
            store.write().expect("store").remove(&path);
            resp(204, Bytes::new())
        }
        _ => resp(400, Bytes::new()),
    })
}

pub async fn serve(listen: SocketAddr) -> crate::error::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!(
        "bench-ceiling: in-memory S3 handler on http://{}",
        listener.local_addr()?
    );
    let store: Store = Arc::default();
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&store), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(page: &str, tag: &str) -> Vec<String> {
        page.split(&format!("<{tag}>"))
            .skip(1)
            .map(|r| r.split_once(&format!("</{tag}>")).unwrap().0.to_owned())
            .collect()
    }

    fn token(page: &str) -> Option<String> {
        keys_of(page, "NextContinuationToken").pop()
    }

    #[test]
    fn listings_page_through_every_key_once_and_roll_up_under_a_delimiter() {
        let mut store = BTreeMap::new();
        for i in 0..2500 {
            store.insert(format!("/b/s/{i:05}"), Bytes::from(vec![0; i % 7]));
        }
        for d in ["a", "b", "c"] {
            store.insert(format!("/b/s/{d}/x"), Bytes::new());
            store.insert(format!("/b/s/{d}/y"), Bytes::new());
        }
        store.insert("/b/s/00007\0upload\u{0}00001".into(), Bytes::new());
        store.insert("/b/t/other".into(), Bytes::new());
        store.insert("/c/s/00001".into(), Bytes::new());

        // Without a delimiter: three pages, every key once, in order, sizes as stored.
        let (mut all, mut after, mut pages) = (vec![], None, 0);
        loop {
            let page = list_v2(&store, "b", "s/", None, after.as_deref(), 1000);
            pages += 1;
            all.extend(keys_of(&page, "Key"));
            after = token(&page);
            assert_eq!(
                after.is_some(),
                page.contains("<IsTruncated>true</IsTruncated>")
            );
            if after.is_none() {
                break;
            }
        }
        assert_eq!(pages, 3);
        let want: Vec<String> = store
            .keys()
            .filter_map(|k| k.strip_prefix("/b/"))
            .filter(|k| k.starts_with("s/") && !k.contains('\0'))
            .map(str::to_owned)
            .collect();
        assert_eq!(all.len(), 2506);
        assert_eq!(all, want);
        let first = list_v2(&store, "b", "s/", None, None, 3);
        assert!(first.contains("<Key>s/00002</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;0&quot;</ETag><Size>2</Size>"));

        // With a delimiter: the directories are common prefixes, listed once across pages.
        let (mut keys, mut prefixes, mut after) = (0, vec![], None);
        loop {
            let page = list_v2(&store, "b", "s/", Some("/"), after.as_deref(), 1000);
            keys += keys_of(&page, "Key").len();
            prefixes.extend(keys_of(&page, "Prefix").into_iter().skip(1));
            after = token(&page);
            if after.is_none() {
                break;
            }
        }
        assert_eq!(keys, 2500);
        assert_eq!(prefixes, ["s/a/", "s/b/", "s/c/"]);
        // A page that ends on a common prefix continues after all of it.
        let page = list_v2(&store, "b", "s/", Some("/"), Some("s/02499"), 1);
        assert_eq!(keys_of(&page, "Prefix")[1..], ["s/a/"]);
        let page = list_v2(&store, "b", "s/", Some("/"), token(&page).as_deref(), 1);
        assert_eq!(keys_of(&page, "Prefix")[1..], ["s/b/"]);
        assert!(
            list_v2(&store, "b", "nothing/", None, None, 1000).contains("<KeyCount>0</KeyCount>")
        );
    }
}
