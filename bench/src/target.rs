//! What a workload runs against: an S3 endpoint through Lode's own signed client (hyper +
//! aws-sigv4, keep-alive, no SDK), or a directory through plain file calls (the POSIX variants,
//! for the Lode mount or any local file system).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Context, bail};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// One operation; keys are relative to the bucket.
#[derive(Debug, Clone)]
pub enum Op {
    Put {
        key: String,
        body: Bytes,
    },
    /// `range`: (offset, length).
    Get {
        key: String,
        range: Option<(u64, u64)>,
    },
    Head {
        key: String,
    },
    /// The first page (1000 keys) under `prefix`.
    List {
        prefix: String,
        delimiter: bool,
    },
    /// One part of a multipart upload (POSIX: a write at `offset` into the file).
    Part {
        key: String,
        upload: String,
        part: u32,
        offset: u64,
        body: Bytes,
    },
}

/// What an op did: success, bytes moved, and (for parts) the ETag.
pub struct Outcome {
    pub ok: bool,
    pub bytes: usize,
    pub etag: Option<String>,
    pub body: Bytes,
}

pub struct S3Client {
    http: Client<HttpConnector, Full<Bytes>>,
    endpoint: String,
    bucket: String,
    identity: aws_smithy_runtime_api::client::identity::Identity,
    region: String,
}

pub enum Target {
    S3(Box<S3Client>),
    /// Root of the "bucket": `<dir>/<bucket>`.
    Posix(PathBuf),
}

impl Target {
    pub fn s3(
        endpoint: &str,
        bucket: &str,
        ak: &str,
        sk: &str,
        region: &str,
        conns: usize,
    ) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(conns * 2)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(conn);
        Target::S3(Box::new(S3Client {
            http,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            bucket: bucket.to_owned(),
            identity: Credentials::new(ak, sk, None, None, "lode-bench").into(),
            region: region.to_owned(),
        }))
    }

    pub fn describe(&self) -> String {
        match self {
            Target::S3(c) => format!("s3 {}/{}", c.endpoint, c.bucket),
            Target::Posix(p) => format!("posix {}", p.display()),
        }
    }

    /// Creates the bucket (or directory); an existing one is fine.
    pub async fn prepare(&self) -> crate::error::Result<()> {
        match self {
            Target::S3(c) => {
                let (st, _, body) = c.call("PUT", "", "", Bytes::new()).await?;
                if !(200..300).contains(&st) && st != 409 {
                    bail!(
                        "creating bucket {} failed with HTTP {st}: {}",
                        c.bucket,
                        String::from_utf8_lossy(&body)
                    );
                }
                Ok(())
            }
            Target::Posix(root) => std::fs::create_dir_all(root)
                .with_context(|| format!("creating {}", root.display())),
        }
    }

    pub async fn exec(&self, op: &Op) -> crate::error::Result<Outcome> {
        match self {
            Target::S3(c) => c.exec(op).await,
            Target::Posix(root) => {
                let (root, op) = (root.clone(), op.clone());
                tokio::task::spawn_blocking(move || posix_exec(&root, &op)).await?
            }
        }
    }

    /// Starts a multipart upload (POSIX: creates the file); returns the upload id.
    pub async fn create_multipart(&self, key: &str) -> crate::error::Result<String> {
        match self {
            Target::S3(c) => {
                let (st, _, body) = c.call("POST", key, "uploads=", Bytes::new()).await?;
                let text = String::from_utf8_lossy(&body);
                match text
                    .split_once("<UploadId>")
                    .and_then(|(_, r)| r.split_once("</UploadId>"))
                {
                    Some((id, _)) if st == 200 => Ok(id.to_owned()),
                    _ => bail!("CreateMultipartUpload failed with HTTP {st}: {text}"),
                }
            }
            Target::Posix(root) => {
                let p = root.join(key);
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::File::create(&p)?;
                Ok(String::new())
            }
        }
    }

    /// Completes it (POSIX: fsync), so it is durable when this returns.
    pub async fn complete_multipart(
        &self,
        key: &str,
        upload: &str,
        etags: &[(u32, String)],
    ) -> crate::error::Result<()> {
        match self {
            Target::S3(c) => {
                let mut xml = String::from("<CompleteMultipartUpload>");
                for (n, e) in etags {
                    xml += &format!("<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>");
                }
                xml += "</CompleteMultipartUpload>";
                let q = format!("uploadId={}", urlencoding::encode(upload));
                let (st, _, body) = c.call("POST", key, &q, Bytes::from(xml)).await?;
                let text = String::from_utf8_lossy(&body);
                if st != 200 || text.contains("<Error>") {
                    bail!("CompleteMultipartUpload failed with HTTP {st}: {text}");
                }
                Ok(())
            }
            Target::Posix(root) => {
                let p = root.join(key);
                tokio::task::spawn_blocking(move || std::fs::File::open(p)?.sync_all()).await??;
                Ok(())
            }
        }
    }
}

impl S3Client {
    async fn exec(&self, op: &Op) -> crate::error::Result<Outcome> {
        let (method, key, query, body, range) = match op {
            Op::Put { key, body } => ("PUT", key.as_str(), String::new(), body.clone(), None),
            Op::Get { key, range } => ("GET", key.as_str(), String::new(), Bytes::new(), *range),
            Op::Head { key } => ("HEAD", key.as_str(), String::new(), Bytes::new(), None),
            Op::List { prefix, delimiter } => (
                "GET",
                "",
                format!(
                    "list-type=2&max-keys=1000&prefix={}{}",
                    urlencoding::encode(prefix),
                    if *delimiter { "&delimiter=%2F" } else { "" }
                ),
                Bytes::new(),
                None,
            ),
            Op::Part {
                key,
                upload,
                part,
                body,
                ..
            } => (
                "PUT",
                key.as_str(),
                format!("partNumber={part}&uploadId={}", urlencoding::encode(upload)),
                body.clone(),
                None,
            ),
        };
        let sent = body.len();
        let (st, etag, got) = self.call_range(method, key, &query, body, range).await?;
        let ok = (200..300).contains(&st);
        let bytes = if method == "PUT" { sent } else { got.len() };
        Ok(Outcome {
            ok,
            bytes,
            etag,
            body: got,
        })
    }

    /// One ListObjectsV2 page (the full-listing walk of `list`).
    pub async fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
    ) -> crate::error::Result<(bool, Bytes)> {
        let mut q = format!(
            "list-type=2&max-keys=1000&prefix={}",
            urlencoding::encode(prefix)
        );
        if let Some(t) = token {
            q += &format!("&continuation-token={}", urlencoding::encode(t));
        }
        let (st, _, body) = self.call("GET", "", &q, Bytes::new()).await?;
        Ok((st == 200, body))
    }

    async fn call(
        &self,
        method: &str,
        key: &str,
        query: &str,
        body: Bytes,
    ) -> crate::error::Result<(u16, Option<String>, Bytes)> {
        self.call_range(method, key, query, body, None).await
    }

    /// One signed request (payload unsigned, as aws-cli does over TLS).
    async fn call_range(
        &self,
        method: &str,
        key: &str,
        query: &str,
        body: Bytes,
        range: Option<(u64, u64)>,
    ) -> crate::error::Result<(u16, Option<String>, Bytes)> {
        let path: String = key
            .split('/')
            .map(urlencoding::encode)
            .collect::<Vec<_>>()
            .join("/");
        let mut uri = format!("{}/{}", self.endpoint, self.bucket);
        if !key.is_empty() {
            uri = format!("{uri}/{path}");
        }
        if !query.is_empty() {
            uri = format!("{uri}?{query}");
        }
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        // S3's rules: the path is encoded once and never normalized.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .context("signing parameters")?
            .into();
        let len = body.len().to_string();
        let range_h = range.map(|(o, n)| format!("bytes={o}-{}", o + n - 1));
        let mut headers: Vec<(&str, &str)> = vec![];
        if method == "PUT" || method == "POST" {
            headers.push(("content-length", &len));
        }
        if let Some(r) = &range_h {
            headers.push(("range", r));
        }
        let signable = SignableRequest::new(
            method,
            &uri,
            headers.iter().copied(),
            SignableBody::UnsignedPayload,
        )
        .context("signing a request")?;
        let (instr, _) = sign(signable, &params)
            .context("signing a request")?
            .into_parts();
        let mut req = http::Request::builder().method(method).uri(&uri);
        for (k, v) in &headers {
            req = req.header(*k, *v);
        }
        let mut req = req.body(Full::new(body))?;
        instr.apply_to_request_http1x(&mut req);
        let resp = self.http.request(req).await.context("request failed")?;
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let n = resp.into_body().collect().await?.to_bytes();
        Ok((status, etag, n))
    }
}

fn posix_exec(root: &Path, op: &Op) -> crate::error::Result<Outcome> {
    let done = |bytes: usize| Outcome {
        ok: true,
        bytes,
        etag: None,
        body: Bytes::new(),
    };
    match op {
        Op::Put { key, body } => {
            let p = root.join(key);
            if let Some(d) = p.parent() {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(&p, body)?;
            Ok(done(body.len()))
        }
        Op::Get { key, range: None } => Ok(done(std::fs::read(root.join(key))?.len())),
        Op::Get {
            key,
            range: Some((off, len)),
        } => {
            let f = std::fs::File::open(root.join(key))?;
            let mut buf = vec![0u8; *len as usize];
            let mut got = 0;
            while got < buf.len() {
                let n = f.read_at(&mut buf[got..], off + got as u64)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            Ok(done(got))
        }
        Op::Head { key } => {
            std::fs::metadata(root.join(key))?;
            Ok(done(0))
        }
        Op::List { prefix, .. } => {
            let n = std::fs::read_dir(root.join(prefix))?.take(1000).count();
            Ok(done(n))
        }
        Op::Part {
            key, offset, body, ..
        } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(root.join(key))?;
            f.write_all_at(body, *offset)?;
            Ok(done(body.len()))
        }
    }
}
