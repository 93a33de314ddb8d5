//! The NATS event destination: each event message published on the configured subject, over
//! one connection (async-nats reconnects it). A delivery counts once the server took it: with
//! `jetstream`, once a stream stored it (its publish ack); without, once the server answered the
//! flush after it (core NATS keeps nothing for a subscriber that is away: use JetStream for
//! at-least-once to a consumer). A failed or unanswered publish is retried by the delivery
//! worker; a retry after a lost ack can store the message twice, which at-least-once allows.

use bytes::Bytes;

pub struct Nats {
    url: String,
    subject: String,
    jetstream: bool,
    /// For a `tls://` URL.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    conn: tokio::sync::Mutex<Option<async_nats::Client>>,
}

impl Nats {
    pub fn new(
        url: &str,
        subject: &str,
        jetstream: bool,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Self {
        Nats {
            url: url.to_owned(),
            subject: subject.to_owned(),
            jetstream,
            tls,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The connection, made on first use (the server may be down at start).
    async fn client(&self) -> Result<async_nats::Client, String> {
        let mut c = self.conn.lock().await;
        if let Some(c) = &*c {
            return Ok(c.clone());
        }
        let mut opts = async_nats::ConnectOptions::new().name("lode-events");
        if let Some(tls) = &self.tls {
            opts = opts.tls_client_config((**tls).clone()).require_tls(true);
        }
        let client = opts.connect(self.url.as_str()).await.map_err(|e| {
            format!(
                "connecting to {}: {e}",
                lode_objects::topics::redact(&self.url)
            )
        })?;
        *c = Some(client.clone());
        Ok(client)
    }
}

#[async_trait::async_trait]
impl lode_objects::event_delivery::EventTarget for Nats {
    async fn send(&self, body: &[u8]) -> Result<(), String> {
        let client = self.client().await?;
        let payload = Bytes::copy_from_slice(body);
        if self.jetstream {
            let js = async_nats::jetstream::new(client);
            let ack = js
                .publish(self.subject.clone(), payload)
                .await
                .map_err(|e| format!("publishing: {e}"))?;
            ack.await.map_err(|e| format!("no stream stored it: {e}"))?;
        } else {
            client
                .publish(self.subject.clone(), payload)
                .await
                .map_err(|e| format!("publishing: {e}"))?;
            client.flush().await.map_err(|e| format!("flushing: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_stay_out_of_errors() {
        use lode_objects::topics::redact;
        assert_eq!(redact("nats://u:secret@h:4222"), "nats://u:…@h:4222");
        assert_eq!(redact("nats://token@h:4222"), "nats://…@h:4222");
        assert_eq!(redact("nats://h:4222"), "nats://h:4222");
    }
}
