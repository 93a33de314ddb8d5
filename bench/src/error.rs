//! The bench's one error type (this is a library: `thiserror`, with the few helpers the bench
//! uses to say what it was doing). Every failure is a message for the operator; nothing
//! branches on it.

use std::fmt::Display;

/// What went wrong, said for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(pub String);

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

macro_rules! from_display {
    ($($t:ty),*) => {$(
        impl From<$t> for BenchError {
            fn from(e: $t) -> Self {
                BenchError(e.to_string())
            }
        }
    )*};
}

from_display!(
    std::io::Error,
    serde_json::Error,
    http::Error,
    hyper::Error,
    hyper_util::client::legacy::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    tokio::task::JoinError
);

/// Adds what the bench was doing to an error (or to a missing value).
pub(crate) trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
    fn with_context<M: Display>(self, what: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|e| BenchError(format!("{what}: {e}")))
    }

    fn with_context<M: Display>(self, what: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|e| BenchError(format!("{}: {e}", what())))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Display) -> Result<T> {
        self.ok_or_else(|| BenchError(what.to_string()))
    }

    fn with_context<M: Display>(self, what: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| BenchError(what().to_string()))
    }
}

/// Returns early with a formatted [`BenchError`].
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::error::BenchError(format!($($t)*)))
    };
}

/// A formatted [`BenchError`].
macro_rules! err {
    ($($t:tt)*) => {
        $crate::error::BenchError(format!($($t)*))
    };
}

pub(crate) use {bail, err};
