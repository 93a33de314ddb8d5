//! What the S3 door fixes at the HTTP layer, around s3s, so that real clients see AWS's
//! behaviour where s3s 0.14 differs:
//!
//! * [`presign_expiry_error`]: `X-Amz-Expires` outside 0..=604800 is `403
//!   AuthorizationQueryParametersError`, before s3s looks at the URL.
//! * [`spool_chunked`]: a PUT body framed only by `Transfer-Encoding: chunked` (no
//!   Content-Length, no aws-chunked) is read into a spool first and handed to s3s with its
//!   length (s3s refuses such bodies with 411 on the header-signed path; SEMANTICS.md rule 14).
//! * [`post_filename`]: browser-form uploads (`POST` with a `file` part) get `${filename}` in
//!   their `key` field replaced by the uploaded file's name, as S3 does.
//! * [`hoist_form_acl`]: a form upload's `acl` field (AWS's name; s3s reads only an
//!   `x-amz-acl` field) reaches the S3 handler as the [`FORM_ACL`] header.
//! * [`add_request_id`]: every XML error body carries `<RequestId>` (and `<HostId>`) equal to
//!   the `x-amz-request-id` header.
//! * [`unquote_attributes_etag`]: GetObjectAttributes' `<ETag>` is the bare hex, as S3 writes it
//!   there (s3s quotes every ETag element).

use std::collections::VecDeque;
use std::io::{Read, Seek, Write};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;

/// A body kept in memory up to this size; a larger one goes to an unlinked temp file.
const SPOOL_IN_MEMORY: usize = 8 << 20;
/// How far into a form upload the `file` part's header is looked for.
const FORM_HEAD_LIMIT: usize = 1 << 20;
/// AWS's longest presigned URL lifetime: seven days.
const MAX_PRESIGN_SECS: i64 = 604_800;

/// An S3 XML error response.
pub fn error_response(
    status: http::StatusCode,
    code: &str,
    message: &str,
    request_id: &str,
) -> http::Response<s3s::Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message><RequestId>{request_id}</RequestId>\
         <HostId>{request_id}</HostId></Error>"
    );
    let mut r = http::Response::new(s3s::Body::from(xml));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    r
}

/// The refusal of a presigned (SigV4 query) URL whose `X-Amz-Expires` AWS would refuse.
pub fn presign_expiry_error(uri: &http::Uri) -> Option<(&'static str, String)> {
    let q = uri.query()?;
    if !q.contains("X-Amz-Algorithm=") {
        return None;
    }
    let v = q
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))?;
    let msg = match v.parse::<i64>() {
        Err(_) => "X-Amz-Expires should be a number".to_owned(),
        Ok(n) if n < 0 => "X-Amz-Expires must be non-negative".to_owned(),
        Ok(n) if n > MAX_PRESIGN_SECS => format!(
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGN_SECS}"
        ),
        Ok(_) => return None,
    };
    Some(("AuthorizationQueryParametersError", msg))
}

/// Whether `req` is a body framed only by `Transfer-Encoding: chunked`: no Content-Length and
/// not aws-chunked (whose own framing s3s decodes).
pub fn is_plain_chunked<B>(req: &http::Request<B>) -> bool {
    let h = req.headers();
    let chunked = h
        .get(http::header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let aws_chunked = h
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("STREAMING-"))
        || h.get(http::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("aws-chunked"));
    chunked && !aws_chunked && !h.contains_key(http::header::CONTENT_LENGTH)
}

/// Why a chunked body could not be spooled, as the S3 error to answer.
pub enum SpoolError {
    TooLarge,
    Timeout,
    Body(String),
    Io(std::io::Error),
}

impl SpoolError {
    pub fn response(&self, request_id: &str) -> http::Response<s3s::Body> {
        use http::StatusCode as S;
        match self {
            SpoolError::TooLarge => error_response(
                S::BAD_REQUEST,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed object size.",
                request_id,
            ),
            SpoolError::Timeout => error_response(
                S::BAD_REQUEST,
                "RequestTimeout",
                "Your socket connection to the server was not read from or written to within the timeout period.",
                request_id,
            ),
            SpoolError::Body(_) => error_response(
                S::BAD_REQUEST,
                "IncompleteBody",
                "The request body could not be read.",
                request_id,
            ),
            SpoolError::Io(e) => {
                tracing::error!(error = %e, "spooling a chunked request body failed");
                error_response(
                    S::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "We encountered an internal error. Please try again.",
                    request_id,
                )
            }
        }
    }
}

/// Reads a whole chunked body (at most `max` bytes, each frame within `idle`) into memory or,
/// past [`SPOOL_IN_MEMORY`], an unlinked temp file; returns it as a body of known length and
/// sets `Content-Length` on the request.
pub async fn spool_chunked(
    req: http::Request<s3s::Body>,
    max: u64,
    idle: Duration,
) -> Result<http::Request<s3s::Body>, SpoolError> {
    let (mut parts, mut body) = req.into_parts();
    let mut mem = BytesMut::new();
    let mut file: Option<std::fs::File> = None;
    let mut total = 0u64;
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(SpoolError::Timeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(SpoolError::Body(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers of a plain chunked body carry nothing S3 reads
        };
        total += data.len() as u64;
        if total > max {
            return Err(SpoolError::TooLarge);
        }
        mem.extend_from_slice(&data);
        if mem.len() >= SPOOL_IN_MEMORY {
            let chunk = mem.split().freeze();
            let f = file.take();
            file = Some(
                tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
                    let mut f = match f {
                        Some(f) => f,
                        None => tempfile::tempfile()?,
                    };
                    f.write_all(&chunk)?;
                    Ok(f)
                })
                .await
                .map_err(|e| SpoolError::Io(std::io::Error::other(e)))?
                .map_err(SpoolError::Io)?,
            );
        }
    }
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(total));
    let body = match file {
        None => s3s::Body::from(mem.freeze()),
        Some(f) => {
            let tail = mem.freeze();
            s3s::Body::from(Box::pin(file_stream(f, tail, total)) as s3s::stream::DynByteStream)
        }
    };
    Ok(http::Request::from_parts(parts, body))
}

/// The spooled file from its start, then the bytes still in memory, as a byte stream of
/// `len` bytes in all.
fn file_stream(
    f: std::fs::File,
    tail: Bytes,
    len: u64,
) -> impl s3s::stream::ByteStream<Item = Result<Bytes, s3s::StdError>> + Send + Sync + 'static {
    let state = (Some(f), Some(tail), true);
    let s = futures::stream::unfold(state, |(f, tail, first)| async move {
        let Some(mut f) = f else {
            return tail
                .filter(|t| !t.is_empty())
                .map(|t| (Ok(t), (None, None, false)));
        };
        let r = tokio::task::spawn_blocking(move || -> std::io::Result<(std::fs::File, Bytes)> {
            if first {
                f.rewind()?;
            }
            let mut buf = vec![0u8; 1 << 20];
            let n = f.read(&mut buf)?;
            buf.truncate(n);
            Ok((f, Bytes::from(buf)))
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        match r {
            Ok((_, b)) if b.is_empty() => tail
                .filter(|t| !t.is_empty())
                .map(|t| (Ok(t), (None, None, false))),
            Ok((f, b)) => Some((Ok(b), (Some(f), tail, false))),
            Err(e) => Some((Err(Box::new(e) as s3s::StdError), (None, None, false))),
        }
    });
    KnownLength {
        inner: Box::pin(sync_wrapper::SyncStream::new(s)),
        remaining: len,
    }
}

/// A byte stream that reports its exact remaining length.
struct KnownLength<S> {
    inner: std::pin::Pin<Box<sync_wrapper::SyncStream<S>>>,
    remaining: u64,
}

impl<S: Stream<Item = Result<Bytes, s3s::StdError>>> Stream for KnownLength<S> {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let r = self.inner.as_mut().poll_next(cx);
        if let std::task::Poll::Ready(Some(Ok(b))) = &r {
            self.remaining = self.remaining.saturating_sub(b.len() as u64);
        }
        r
    }
}

impl<S: Stream<Item = Result<Bytes, s3s::StdError>>> s3s::stream::ByteStream for KnownLength<S> {
    fn remaining_length(&self) -> s3s::stream::RemainingLength {
        s3s::stream::RemainingLength::new_exact(self.remaining as usize)
    }
}

/// Whether `req` carries a body (a length above zero, or chunked framing).
pub fn has_body<B>(req: &http::Request<B>) -> bool {
    let h = req.headers();
    h.contains_key(http::header::TRANSFER_ENCODING)
        || h.get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// Whether `req` is a browser-form upload (`POST` of `multipart/form-data`).
pub fn is_form_upload<B>(req: &http::Request<B>) -> bool {
    req.method() == http::Method::POST
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// Rewrites a form upload's body so that `${filename}` in its `key` field becomes the name of
/// the uploaded file. S3 requires the `file` part to come last, so every field precedes its
/// header: the body is held back until that header (at most [`FORM_HEAD_LIMIT`] bytes), then
/// streams through untouched.
pub fn post_filename(body: s3s::Body) -> s3s::Body {
    let frames = http_body_util::BodyStream::new(body).filter_map(|f| async move {
        match f {
            Ok(frame) => frame.into_data().ok().map(Ok),
            Err(e) => Some(Err(e)),
        }
    });
    let state = (
        Box::pin(frames),
        BytesMut::new(),
        false,
        VecDeque::<Bytes>::new(),
    );
    let s = futures::stream::unfold(
        state,
        |(mut frames, mut head, mut done, mut out)| async move {
            loop {
                if let Some(b) = out.pop_front() {
                    return Some((Ok(b), (frames, head, done, out)));
                }
                match frames.next().await {
                    Some(Ok(b)) if done => return Some((Ok(b), (frames, head, done, out))),
                    Some(Ok(b)) => {
                        head.extend_from_slice(&b);
                        if let Some(fixed) = substitute_filename(&head) {
                            out.push_back(fixed);
                            head.clear();
                            done = true;
                        } else if head.len() > FORM_HEAD_LIMIT {
                            out.push_back(head.split().freeze());
                            done = true;
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), (frames, head, true, out))),
                    None if !head.is_empty() => {
                        let rest = head.split().freeze();
                        return Some((Ok(rest), (frames, head, true, out)));
                    }
                    None => return None,
                }
            }
        },
    );
    s3s::Body::from(
        Box::pin(Unknown(Box::pin(sync_wrapper::SyncStream::new(s)))) as s3s::stream::DynByteStream,
    )
}

/// The header that carries a form upload's `acl` field to the S3 handler; removed from every
/// request before (a client cannot send it).
pub const FORM_ACL: &str = "x-lode-form-acl";

/// Reads a form upload's head (its fields, up to the `file` part's header, at most
/// [`FORM_HEAD_LIMIT`] bytes) and puts the value of its `acl` field, if any, in the
/// [`FORM_ACL`] header; the body goes on unchanged. A body that fails while its head is read
/// is handed on failing.
pub async fn hoist_form_acl(req: http::Request<s3s::Body>) -> http::Request<s3s::Body> {
    let (mut parts, body) = req.into_parts();
    let mut frames = Box::pin(
        http_body_util::BodyStream::new(body).filter_map(|f| async move {
            match f {
                Ok(frame) => frame.into_data().ok().map(Ok),
                Err(e) => Some(Err(e)),
            }
        }),
    );
    let mut head = BytesMut::new();
    let mut failed = None;
    while head.len() <= FORM_HEAD_LIMIT && file_header_at(&head).is_none() {
        match frames.next().await {
            Some(Ok(b)) => head.extend_from_slice(&b),
            Some(Err(e)) => {
                failed = Some(e);
                break;
            }
            None => break,
        }
    }
    if let Some(v) = form_field(&head, b"acl").and_then(|v| http::HeaderValue::from_bytes(&v).ok())
    {
        parts.headers.insert(FORM_ACL, v);
    }
    let first = futures::stream::iter(std::iter::once(Ok(head.freeze())).chain(failed.map(Err)));
    let s = first.chain(frames);
    let body = s3s::Body::from(
        Box::pin(Unknown(Box::pin(sync_wrapper::SyncStream::new(s)))) as s3s::stream::DynByteStream,
    );
    http::Request::from_parts(parts, body)
}

/// Where the `file` part's header line ends in a form upload's head (`None`: not in yet).
fn file_header_at(head: &[u8]) -> Option<usize> {
    let lower = head.to_ascii_lowercase();
    let at = find(&lower, b"name=\"file\"")?;
    find(&lower[at..], b"\r\n").map(|e| at + e)
}

/// The value of the form field `name` (case-insensitive) among the fields before the `file`
/// part.
fn form_field(head: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let end = file_header_at(head).unwrap_or(head.len());
    let lower = head[..end].to_ascii_lowercase();
    let mut needle = b"name=\"".to_vec();
    needle.extend_from_slice(name);
    needle.push(b'"');
    let at = find(&lower, &needle)?;
    let v_start = at + find(&head[at..end], b"\r\n\r\n")? + 4;
    let v_end = v_start + find(&head[v_start..end], b"\r\n--")?;
    Some(head[v_start..v_end].to_vec())
}

/// A byte stream of unknown length.
struct Unknown<S>(std::pin::Pin<Box<sync_wrapper::SyncStream<S>>>);

impl<S: Stream<Item = Result<Bytes, s3s::StdError>>> Stream for Unknown<S> {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

impl<S: Stream<Item = Result<Bytes, s3s::StdError>>> s3s::stream::ByteStream for Unknown<S> {}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Once `head` holds the `file` part's header line: `head` with `${filename}` in the `key`
/// field replaced by that file's name. `None` while the header is not complete yet.
fn substitute_filename(head: &[u8]) -> Option<Bytes> {
    let lower = head.to_ascii_lowercase();
    let at = find(&lower, b"name=\"file\"")?;
    let line_end = at + find(&lower[at..], b"\r\n")?;
    let line = &head[at..line_end];
    let name = find(&line.to_ascii_lowercase(), b"filename=\"").and_then(|i| {
        let v = &line[i + 10..];
        v.iter().position(|&c| c == b'"').map(|e| &v[..e])
    });
    let Some(name) = name else {
        return Some(Bytes::copy_from_slice(head));
    };
    // Browsers of old sent a full path; S3 keeps the last component.
    let name = name
        .rsplit(|&c| c == b'/' || c == b'\\')
        .next()
        .unwrap_or(name);
    // The `key` field's value: after its part header, up to the next boundary line.
    let key_at = find(&lower[..at], b"name=\"key\"");
    let Some(key_at) = key_at else {
        return Some(Bytes::copy_from_slice(head));
    };
    let v_start = key_at + find(&head[key_at..at], b"\r\n\r\n")? + 4;
    let v_end = v_start + find(&head[v_start..at], b"\r\n--")?;
    let value = &head[v_start..v_end];
    let needle = b"${filename}";
    if find(value, needle).is_none() {
        return Some(Bytes::copy_from_slice(head));
    }
    let mut new_value = Vec::with_capacity(value.len() + name.len());
    let mut rest = value;
    while let Some(i) = find(rest, needle) {
        new_value.extend_from_slice(&rest[..i]);
        new_value.extend_from_slice(name);
        rest = &rest[i + needle.len()..];
    }
    new_value.extend_from_slice(rest);
    let mut out = Vec::with_capacity(head.len() + name.len());
    out.extend_from_slice(&head[..v_start]);
    out.extend_from_slice(&new_value);
    out.extend_from_slice(&head[v_end..]);
    Some(Bytes::from(out))
}

/// A form upload refused by one of its policy's conditions: s3s answers `400
/// InvalidPolicyDocument`, AWS `403 AccessDenied` ("Invalid according to Policy").
pub fn fix_policy_refusal(resp: &mut http::Response<s3s::Body>, request_id: &str) {
    if resp.status() != http::StatusCode::BAD_REQUEST {
        return;
    }
    let Some(b) = resp.body().bytes() else {
        return;
    };
    let text = String::from_utf8_lossy(&b);
    if !text.contains("<Code>InvalidPolicyDocument</Code>") || !text.contains("Policy condition") {
        return;
    }
    let detail = text
        .split("<Message>")
        .nth(1)
        .and_then(|m| m.split("</Message>").next())
        .unwrap_or("");
    *resp = error_response(
        http::StatusCode::FORBIDDEN,
        "AccessDenied",
        &format!("Invalid according to Policy: {detail}"),
        request_id,
    );
}

/// Adds `<RequestId>` and `<HostId>` to an XML error body that lacks them (s3s writes none).
pub fn add_request_id(resp: &mut http::Response<s3s::Body>, request_id: &str) {
    if resp.status().as_u16() < 300 {
        return;
    }
    let Some(b) = resp.body().bytes() else {
        return;
    };
    let Some(end) = find(&b, b"</Error>") else {
        return;
    };
    if find(&b, b"<RequestId>").is_some() {
        return;
    }
    let mut out = Vec::with_capacity(b.len() + 2 * request_id.len() + 48);
    out.extend_from_slice(&b[..end]);
    out.extend_from_slice(
        format!("<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId>").as_bytes(),
    );
    out.extend_from_slice(&b[end..]);
    *resp.body_mut() = s3s::Body::from(out);
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
}

/// Whether `req` is GetObjectAttributes (`GET /bucket/key?attributes`).
pub fn is_object_attributes<B>(req: &http::Request<B>) -> bool {
    req.method() == http::Method::GET
        && req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "attributes" || p.starts_with("attributes="))
        })
}

/// Takes the quotes off the `<ETag>` of a GetObjectAttributes answer: S3 writes it unquoted
/// there (and quoted everywhere else).
pub fn unquote_attributes_etag(resp: &mut http::Response<s3s::Body>) {
    if resp.status() != http::StatusCode::OK {
        return;
    }
    let Some(b) = resp.body().bytes() else {
        return;
    };
    let Some(start) = find(&b, b"<ETag>\"") else {
        return;
    };
    let from = start + b"<ETag>".len();
    let Some(len) = find(&b[from..], b"\"</ETag>") else {
        return;
    };
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(&b[..from]);
    out.extend_from_slice(&b[from + 1..from + len]);
    out.extend_from_slice(&b[from + len + 1..]);
    *resp.body_mut() = s3s::Body::from(out);
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
}

/// The header that carries a GetBucketEncryption's `BlockedEncryptionTypes` (which s3s 0.14
/// does not model) from the handler to the HTTP layer, which writes it into the answer's XML.
/// (A PutBucketEncryption is read by a custom route: `crate::rename::Routes`.)
pub const BLOCKED_ENCRYPTION: &str = "x-lode-blocked-encryption";

/// Whether `uri` names a bucket encryption request (`?encryption`).
pub fn is_bucket_encryption(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|p| p == "encryption" || p.starts_with("encryption="))
    })
}

/// Writes the handler's [`BLOCKED_ENCRYPTION`] into a GetBucketEncryption answer's rule, as
/// `<BlockedEncryptionTypes>`, and drops the header.
pub fn show_blocked_encryption(resp: &mut http::Response<s3s::Body>) {
    let Some(v) = resp.headers_mut().remove(BLOCKED_ENCRYPTION) else {
        return;
    };
    if resp.status() != http::StatusCode::OK {
        return;
    }
    let Some(b) = resp.body().bytes() else {
        return;
    };
    let Some(at) = find(&b, b"</Rule>") else {
        return;
    };
    let mut out = Vec::with_capacity(b.len() + 96);
    out.extend_from_slice(&b[..at]);
    out.extend_from_slice(b"<BlockedEncryptionTypes><EncryptionType>");
    out.extend_from_slice(v.as_bytes());
    out.extend_from_slice(b"</EncryptionType></BlockedEncryptionTypes>");
    out.extend_from_slice(&b[at..]);
    *resp.body_mut() = s3s::Body::from(out);
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(key: &str, filename: &str) -> Vec<u8> {
        format!(
            "--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n{key}\r\n\
             --B\r\nContent-Disposition: form-data; name=\"policy\"\r\n\r\nP\r\n\
             --B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: text/plain\r\n\r\nDATA\r\n--B--\r\n"
        )
        .into_bytes()
    }

    async fn rewrite(body: Vec<u8>, split: usize) -> Vec<u8> {
        let (a, b) = body.split_at(split.min(body.len()));
        let frames: Vec<Result<Bytes, s3s::StdError>> =
            vec![Ok(Bytes::copy_from_slice(a)), Ok(Bytes::copy_from_slice(b))];
        let input = s3s::Body::from(Box::pin(Unknown(Box::pin(sync_wrapper::SyncStream::new(
            futures::stream::iter(frames),
        )))) as s3s::stream::DynByteStream);
        BodyExt::collect(post_filename(input))
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[tokio::test]
    async fn filename_is_substituted_in_the_key_at_any_frame_split() {
        let src = form("up/${filename}", "cat.jpg");
        let want = form("up/cat.jpg", "cat.jpg");
        for split in [0, 5, 40, 120, 150, src.len()] {
            assert_eq!(rewrite(src.clone(), split).await, want, "split {split}");
        }
        // A path from an old browser keeps its last component; keys without the variable and
        // bodies without a file name pass unchanged.
        assert_eq!(
            rewrite(form("${filename}", "C:\\x\\d.txt"), 7).await,
            form("d.txt", "C:\\x\\d.txt")
        );
        let plain = form("fixed", "cat.jpg");
        assert_eq!(rewrite(plain.clone(), 9).await, plain);
    }

    #[tokio::test]
    async fn a_form_acl_field_is_hoisted_into_a_header_at_any_frame_split() {
        let src = form("k", "cat.jpg");
        let with_acl = String::from_utf8(src.clone()).unwrap().replacen(
            "--B\r\nContent-Disposition: form-data; name=\"policy\"",
            "--B\r\nContent-Disposition: form-data; name=\"ACL\"\r\n\r\npublic-read\r\n\
             --B\r\nContent-Disposition: form-data; name=\"policy\"",
            1,
        );
        for (body, want) in [(with_acl.into_bytes(), Some("public-read")), (src, None)] {
            for split in [0, 7, 60, 130, body.len()] {
                let (a, b) = body.split_at(split.min(body.len()));
                let frames: Vec<Result<Bytes, s3s::StdError>> =
                    vec![Ok(Bytes::copy_from_slice(a)), Ok(Bytes::copy_from_slice(b))];
                let input = s3s::Body::from(Box::pin(Unknown(Box::pin(
                    sync_wrapper::SyncStream::new(futures::stream::iter(frames)),
                ))) as s3s::stream::DynByteStream);
                let req = hoist_form_acl(http::Request::new(input)).await;
                assert_eq!(
                    req.headers().get(FORM_ACL).map(|v| v.to_str().unwrap()),
                    want,
                    "split {split}"
                );
                let out = BodyExt::collect(req.into_body()).await.unwrap().to_bytes();
                assert_eq!(&out[..], &body[..], "split {split}");
            }
        }
    }

    #[test]
    fn object_attributes_etag_loses_its_quotes_only_there() {
        let xml = "<GetObjectAttributesResponse><ETag>\"5d41\"</ETag><ObjectSize>5</ObjectSize>\
                   </GetObjectAttributesResponse>";
        let mut r = http::Response::new(s3s::Body::from(xml.to_owned()));
        unquote_attributes_etag(&mut r);
        let out = r.body().bytes().unwrap();
        assert_eq!(
            &out[..],
            &b"<GetObjectAttributesResponse><ETag>5d41</ETag><ObjectSize>5</ObjectSize>\
               </GetObjectAttributesResponse>"[..]
        );
        // Without an ETag element, or on an error: unchanged.
        let mut r = http::Response::new(s3s::Body::from(
            "<A><ObjectSize>5</ObjectSize></A>".to_owned(),
        ));
        unquote_attributes_etag(&mut r);
        assert_eq!(
            &r.body().bytes().unwrap()[..],
            b"<A><ObjectSize>5</ObjectSize></A>"
        );
        let get = |q: &str| http::Request::get(format!("/b/k{q}")).body(()).unwrap();
        assert!(is_object_attributes(&get("?attributes")));
        assert!(is_object_attributes(&get("?versionId=x&attributes=")));
        assert!(!is_object_attributes(&get("?attributesx")));
        assert!(!is_object_attributes(&get("")));
    }

    #[test]
    fn presigned_expiry_bounds() {
        let u = |e: &str| -> http::Uri {
            format!("/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={e}&X-Amz-Date=x")
                .parse()
                .unwrap()
        };
        assert!(presign_expiry_error(&u("604800")).is_none());
        assert!(presign_expiry_error(&u("0")).is_none());
        for bad in ["604801", "-1", "abc"] {
            let (code, _) = presign_expiry_error(&u(bad)).expect(bad);
            assert_eq!(code, "AuthorizationQueryParametersError");
        }
        assert!(presign_expiry_error(&"/b/k?X-Amz-Expires=999999".parse().unwrap()).is_none());
    }

    #[test]
    fn request_id_goes_into_error_bodies_only() {
        let mut r = error_response(http::StatusCode::NOT_FOUND, "NoSuchKey", "m", "ID1");
        add_request_id(&mut r, "ID2"); // already has one
        let b = r.body().bytes().unwrap();
        assert!(find(&b, b"<RequestId>ID1</RequestId>").is_some());
        let mut r = http::Response::new(s3s::Body::from(
            "<?xml version=\"1.0\"?><Error><Code>X</Code></Error>".to_owned(),
        ));
        *r.status_mut() = http::StatusCode::BAD_REQUEST;
        add_request_id(&mut r, "ABC");
        let b = r.body().bytes().unwrap();
        assert!(
            find(
                &b,
                b"<RequestId>ABC</RequestId><HostId>ABC</HostId></Error>"
            )
            .is_some()
        );
        let mut ok = http::Response::new(s3s::Body::from("<Error></Error>".to_owned()));
        add_request_id(&mut ok, "ABC");
        assert!(find(&ok.body().bytes().unwrap(), b"RequestId").is_none());
    }

    #[test]
    fn blocked_encryption_types_are_written_into_the_rule() {
        let mut resp = http::Response::new(s3s::Body::from(
            "<ServerSideEncryptionConfiguration><Rule><BucketKeyEnabled>false</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>".to_owned(),
        ));
        resp.headers_mut()
            .insert(BLOCKED_ENCRYPTION, http::HeaderValue::from_static("SSE-C"));
        show_blocked_encryption(&mut resp);
        let b = resp.body().bytes().unwrap();
        assert!(
            String::from_utf8_lossy(&b).contains("<BlockedEncryptionTypes><EncryptionType>SSE-C</EncryptionType></BlockedEncryptionTypes></Rule>")
        );
        assert!(resp.headers().get(BLOCKED_ENCRYPTION).is_none());
    }
}
