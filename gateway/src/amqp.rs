//! The AMQP 0.9.1 event destination (RabbitMQ; what RGW speaks): each event message published
//! persistent (delivery mode 2) to the configured exchange with the configured routing key, on
//! a channel in publisher-confirm mode. A delivery counts once the broker confirmed it (it is
//! then in every queue the exchange routed it to, on disk for a durable queue); a nack, a lost
//! connection or no confirm in the worker's timeout is retried (a retry after a lost confirm
//! can enqueue it twice, which at-least-once allows).

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use tokio::sync::mpsc;

pub struct Amqp {
    args: OpenConnectionArguments,
    /// `host:port`, for errors (the credentials stay out).
    at: String,
    exchange: String,
    routing_key: String,
    live: tokio::sync::Mutex<Option<Live>>,
}

/// The connection, its confirm-mode channel and the confirms it got.
struct Live {
    conn: Connection,
    chan: Channel,
    confirms: mpsc::UnboundedReceiver<Confirm>,
    /// The delivery tag of the last publish (the broker numbers them from 1 per channel).
    tag: u64,
    /// A send gave up (timed out) before its confirm came: start afresh.
    in_doubt: bool,
}

#[derive(Debug)]
enum Confirm {
    Ack { tag: u64, multiple: bool },
    Nack { tag: u64, multiple: bool },
}

/// Forwards the channel's confirms to the sender waiting for them.
struct Confirms(mpsc::UnboundedSender<Confirm>);

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(&mut self, _: &Channel, _: CloseChannel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        let _ = self.0.send(Confirm::Ack {
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        let _ = self.0.send(Confirm::Nack {
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// `amqp[s]://[user:password@]host[:port][/vhost]` (guest/guest and `/` when not given; port
/// 5672, or 5671 for amqps); `tls` is the TLS configuration an `amqps://` URL needs.
pub fn parse_url(
    url: &str,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Result<(OpenConnectionArguments, String), String> {
    let (rest, default_port) = match (url.strip_prefix("amqp://"), url.strip_prefix("amqps://")) {
        (Some(r), _) => (r, 5672),
        (_, Some(r)) => (r, 5671),
        _ => return Err("an AMQP url is amqp[s]://[user:password@]host[:port][/vhost]".into()),
    };
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (Some(a), r),
        None => (None, rest),
    };
    let (hostport, vhost) = match rest.split_once('/') {
        Some((h, v)) if !v.is_empty() => (
            h,
            urlencoding::decode(v)
                .map_err(|e| e.to_string())?
                .into_owned(),
        ),
        Some((h, _)) => (h, "/".to_owned()),
        None => (rest, "/".to_owned()),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("bad port in {hostport}"))?,
        ),
        None => (hostport, default_port),
    };
    if host.is_empty() {
        return Err("an AMQP url names a host".into());
    }
    let (user, pass) = match auth {
        Some(a) => {
            let (u, p) = a.split_once(':').unwrap_or((a, ""));
            let d = |s: &str| {
                urlencoding::decode(s)
                    .map(|c| c.into_owned())
                    .map_err(|e| e.to_string())
            };
            (d(u)?, d(p)?)
        }
        None => ("guest".to_owned(), "guest".to_owned()),
    };
    let mut args = OpenConnectionArguments::new(host, port, &user, &pass);
    args.virtual_host(&vhost);
    if default_port == 5671 {
        let tls = tls.ok_or("an amqps url needs a TLS configuration")?;
        let connector = tokio_rustls::TlsConnector::from(tls);
        args.tls_adaptor(amqprs::tls::TlsAdaptor::new(connector, host.to_owned()));
    }
    Ok((args, format!("{host}:{port}")))
}

impl Amqp {
    pub fn new(
        url: &str,
        exchange: &str,
        routing_key: &str,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Self, String> {
        let (args, at) = parse_url(url, tls)?;
        Ok(Amqp {
            args,
            at,
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            live: tokio::sync::Mutex::new(None),
        })
    }

    async fn connect(&self) -> Result<Live, String> {
        let conn = Connection::open(&self.args)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.at))?;
        let chan = conn
            .open_channel(None)
            .await
            .map_err(|e| format!("opening a channel: {e}"))?;
        let (tx, confirms) = mpsc::unbounded_channel();
        chan.register_callback(Confirms(tx))
            .await
            .map_err(|e| format!("registering for confirms: {e}"))?;
        chan.confirm_select(ConfirmSelectArguments::default())
            .await
            .map_err(|e| format!("turning on publisher confirms: {e}"))?;
        Ok(Live {
            conn,
            chan,
            confirms,
            tag: 0,
            in_doubt: false,
        })
    }
}

#[async_trait::async_trait]
impl lode_objects::event_delivery::EventTarget for Amqp {
    async fn send(&self, body: &[u8]) -> Result<(), String> {
        let mut g = self.live.lock().await;
        let stale = g
            .as_ref()
            .is_some_and(|l| l.in_doubt || !l.conn.is_open() || !l.chan.is_open());
        if stale && let Some(l) = g.take() {
            let _ = l.conn.close().await;
        }
        if g.is_none() {
            *g = Some(self.connect().await?);
        }
        let live = g.as_mut().expect("connected");
        let mut props = BasicProperties::default();
        props
            .with_persistence(true)
            .with_content_type("application/json");
        let args = BasicPublishArguments::new(&self.exchange, &self.routing_key);
        live.in_doubt = true;
        if let Err(e) = live.chan.basic_publish(props, body.to_vec(), args).await {
            return Err(format!("publishing: {e}"));
        }
        live.tag += 1;
        let tag = live.tag;
        loop {
            match live.confirms.recv().await {
                Some(Confirm::Ack { tag: t, multiple }) if t == tag || (multiple && t >= tag) => {
                    live.in_doubt = false;
                    return Ok(());
                }
                Some(Confirm::Nack { tag: t, multiple }) if t == tag || (multiple && t >= tag) => {
                    live.in_doubt = false;
                    return Err("the broker refused it (nack)".into());
                }
                // An earlier publish's confirm (one given up on): not this one's.
                Some(_) => continue,
                None => return Err("the connection to the broker closed".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn urls_give_host_port_vhost_and_credentials() {
        let (_, at) = parse_url("amqp://u:p%40ss@rabbit:5673/%2Fprod", None).unwrap();
        assert_eq!(at, "rabbit:5673");
        let (_, at) = parse_url("amqp://localhost", None).unwrap();
        assert_eq!(at, "localhost:5672");
        assert!(parse_url("http://x", None).is_err());
        assert!(parse_url("amqp://:5672", None).is_err());
    }
}
