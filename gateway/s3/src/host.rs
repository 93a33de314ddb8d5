//! Virtual-hosted-style addressing: `<bucket>.<domain>[:port]` names the bucket; the bare domain,
//! an IP address or any other host is path-style.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

pub struct VirtualHosts {
    domain: String,
}

impl VirtualHosts {
    pub fn new(domain: &str) -> Self {
        Self {
            domain: domain.to_ascii_lowercase(),
        }
    }
}

impl S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = match host.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        let lower = name.to_ascii_lowercase();
        if let Some(bucket) = lower
            .strip_suffix(&self.domain)
            .and_then(|b| b.strip_suffix('.'))
            && !bucket.is_empty()
        {
            return Ok(VirtualHost::new(self.domain.as_str()).with_bucket(bucket.to_owned()));
        }
        Ok(VirtualHost::new(self.domain.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_and_path_style() {
        let h = VirtualHosts::new("s3.local");
        assert_eq!(
            h.parse_host_header("data.s3.local:9000").unwrap().bucket(),
            Some("data")
        );
        assert_eq!(
            h.parse_host_header("a.b.s3.local").unwrap().bucket(),
            Some("a.b")
        );
        assert_eq!(h.parse_host_header("s3.local:9000").unwrap().bucket(), None);
        assert_eq!(
            h.parse_host_header("localhost:9000").unwrap().bucket(),
            None
        );
        assert_eq!(h.parse_host_header("evil-s3.local").unwrap().bucket(), None);
    }
}
