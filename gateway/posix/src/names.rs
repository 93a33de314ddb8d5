//! The S3 <-> POSIX name and attribute rules (see SEMANTICS.md, "The POSIX view").
//!
//! * A path `<bucket>/<a>/<b>` is the key `a/b`; a directory `a/b` is the key prefix `a/b/`.
//! * A key segment that cannot be a file name (empty, `.`, `..`, over 255 bytes) hides the key
//!   from the mount; the object stays reachable through S3.
//! * Where `a` and `a/...` both exist, the directory wins on the mount.
//! * POSIX attributes live in user metadata, with s3fs's names: `x-amz-meta-mode`
//!   (st_mode, decimal), `x-amz-meta-uid`, `x-amz-meta-gid`, `x-amz-meta-mtime` (seconds since
//!   the epoch, with an optional fraction).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lode_objects::ObjectMeta;

use lode_objects::MAX_KEY_LEN;

/// Longest file name a directory entry may have (NAME_MAX).
pub const NAME_MAX: usize = 255;

/// Content type of the `dir/` markers mkdir creates (as s3fs and the AWS console do).
pub const DIR_CONTENT_TYPE: &str = "application/x-directory";

/// Whether a key segment can appear as a name on the mount.
pub fn visible(seg: &str) -> bool {
    !seg.is_empty() && seg != "." && seg != ".." && seg.len() <= NAME_MAX && !seg.contains('\0')
}

/// The key of `name` inside the directory whose key prefix is `dir_prefix` ("" at a bucket's
/// root, else ending in '/'). Errors are errnos.
pub fn child_key(dir_prefix: &str, name: &[u8]) -> Result<String, i32> {
    let name = std::str::from_utf8(name).map_err(|_| libc::EINVAL)?;
    if name.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if !visible(name) || name.contains('/') {
        return Err(libc::EINVAL);
    }
    let key = format!("{dir_prefix}{name}");
    if key.len() > MAX_KEY_LEN {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(key)
}

/// What a listing entry under `dir_prefix` shows on the mount: its name, or `None` if hidden.
/// `entry` is an object key or a common prefix (ending in '/').
pub fn entry_name<'a>(dir_prefix: &str, entry: &'a str) -> Option<&'a str> {
    let rest = entry.strip_prefix(dir_prefix)?;
    let name = rest.strip_suffix('/').unwrap_or(rest);
    visible(name).then_some(name)
}

/// POSIX attributes kept with an object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits (and setuid/setgid/sticky), without the file type.
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mtime: Option<SystemTime>,
}

#[cfg(test)]
fn user<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    meta.user
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn set_user(meta: &mut ObjectMeta, name: &str, value: Option<String>) {
    meta.user.retain(|(k, _)| k != name);
    if let Some(v) = value {
        meta.user.push((name.to_owned(), v));
    }
    meta.user.sort();
}

fn parse_time(s: &str) -> Option<SystemTime> {
    let (secs, frac) = match s.split_once('.') {
        Some((a, b)) => (a, b),
        None => (s, ""),
    };
    let secs: u64 = secs.parse().ok()?;
    // At most 9 fraction digits count (nanoseconds); no allocation: this runs for every entry
    // of a directory listing.
    let nanos = if frac.is_empty() {
        0
    } else {
        let digits = &frac.as_bytes()[..frac.len().min(9)];
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
        n * 10u32.pow(9 - digits.len() as u32)
    };
    // Checked: a stored mtime is user input (x-amz-meta-mtime), and a huge one must not panic
    // (found by the `records` fuzz target).
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

fn format_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
    }
}

impl Attrs {
    /// Reads the attributes from user metadata; anything malformed counts as absent.
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self::from_user(meta.user.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The attributes in user metadata given as `(name, value)` pairs (the first pair of a
    /// name counts), in one pass and without copying: what a directory listing decodes.
    pub fn from_user<'a>(user: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let (mut a, mut seen) = (Attrs::default(), [false; 4]);
        for (k, v) in user {
            let i = match k {
                "mode" => 0,
                "uid" => 1,
                "gid" => 2,
                "mtime" => 3,
                _ => continue,
            };
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            match i {
                0 => a.perm = v.parse::<u32>().ok().map(|m| (m & 0o7777) as u16),
                1 => a.uid = v.parse().ok(),
                2 => a.gid = v.parse().ok(),
                _ => a.mtime = parse_time(v),
            }
        }
        a
    }

    #[cfg(test)]
    fn from_meta_by_lookup(meta: &ObjectMeta) -> Self {
        Attrs {
            perm: user(meta, "mode")
                .and_then(|v| v.parse::<u32>().ok())
                .map(|m| (m & 0o7777) as u16),
            uid: user(meta, "uid").and_then(|v| v.parse().ok()),
            gid: user(meta, "gid").and_then(|v| v.parse().ok()),
            mtime: user(meta, "mtime").and_then(parse_time),
        }
    }

    /// Writes the attributes that are set into user metadata. `file_type` is `libc::S_IFREG`
    /// or `libc::S_IFDIR` (stored in `mode` as s3fs does).
    pub fn store(&self, meta: &mut ObjectMeta, file_type: u32) {
        if let Some(p) = self.perm {
            set_user(meta, "mode", Some((file_type | u32::from(p)).to_string()));
        }
        if let Some(u) = self.uid {
            set_user(meta, "uid", Some(u.to_string()));
        }
        if let Some(g) = self.gid {
            set_user(meta, "gid", Some(g.to_string()));
        }
        if let Some(t) = self.mtime {
            set_user(meta, "mtime", Some(format_time(t)));
        }
    }

    /// `other`'s set fields over `self`'s.
    pub fn merge(&mut self, other: Attrs) {
        self.perm = other.perm.or(self.perm);
        self.uid = other.uid.or(self.uid);
        self.gid = other.gid.or(self.gid);
        self.mtime = other.mtime.or(self.mtime);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_names() {
        for ok in ["a", "a b", "ü", &"x".repeat(255)] {
            assert!(visible(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a\0b", &"x".repeat(256)] {
            assert!(!visible(bad), "{bad:?}");
        }
    }

    #[test]
    fn entry_names_hide_what_cannot_be_a_name() {
        assert_eq!(entry_name("d/", "d/f"), Some("f"));
        assert_eq!(entry_name("d/", "d/sub/"), Some("sub"));
        assert_eq!(entry_name("", "top"), Some("top"));
        // The directory's own marker, empty segments, dot segments.
        assert_eq!(entry_name("d/", "d/"), None);
        assert_eq!(entry_name("d/", "d//"), None);
        assert_eq!(entry_name("d/", "d/../"), None);
        assert_eq!(entry_name("d/", "d/."), None);
        assert_eq!(entry_name("", &"y".repeat(256)), None);
    }

    #[test]
    fn child_keys_and_their_errors() {
        assert_eq!(child_key("", b"a").unwrap(), "a");
        assert_eq!(child_key("a/b/", b"c").unwrap(), "a/b/c");
        assert_eq!(child_key("", &[0xff]), Err(libc::EINVAL));
        assert_eq!(child_key("", &[b'x'; 256]), Err(libc::ENAMETOOLONG));
        let deep = format!("{}/", "d".repeat(1000));
        assert_eq!(child_key(&deep, &[b'x'; 24]), Err(libc::ENAMETOOLONG));
        assert_eq!(child_key(&deep, &[b'x'; 23]).unwrap().len(), 1024);
    }

    #[test]
    fn attrs_round_trip_in_s3fs_form() {
        let a = Attrs {
            perm: Some(0o4750),
            uid: Some(1000),
            gid: Some(100),
            mtime: Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5)),
        };
        let mut m = ObjectMeta::default();
        a.store(&mut m, libc::S_IFREG);
        assert_eq!(user(&m, "mode"), Some("35304")); // 0o104750
        assert_eq!(user(&m, "mtime"), Some("1700000000.000000005"));
        assert_eq!(Attrs::from_meta(&m), a);
        // s3fs writes whole seconds; garbage is ignored.
        let m = ObjectMeta {
            user: vec![
                ("mtime".into(), "1600000000".into()),
                ("uid".into(), "nope".into()),
            ],
            ..Default::default()
        };
        let got = Attrs::from_meta(&m);
        assert_eq!(
            got.mtime,
            Some(UNIX_EPOCH + Duration::from_secs(1_600_000_000))
        );
        assert_eq!(got.uid, None);
        // Fractions: at most nanoseconds count; anything but digits is garbage.
        let t = |s: &str| parse_time(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap());
        assert_eq!(t("12.5"), Some(Duration::new(12, 500_000_000)));
        assert_eq!(t("12.1234567891"), Some(Duration::new(12, 123_456_789)));
        assert_eq!(t("12."), Some(Duration::new(12, 0)));
        assert_eq!(t("12.5x"), None);
        assert_eq!(t("12.+5"), None);
        assert_eq!(t("x.5"), None);
        // An mtime beyond what SystemTime holds is ignored, not a panic.
        let m = ObjectMeta {
            user: vec![("mtime".into(), "00014608122831670589796".into())],
            ..Default::default()
        };
        assert_eq!(Attrs::from_meta(&m).mtime, None);
    }

    /// The one-pass decoding a listing uses reads what a lookup by name reads, first pair of
    /// a name winning, garbage ignored.
    #[test]
    fn attrs_from_pairs_match_lookup_by_name() {
        let metas = [
            vec![
                ("content-x", "1"),
                ("gid", "7"),
                ("mode", "33188"),
                ("uid", "5"),
            ],
            vec![
                ("mode", "bad"),
                ("mode", "33188"),
                ("mtime", "1600000000.5"),
            ],
            vec![("uid", "1"), ("uid", "2"), ("gid", "-1")],
            vec![],
        ];
        for pairs in metas {
            let m = ObjectMeta {
                user: pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            let want = Attrs::from_meta_by_lookup(&m);
            assert_eq!(Attrs::from_user(pairs.iter().copied()), want, "{pairs:?}");
            assert_eq!(Attrs::from_meta(&m), want, "{pairs:?}");
        }
        let one = Attrs::from_user([("mode", "33188"), ("uid", "5")]);
        assert_eq!((one.perm, one.uid, one.gid), (Some(0o644), Some(5), None));
    }
}
