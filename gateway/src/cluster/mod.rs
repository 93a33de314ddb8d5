//! Cluster mode's wiring beyond the catalog and blob backends, built by the server on RADOS and
//! handed to the doors and the admin endpoint through the object service's interfaces:
//! * [`feed`]: the change feed between gateways (commits published as RADOS notifies; the
//!   other gateways' changes delivered to the POSIX door as a
//!   [`lode_objects::RemoteChanges`]; bucket settings announced before they are acknowledged);
//! * [`profile`]: the cluster IO profile (RADOS ops per S3 operation) the admin endpoint shows.
//!
//! No door imports RADOS: this module and `server` are the binary's wiring.

pub mod feed;
pub mod profile;
