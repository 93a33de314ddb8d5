//! The S3 side of encryption at rest: the `x-amz-server-side-encryption*` request headers as
//! the object service's [`Asked`] and [`CustomerKey`], and a record's encryption as response
//! headers. Keys given by clients are checked here and handed on; none is ever logged.

use lode_objects::ObjectRecord;
use lode_objects::encryption::{Asked, CustomerKey};
use s3s::dto::ServerSideEncryption;
use s3s::{S3Result, s3_error};

/// What a write asks for: `x-amz-server-side-encryption` with its KMS key, context and bucket
/// key, or the SSE-C headers (checked: [`customer_key`]).
pub struct WriteHeaders<'a> {
    pub sse: Option<&'a ServerSideEncryption>,
    pub kms_key: Option<&'a String>,
    pub context: Option<&'a String>,
    pub bucket_key: Option<bool>,
    pub customer: (Option<&'a String>, Option<&'a String>, Option<&'a String>),
}

/// Whether SSE-C keys may come over plain HTTP (`[encryption] allow_sse_c_over_http`).
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    pub secure: bool,
    pub allow_plain: bool,
}

impl WriteHeaders<'_> {
    pub fn asked(&self, t: Transport) -> S3Result<Asked> {
        let customer = customer_key(self.customer, t)?;
        match (self.sse.map(|s| s.as_str()), customer) {
            (Some(_), Some(_)) => Err(s3_error!(
                InvalidArgument,
                "Server Side Encryption with Customer provided key is incompatible with the encryption method specified"
            )),
            (None, Some(k)) => {
                self.no_kms_fields()?;
                Ok(Asked::Customer(k))
            }
            (None, None) => {
                self.no_kms_fields()?;
                Ok(Asked::Default)
            }
            (Some("AES256"), None) => {
                if self.kms_key.is_some() || self.context.is_some() {
                    return Err(s3_error!(
                        InvalidArgument,
                        "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms"
                    ));
                }
                Ok(Asked::S3 {
                    bucket_key: self.bucket_key,
                })
            }
            (Some(a @ ("aws:kms" | "aws:kms:dsse")), None) => {
                if let Some(c) = self.context {
                    check_context(c)?;
                }
                if self.kms_key.is_some_and(|k| k.trim().is_empty()) {
                    return Err(s3_error!(
                        InvalidArgument,
                        "The KMS key id must not be empty"
                    ));
                }
                Ok(Asked::Kms {
                    dsse: a == "aws:kms:dsse",
                    key_id: self.kms_key.cloned(),
                    context: self.context.cloned(),
                    bucket_key: self.bucket_key,
                })
            }
            (Some(_), None) => Err(s3_error!(
                InvalidArgument,
                "The encryption method specified is not supported"
            )),
        }
    }

    fn no_kms_fields(&self) -> S3Result<()> {
        if self.kms_key.is_some() || self.context.is_some() {
            return Err(s3_error!(
                InvalidArgument,
                "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms"
            ));
        }
        Ok(())
    }
}

/// `x-amz-server-side-encryption-context`: base64 of a JSON object of string values.
fn check_context(c: &str) -> S3Result<()> {
    use base64::Engine;
    let bad = || {
        s3_error!(
            InvalidArgument,
            "The encryption context is not valid base64-encoded JSON"
        )
    };
    let json = base64::engine::general_purpose::STANDARD
        .decode(c.trim())
        .map_err(|_| bad())?;
    let v: serde_json::Value = serde_json::from_slice(&json).map_err(|_| bad())?;
    match v.as_object() {
        Some(m) if m.values().all(|v| v.is_string()) => Ok(()),
        _ => Err(bad()),
    }
}

/// The SSE-C key of `(algorithm, key, key MD5)` headers (`None`: none of them), checked as S3
/// checks it: all three, `AES256`, 32 bytes of base64 whose MD5 matches, and over TLS.
pub fn customer_key(
    (alg, key, md5): (Option<&String>, Option<&String>, Option<&String>),
    t: Transport,
) -> S3Result<Option<CustomerKey>> {
    use base64::Engine;
    if alg.is_none() && key.is_none() && md5.is_none() {
        return Ok(None);
    }
    if !t.secure && !t.allow_plain {
        return Err(s3_error!(
            InvalidRequest,
            "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection."
        ));
    }
    let (Some(alg), Some(key), Some(md5)) = (alg, key, md5) else {
        return Err(s3_error!(
            InvalidArgument,
            "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key."
        ));
    };
    if alg != "AES256" {
        return Err(s3_error!(
            InvalidEncryptionAlgorithmError,
            "The encryption request you specified is not valid. The valid value is AES256."
        ));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let k: [u8; 32] = b64
        .decode(key.trim())
        .ok()
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "The secret key was invalid for the specified algorithm."
            )
        })?;
    let digest = {
        use md5::Digest;
        md5::Md5::digest(k)
    };
    if b64.decode(md5.trim()).ok().as_deref() != Some(&digest[..]) {
        return Err(s3_error!(
            InvalidArgument,
            "The calculated MD5 hash of the key did not match the hash that was provided."
        ));
    }
    Ok(Some(CustomerKey::new(k)))
}

/// What a response says of a record's encryption.
#[derive(Debug, Default, Clone)]
pub struct Shown {
    pub sse: Option<ServerSideEncryption>,
    pub kms_key: Option<String>,
    pub bucket_key: Option<bool>,
    pub customer_algorithm: Option<String>,
    pub customer_md5: Option<String>,
    pub context: Option<String>,
}

/// The response headers of an object encrypted as `sse` (`None`: in clear, no header);
/// `customer_md5` echoes the request's SSE-C key MD5, as S3 does. KMS keys are shown as ARNs
/// in `region`.
pub fn shown(
    sse: Option<&lode_objects::Sse>,
    customer_md5: Option<&String>,
    region: &str,
) -> Shown {
    use lode_objects::SseKind;
    let Some(sse) = sse else {
        return Shown::default();
    };
    let bucket_key = sse.bucket_key.then_some(true);
    match &sse.kind {
        SseKind::S3 => Shown {
            sse: Some(ServerSideEncryption::from_static(
                ServerSideEncryption::AES256,
            )),
            bucket_key,
            ..Default::default()
        },
        SseKind::Kms {
            key_id,
            context,
            dsse,
        } => Shown {
            sse: Some(ServerSideEncryption::from(
                if *dsse { "aws:kms:dsse" } else { "aws:kms" }.to_owned(),
            )),
            kms_key: Some(kms_arn(key_id, region)),
            bucket_key,
            context: context.clone(),
            ..Default::default()
        },
        SseKind::Customer { .. } => Shown {
            customer_algorithm: Some("AES256".into()),
            customer_md5: customer_md5.cloned(),
            ..Default::default()
        },
    }
}

/// A key ring key's ARN, as S3 names KMS keys in its answers.
pub fn kms_arn(id: &str, region: &str) -> String {
    format!("arn:aws:kms:{region}:000000000000:key/{id}")
}

/// The SSE-C key MD5 header of a record the request named with its key.
pub fn record_shown(rec: &ObjectRecord, md5: Option<&String>, region: &str) -> Shown {
    shown(rec.meta.sse.as_ref(), md5, region)
}

/// A PutBucketEncryption body without its `<BlockedEncryptionTypes>` (s3s 0.14 does not
/// model it, and refuses an element it does not know), and that element's `EncryptionType`
/// values, comma-joined (`None`: no such element).
pub fn split_blocked(xml: &[u8]) -> (Vec<u8>, Option<String>) {
    const OPEN: &[u8] = b"<BlockedEncryptionTypes>";
    const CLOSE: &[u8] = b"</BlockedEncryptionTypes>";
    let find = |hay: &[u8], n: &[u8]| hay.windows(n.len()).position(|w| w == n);
    let Some(a) = find(xml, OPEN) else {
        return (xml.to_vec(), None);
    };
    let Some(len) = find(&xml[a..], CLOSE) else {
        return (xml.to_vec(), None);
    };
    let mut inner = &xml[a + OPEN.len()..a + len];
    let mut types = vec![];
    while let Some(s) = find(inner, b"<EncryptionType>") {
        let from = s + b"<EncryptionType>".len();
        let Some(l) = find(&inner[from..], b"</EncryptionType>") else {
            break;
        };
        types.push(
            String::from_utf8_lossy(&inner[from..from + l])
                .trim()
                .to_owned(),
        );
        inner = &inner[from + l..];
    }
    let mut rest = xml[..a].to_vec();
    rest.extend_from_slice(&xml[a + len + CLOSE.len()..]);
    (rest, Some(types.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_types_are_taken_out_of_the_rule() {
        let xml = b"<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault><BlockedEncryptionTypes><EncryptionType>NONE</EncryptionType></BlockedEncryptionTypes></Rule></ServerSideEncryptionConfiguration>";
        let (rest, t) = split_blocked(xml);
        assert_eq!(t.as_deref(), Some("NONE"));
        assert!(!String::from_utf8_lossy(&rest).contains("Blocked"));
        assert!(String::from_utf8_lossy(&rest).contains(
            "<SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>"
        ));
        assert_eq!(
            split_blocked(b"<Rule></Rule>"),
            (b"<Rule></Rule>".to_vec(), None)
        );
    }

    #[test]
    fn customer_keys_are_checked() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let k = [7u8; 32];
        let md5 = {
            use md5::Digest;
            b64(&md5::Md5::digest(k))
        };
        let (alg, key) = ("AES256".to_owned(), b64(&k));
        let tls = Transport {
            secure: true,
            allow_plain: false,
        };
        let plain = Transport {
            secure: false,
            allow_plain: false,
        };
        assert!(
            customer_key((Some(&alg), Some(&key), Some(&md5)), tls)
                .unwrap()
                .is_some()
        );
        assert!(customer_key((None, None, None), plain).unwrap().is_none());
        let code = |r: S3Result<Option<CustomerKey>>| r.unwrap_err().code().as_str().to_owned();
        assert_eq!(
            code(customer_key((Some(&alg), Some(&key), Some(&md5)), plain)),
            "InvalidRequest"
        );
        assert_eq!(
            code(customer_key((Some(&alg), Some(&key), None), tls)),
            "InvalidArgument"
        );
        let other = b64(&[8u8; 32]);
        assert_eq!(
            code(customer_key((Some(&alg), Some(&other), Some(&md5)), tls)),
            "InvalidArgument"
        );
        let short = b64(&[8u8; 16]);
        assert_eq!(
            code(customer_key((Some(&alg), Some(&short), Some(&md5)), tls)),
            "InvalidArgument"
        );
        let des = "DES".to_owned();
        assert_eq!(
            code(customer_key((Some(&des), Some(&key), Some(&md5)), tls)),
            "InvalidEncryptionAlgorithmError"
        );
        // The key shows in no error.
        let e = customer_key((Some(&alg), Some(&key), Some(&other)), tls).unwrap_err();
        assert!(!format!("{e:?}").contains(&key));
    }
}
