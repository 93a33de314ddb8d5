//! `lode-gateway`: the `lode` binary and its doors.
//!
//! Both doors call the object service (`lode_objects`) and nothing below it.
//! * [`s3`]: the S3 door (s3s over hyper).
//! * [`posix`]: the POSIX door (FUSE).
//! * [`server`]: wiring; the only module that picks concrete backends.
//! * [`error`]: the one mapping of failures onto S3 error codes and statuses, and onto errnos.

pub mod access;
pub mod acl;
pub mod admin;
pub mod amqp;
pub mod auth;
pub mod cluster;
pub mod cors;
pub mod error;
pub mod events;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod lifecycle;
pub mod nats;
pub mod posix;
pub mod profile;
pub mod rename;
pub mod s3;
pub mod server;
pub mod sns;
pub mod sse;
mod timestamps;
pub mod tls_client;
pub mod users;
pub mod webhook;
pub mod wire;
