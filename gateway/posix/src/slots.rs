//! A fixed number of places, shared by the whole mount: files streaming into chunks
//! ([`crate::open`]), directory listers ([`crate::ahead`]).

use std::sync::atomic::{AtomicUsize, Ordering};

/// At most `max` places taken at once.
pub(crate) struct Slots {
    taken: AtomicUsize,
    max: usize,
}

impl Slots {
    pub(crate) const fn new(max: usize) -> Self {
        Self {
            taken: AtomicUsize::new(0),
            max,
        }
    }

    /// A place, or `None` when all `max` are taken.
    pub(crate) fn take(&'static self) -> Option<Slot> {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self))
    }
}

/// One place of a [`Slots`], given back when dropped.
pub(crate) struct Slot(&'static Slots);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_are_taken_and_a_dropped_one_frees_its_place() {
        static S: Slots = Slots::new(3);
        let taken: Vec<Slot> = std::iter::from_fn(|| S.take()).take(4).collect();
        assert_eq!(taken.len(), 3);
        assert!(S.take().is_none());
        drop(taken);
        assert!(S.take().is_some());
    }
}
