//! `lode-gateway`: the `lode` binary: the CLI, configuration and assembly.
//!
//! The doors are crates of their own that call the object service (`lode_objects`) and
//! nothing below it: `lode-s3` (the S3 door, s3s over hyper), `lode-posix` (the POSIX door,
//! FUSE), over `lode-door` (what they share: the failure mapping, authorization, users, the IO
//! profile). Here:
//! * [`server`]: wiring; the only module that picks concrete backends (`build` the local or
//!   cluster service, then run the doors over it).
//! * [`cluster`]: cluster mode's wiring on RADOS beyond the backends (the change feed, the
//!   cluster profile).
//! * [`admin`]: the admin endpoint (metrics, profile, dashboard, user and key APIs).
//! * [`webhook`], [`nats`], [`amqp`], [`tls_client`]: the event destinations.
//! * [`fsck`]: offline checks of the stores.

// The doors, and the layer they share, are crates of their own (under `gateway/`): the paths
// the binary's modules and tests name stay as they were.
pub use lode_door::{access, error, profile};
pub use lode_posix as posix;
pub use lode_s3::{acl, cors, events, host, lifecycle, rename, s3, sns, sse, wire};

pub mod admin;
pub mod amqp;
pub mod auth;
pub mod cluster;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub mod nats;
pub mod server;
pub mod tls_client;
pub mod users;
pub mod webhook;
