//! `lode-door`: what the doors (S3, POSIX) and the admin endpoint share, above the object
//! service (`lode_objects`) and nothing below it.
//! * [`error`]: the one mapping of the service's failures onto S3 error codes and HTTP statuses,
//!   and onto errnos.
//! * [`access`]: the SigV4 key store and per-bucket authorization (owner grants, policies,
//!   ACLs, Block Public Access), asked by both doors.
//! * [`profile`]: the IO profile both doors record into.

pub mod access;
pub mod error;
pub mod profile;
