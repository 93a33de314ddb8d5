//! `lode-s3`: the S3 door. It calls the object service (`lode_objects`) and the doors' shared
//! layer (`lode_door`), nothing below them.
//! * [`s3`]: the `s3s::S3` trait: S3 DTOs to service calls and back.
//! * [`wire`]: HTTP-layer fix-ups around s3s (what it does not parse or answer as AWS does).
//! * [`rename`], [`sse`], [`acl`], [`cors`], [`events`], [`lifecycle`]: the operations and
//!   documents s3s does not carry, or carries differently.
//! * [`host`]: virtual-hosted bucket names.
//! * [`sns`]: RGW's SNS-compatible topic API, with its own SigV4 check.

pub use lode_door::{access, error, profile};

pub mod acl;
pub mod cors;
pub mod events;
pub mod host;
pub mod lifecycle;
pub mod rename;
pub mod s3;
pub mod sns;
pub mod sse;
mod timestamps;
pub mod wire;
