//! TLS for the event destinations (`https://` webhooks, NATS `tls://`, `amqps://`): one rustls
//! client configuration per destination (ring, TLS 1.2 and 1.3), trusting the CA certificates
//! of the destination's `ca_file` or, without one, the system's trust store.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};

/// The client configuration for a destination whose CA certificates are in `ca_file` (PEM;
/// empty: the system's).
pub fn client_config(ca_file: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    if ca_file.as_os_str().is_empty() {
        for c in rustls_native_certs::load_native_certs().certs {
            // A system certificate rustls cannot use is one fewer root, not an error.
            let _ = roots.add(c);
        }
        if roots.is_empty() {
            bail!("the system's trust store has no CA certificate (name one with ca_file)");
        }
    } else {
        let certs = CertificateDer::pem_file_iter(ca_file)
            .with_context(|| format!("reading ca_file {}", ca_file.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parsing ca_file {}", ca_file.display()))?;
        if certs.is_empty() {
            bail!("no certificate in ca_file {}", ca_file.display());
        }
        for c in certs {
            roots
                .add(c)
                .with_context(|| format!("a CA certificate of {}", ca_file.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("lode-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("empty.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = client_config(&f).unwrap_err().to_string();
        assert!(e.contains("no certificate"), "{e}");
        assert!(client_config(&dir.join("missing.pem")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
