//! `lode bench-ceiling`: a bare in-memory S3 handler on hyper + tokio (no auth, no hashing, no
//! metadata store, no disk) that answers what the bench workloads send: bucket PUT, object
//! PUT/GET (with Range)/HEAD, ListObjectsV2 (an empty page) and multipart (parts kept in
//! memory). Running a workload against it measures the ceiling of the HTTP stack and the
//! bench client on this machine; Lode's ops/s against it is the share Lode's own work costs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

type Store = Arc<RwLock<HashMap<String, Bytes>>>;

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
            .map(str::to_owned)
    };
    Ok(match (method.as_str(), is_key) {
        ("PUT", false) => resp(200, Bytes::new()),
        ("GET", false) => resp(
            200,
            Bytes::from_static(
                b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
            ),
        ),
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
