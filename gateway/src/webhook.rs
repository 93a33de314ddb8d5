//! The webhook event destination: an HTTP POST of each event message (AWS's JSON) to the
//! configured URL over a pooled keep-alive connection, optionally signed with HMAC-SHA256
//! (`X-Lode-Signature: sha256=<hex>`). Any 2xx answer is a delivery; anything else (another
//! status, a refused or broken connection) is retried by the delivery worker. An `https://` URL
//! goes over TLS, checked against the destination's CA certificates (`tls_client`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The header that carries the body's signature.
pub const SIGNATURE_HEADER: &str = "x-lode-signature";

pub struct Webhook {
    url: http::Uri,
    key: Option<ring::hmac::Key>,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Webhook {
    /// `secret`: the HMAC key (`None`: unsigned); `tls`: for an `https://` URL. The URL was
    /// checked with the configuration.
    pub fn new(
        url: &str,
        secret: Option<&[u8]>,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> anyhow::Result<Self> {
        let url: http::Uri = url.parse().map_err(|e| {
            let shown = lode_objects::topics::redact(url);
            anyhow::anyhow!("webhook url `{shown}`: {e}")
        })?;
        let tls = match tls {
            Some(c) => (*c).clone(),
            None if url.scheme_str() == Some("https") => {
                anyhow::bail!("an https webhook needs a TLS configuration")
            }
            // Never used: an http:// URL makes no TLS connection.
            None => rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        };
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Webhook {
            url,
            key: secret.map(|s| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, s)),
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }
}

/// `sha256=<hex of HMAC-SHA256(body)>`.
pub fn signature(key: &ring::hmac::Key, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(ring::hmac::sign(key, body).as_ref())
    )
}

#[async_trait::async_trait]
impl lode_objects::event_delivery::EventTarget for Webhook {
    async fn send(&self, body: &[u8]) -> Result<(), String> {
        let mut req = http::Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "lode-events");
        if let Some(k) = &self.key {
            req = req.header(SIGNATURE_HEADER, signature(k, body));
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| {
            // The connector's error says what failed (refused, reset) in its source.
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s.push_str(": ");
                s.push_str(&c.to_string());
                src = c.source();
            }
            s
        })?;
        let status = resp.status();
        // Read the answer to its end, so the connection goes back to the pool.
        let _ = resp.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the webhook answered {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe");
        assert_eq!(
            signature(&k, b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
