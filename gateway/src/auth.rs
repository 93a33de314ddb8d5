//! Root credentials: taken from config/env, or generated on first start and kept in the data dir.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Result, s3_error};
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|_| alphabet[rand::random_range(0..alphabet.len())] as char)
        .collect()
}

impl Credentials {
    /// Uses `given` when set; else loads `<data_dir>/credentials`, generating it on first start.
    pub fn load_or_create(
        data_dir: &Path,
        given: Option<Credentials>,
    ) -> anyhow::Result<(Self, bool)> {
        if let Some(c) = given {
            return Ok((c, false));
        }
        let path = data_dir.join("credentials");
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let c: Credentials = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            return Ok((c, false));
        }
        let c = Credentials {
            access_key: format!(
                "LODE{}",
                random_string(16, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            ),
            secret_key: random_string(
                40,
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/",
            ),
        };
        let tmp = path.with_extension("tmp");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .with_context(|| format!("writing {}", tmp.display()))?;
            f.write_all(serde_json::to_string_pretty(&c)?.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok((c, true))
    }
}

/// The key store s3s asks for secrets. Unknown keys get `InvalidAccessKeyId`.
pub struct KeyStore {
    keys: HashMap<String, SecretKey>,
}

impl KeyStore {
    pub fn new(creds: &[Credentials]) -> Self {
        Self {
            keys: creds
                .iter()
                .map(|c| (c.access_key.clone(), SecretKey::from(c.secret_key.clone())))
                .collect(),
        }
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyStore {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.keys.get(access_key).cloned().ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}
