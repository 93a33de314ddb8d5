//! S3's listing rules, written once for every catalog backend: what a page of ListObjects,
//! ListObjectVersions or ListMultipartUploads holds, given its prefix, delimiter, marker and
//! size.
//!
//! A backend reads its entries in key order from just after its marker and offers each entry's
//! key to a [`PageFold`], which answers what to do with it: list it ([`Step::Take`]), pass over
//! it ([`Step::Skip`]), seek past the common prefix it starts ([`Step::Prefix`], the prefix
//! listed unless the key marker is at or past it), or stop because the page is full
//! ([`Step::Full`]: the page is truncated). The backend does the IO (a RocksDB cursor, RADOS
//! omap reads in batches) and builds its own entries; the fold holds the common prefixes.
//!
//! What the backends still compare themselves is where their marker is: a key (ListObjects),
//! a key and an upload id, or a key and a version's rank; they start reading after it.

/// What to list (ListObjects, ListObjectsV2, and the directory listings of the mount).
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Exclusive lower bound: a key or common prefix to start after (start-after, marker, or
    /// the last entry of the previous page).
    pub after: Option<&'a str>,
    pub max: usize,
}

/// One page of objects.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub objects: Vec<(String, crate::ObjectRecord)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned (the next page starts after it).
    pub last: Option<String>,
}

/// What to do with the entry a backend offers next ([`PageFold::offer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// List it: the fold counted it.
    Take,
    /// Pass over it: it lies under the common prefix being skipped.
    Skip,
    /// It starts a common prefix ([`PageFold::skipping`]): seek past every key under it.
    /// `listed`: the prefix is on the page now (false: the key marker was at or past it).
    Prefix { listed: bool },
    /// The page is full and truncated: stop reading.
    Full,
}

/// The fold of one listing page (see the module doc).
#[derive(Debug)]
pub struct PageFold<'q> {
    prefix: &'q str,
    delimiter: Option<&'q str>,
    /// A common prefix at or before the key marker was listed on an earlier page.
    key_marker: Option<&'q str>,
    max: usize,
    taken: usize,
    prefixes: Vec<String>,
    skipping: Option<String>,
    truncated: bool,
}

impl<'q> PageFold<'q> {
    /// A page of at most `max` entries and common prefixes, of keys under `prefix`, rolled up
    /// at the first `delimiter` after the prefix (an empty delimiter is none), starting after
    /// `key_marker`.
    pub fn new(
        prefix: &'q str,
        delimiter: Option<&'q str>,
        key_marker: Option<&'q str>,
        max: usize,
    ) -> Self {
        PageFold {
            prefix,
            delimiter: delimiter.filter(|d| !d.is_empty()),
            key_marker,
            max,
            taken: 0,
            prefixes: vec![],
            skipping: None,
            truncated: false,
        }
    }

    /// [`PageFold::new`] for a [`ListQuery`].
    pub fn of(q: &ListQuery<'q>) -> Self {
        Self::new(q.prefix, q.delimiter, q.after, q.max)
    }

    /// What to do with the next entry, whose key is `key` (under the prefix, after the
    /// marker, in key order).
    pub fn offer(&mut self, key: &str) -> Step {
        if let Some(cp) = &self.skipping {
            if key.starts_with(cp.as_str()) {
                return Step::Skip;
            }
            self.skipping = None;
        }
        let rest = key.get(self.prefix.len()..).unwrap_or_default();
        if let Some(i) = self.delimiter.and_then(|d| rest.find(d)) {
            let end = self.prefix.len() + i + self.delimiter.map_or(0, str::len);
            let cp = &key[..end];
            // Every key under a prefix past the marker is past it too, so a key at or before
            // the marker never lists its prefix.
            let listed = self.key_marker.is_none_or(|m| cp > m);
            if listed {
                if self.taken >= self.max {
                    self.truncated = true;
                    return Step::Full;
                }
                self.taken += 1;
                self.prefixes.push(cp.to_owned());
            }
            self.skipping = Some(cp.to_owned());
            return Step::Prefix { listed };
        }
        if self.taken >= self.max {
            self.truncated = true;
            return Step::Full;
        }
        self.taken += 1;
        Step::Take
    }

    /// The common prefix whose keys are being passed over: a backend that seeks goes past
    /// every key that starts with it.
    pub fn skipping(&self) -> Option<&str> {
        self.skipping.as_deref()
    }

    /// Entries and common prefixes listed so far.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// How many more entries the page takes, and one more to tell whether it is truncated.
    pub fn wanted(&self) -> usize {
        (self.max.saturating_add(1)).saturating_sub(self.taken)
    }

    /// The common prefixes listed, in order, and whether the page is truncated.
    pub fn finish(self) -> (Vec<String>, bool) {
        (self.prefixes, self.truncated)
    }
}

/// The plain definition of an S3 listing, for tests and conformance suites: the keys of `keys`
/// (in any order) under `prefix`, each rolled up to its common prefix at the first `delimiter`
/// after the prefix, those after `after`, in order, each once.
#[cfg(any(test, feature = "conformance"))]
pub fn reference_listing<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
) -> Vec<String> {
    let mut sorted: Vec<&str> = keys.into_iter().collect();
    sorted.sort_unstable();
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let mut out: Vec<String> = vec![];
    for k in sorted {
        let Some(rest) = k.strip_prefix(prefix) else {
            continue;
        };
        let e = match delimiter.and_then(|d| rest.find(d).map(|i| (i, d))) {
            Some((i, d)) => format!("{prefix}{}", &rest[..i + d.len()]),
            None => k.to_owned(),
        };
        if after.is_some_and(|a| e.as_str() <= a) {
            continue;
        }
        if out.last() != Some(&e) {
            out.push(e);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A backend that seeks: reads from after `after`, seeks past each prefix.
    fn page(keys: &BTreeSet<&str>, q: &ListQuery<'_>) -> (Vec<String>, Vec<String>, bool) {
        let mut fold = PageFold::of(q);
        let mut objects = vec![];
        let mut it: Box<dyn Iterator<Item = &&str>> = Box::new(
            keys.iter()
                .filter(|k| k.starts_with(q.prefix) && q.after.is_none_or(|a| **k > a)),
        );
        while let Some(k) = it.next() {
            match fold.offer(k) {
                Step::Take => objects.push((*k).to_owned()),
                Step::Skip => {}
                Step::Prefix { .. } => {
                    let cp = fold.skipping().unwrap().to_owned();
                    it = Box::new(it.skip_while(move |k| k.starts_with(cp.as_str())));
                }
                Step::Full => break,
            }
        }
        let (prefixes, truncated) = fold.finish();
        (objects, prefixes, truncated)
    }

    #[test]
    fn pages_match_the_model_for_prefixes_delimiters_markers_and_sizes() {
        let keys: BTreeSet<&str> = [
            "a",
            "a/",
            "a/b",
            "a/b/c",
            "a/c",
            "a0",
            "a/b/d",
            "b",
            "c/",
            "c//d",
            "d",
            "photos/2024/1.jpg",
            "photos/2024/2.jpg",
            "photos/2025/1.jpg",
            "photos/x.jpg",
            "z",
        ]
        .into();
        for prefix in ["", "a", "a/", "photos/", "photos/2024/", "nope"] {
            for delim in [None, Some("/"), Some("/2"), Some("")] {
                for start in [None, Some("a0"), Some("a/"), Some("photos/2024/")] {
                    for max in [1, 2, 3, 1000] {
                        let want = reference_listing(keys.iter().copied(), prefix, delim, start);
                        let mut got = vec![];
                        let mut after = start.map(str::to_owned);
                        loop {
                            let q = ListQuery {
                                prefix,
                                delimiter: delim,
                                after: after.as_deref(),
                                max,
                            };
                            let (objects, prefixes, truncated) = page(&keys, &q);
                            let mut entries: Vec<String> =
                                objects.into_iter().chain(prefixes).collect();
                            entries.sort();
                            assert!(entries.len() <= max);
                            let last = entries.last().cloned();
                            got.extend(entries);
                            if !truncated {
                                break;
                            }
                            after = last;
                        }
                        assert_eq!(
                            got, want,
                            "prefix={prefix:?} delim={delim:?} start={start:?} max={max}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_full_page_is_truncated_only_when_another_entry_is_offered() {
        let mut f = PageFold::new("", None, None, 1);
        assert_eq!(f.wanted(), 2);
        assert_eq!(f.offer("a"), Step::Take);
        assert_eq!(f.wanted(), 1);
        assert_eq!(f.finish(), (vec![], false));
        let mut f = PageFold::new("", Some("/"), None, 1);
        assert_eq!(f.offer("a/1"), Step::Prefix { listed: true });
        assert_eq!(f.offer("a/2"), Step::Skip);
        assert_eq!(f.offer("b"), Step::Full);
        assert_eq!(f.finish(), (vec!["a/".to_owned()], true));
        // A prefix the marker is at or past is passed over, not listed, and not counted.
        let mut f = PageFold::new("", Some("/"), Some("a/"), 1);
        assert_eq!(f.offer("a/1"), Step::Prefix { listed: false });
        assert_eq!(f.offer("b"), Step::Take);
        assert_eq!(f.finish(), (vec![], false));
        // No room at all.
        let mut f = PageFold::new("", None, None, 0);
        assert_eq!(f.offer("a"), Step::Full);
        assert_eq!(f.finish(), (vec![], true));
    }
}
