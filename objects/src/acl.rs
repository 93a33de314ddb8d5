//! S3 access control lists and object ownership: the grants of a bucket or of an object
//! version, canned ACLs, the `x-amz-grant-*` headers, and what a grant allows.
//!
//! Grantees are resolved when an ACL is set (a canonical id or an email names a Lode user, who
//! is stored by name), so a stored ACL never needs the user registry to be read back. The
//! stored form is a list of (grantee, permission) pairs: `user:<name>` or `group:<Group>`, and
//! S3's permission names. A bucket's ACL is the bucket setting [`SETTING`] (JSON of those
//! pairs); an object version's is [`crate::ObjectMeta::acl`].

use serde::{Deserialize, Serialize};

use crate::error::ObjError;

/// The bucket setting that holds the bucket's ACL (absent: `private`).
pub const SETTING: &str = "acl";
/// The bucket setting that holds its object ownership (absent: [`Ownership::ObjectWriter`]).
pub const OWNERSHIP_SETTING: &str = "ownership";
/// AWS's limit on the grants of one ACL.
pub const MAX_GRANTS: usize = 100;

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
const LOG_DELIVERY: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";

/// S3's ACL permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "READ" => Permission::Read,
            "WRITE" => Permission::Write,
            "READ_ACP" => Permission::ReadAcp,
            "WRITE_ACP" => Permission::WriteAcp,
            "FULL_CONTROL" => Permission::FullControl,
            _ => return None,
        })
    }

    /// Whether holding `self` gives `want` (`FULL_CONTROL` gives every permission).
    pub fn gives(self, want: Permission) -> bool {
        self == want || self == Permission::FullControl
    }
}

/// Who a grant is to: a user (by name), or one of S3's groups.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grantee {
    User(String),
    /// Everyone, signed or not.
    AllUsers,
    /// Every signed request of a known user.
    AuthenticatedUsers,
    /// S3's log delivery group (server access logs; Lode writes none).
    LogDelivery,
}

impl Grantee {
    /// The group named by an S3 group URI.
    pub fn group(uri: &str) -> Option<Self> {
        Some(match uri {
            ALL_USERS => Grantee::AllUsers,
            AUTHENTICATED_USERS => Grantee::AuthenticatedUsers,
            LOG_DELIVERY => Grantee::LogDelivery,
            _ => return None,
        })
    }

    /// The group's S3 URI (`None` for a user).
    pub fn uri(&self) -> Option<&'static str> {
        match self {
            Grantee::User(_) => None,
            Grantee::AllUsers => Some(ALL_USERS),
            Grantee::AuthenticatedUsers => Some(AUTHENTICATED_USERS),
            Grantee::LogDelivery => Some(LOG_DELIVERY),
        }
    }

    /// Whether a grant to it makes the resource public (AWS: to `AllUsers` or
    /// `AuthenticatedUsers`).
    pub fn is_public(&self) -> bool {
        matches!(self, Grantee::AllUsers | Grantee::AuthenticatedUsers)
    }

    fn encode(&self) -> String {
        match self {
            Grantee::User(n) => format!("user:{n}"),
            Grantee::AllUsers => "group:AllUsers".into(),
            Grantee::AuthenticatedUsers => "group:AuthenticatedUsers".into(),
            Grantee::LogDelivery => "group:LogDelivery".into(),
        }
    }

    fn decode(s: &str) -> Option<Self> {
        if let Some(n) = s.strip_prefix("user:") {
            return Some(Grantee::User(n.to_owned()));
        }
        Some(match s {
            "group:AllUsers" => Grantee::AllUsers,
            "group:AuthenticatedUsers" => Grantee::AuthenticatedUsers,
            "group:LogDelivery" => Grantee::LogDelivery,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

/// Who is asking: a user by name, or the anonymous caller.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    Anonymous,
    User(&'a str),
}

/// A grantee as a request names it, before it is resolved to a user or a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Id(String),
    Email(String),
    Uri(String),
}

/// Finds the users that canonical ids and email addresses name.
pub trait Directory {
    /// The user whose canonical id this is.
    fn by_id(&self, id: &str) -> Option<String>;
    /// The user with this email address.
    fn by_email(&self, email: &str) -> Option<String>;
}

/// A bucket's or an object version's access control list (its owner is kept apart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    pub grants: Vec<Grant>,
}

fn malformed(msg: impl Into<String>) -> ObjError {
    ObjError::MalformedAcl(msg.into())
}

impl Acl {
    /// The default ACL (`private`): the owner has full control.
    pub fn private(owner: &str) -> Self {
        Acl {
            grants: vec![Grant {
                grantee: Grantee::User(owner.to_owned()),
                permission: Permission::FullControl,
            }],
        }
    }

    /// A canned ACL (`x-amz-acl`) for a resource owned by `owner` in a bucket owned by
    /// `bucket_owner` (`bucket-owner-*` name it; on a bucket they are `private`, as on S3).
    pub fn canned(name: &str, owner: &str, bucket_owner: &str) -> Result<Self, ObjError> {
        let mut acl = Acl::private(owner);
        let mut add = |grantee: Grantee, permission: Permission| {
            let g = Grant {
                grantee,
                permission,
            };
            if !acl.grants.contains(&g) {
                acl.grants.push(g);
            }
        };
        match name {
            "private" => {}
            "public-read" => add(Grantee::AllUsers, Permission::Read),
            "public-read-write" => {
                add(Grantee::AllUsers, Permission::Read);
                add(Grantee::AllUsers, Permission::Write);
            }
            "authenticated-read" => add(Grantee::AuthenticatedUsers, Permission::Read),
            "bucket-owner-read" if owner != bucket_owner => {
                add(Grantee::User(bucket_owner.to_owned()), Permission::Read)
            }
            "bucket-owner-full-control" if owner != bucket_owner => add(
                Grantee::User(bucket_owner.to_owned()),
                Permission::FullControl,
            ),
            "bucket-owner-read" | "bucket-owner-full-control" => {}
            "log-delivery-write" => {
                add(Grantee::LogDelivery, Permission::Write);
                add(Grantee::LogDelivery, Permission::ReadAcp);
            }
            "aws-exec-read" => {
                return Err(ObjError::NotImplemented(
                    "the aws-exec-read canned ACL (Lode has no EC2 to grant it to)".into(),
                ));
            }
            other => {
                return Err(ObjError::InvalidArgument(format!(
                    "{other} is not a canned ACL"
                )));
            }
        }
        Ok(acl)
    }

    /// The ACL of the `x-amz-grant-*` headers, each given as (permission, header value): a
    /// comma-separated list of `id="..."`, `emailAddress="..."` or `uri="..."`. The owner gets
    /// no grant it is not given (as on S3).
    pub fn from_headers(
        headers: &[(Permission, &str)],
        dir: &dyn Directory,
    ) -> Result<Self, ObjError> {
        let mut acl = Acl::default();
        for (permission, value) in headers {
            for item in split_grantees(value)? {
                let grantee = resolve(&item, dir)?;
                let g = Grant {
                    grantee,
                    permission: *permission,
                };
                if !acl.grants.contains(&g) {
                    acl.grants.push(g);
                }
            }
        }
        acl.check_size()?;
        Ok(acl)
    }

    /// The ACL of an `AccessControlPolicy` body's grants, each (grantee, permission name).
    pub fn from_grants(grants: &[(Named, String)], dir: &dyn Directory) -> Result<Self, ObjError> {
        let mut acl = Acl::default();
        for (named, permission) in grants {
            let permission = Permission::parse(permission)
                .ok_or_else(|| malformed(format!("{permission} is not an ACL permission")))?;
            let g = Grant {
                grantee: resolve(named, dir)?,
                permission,
            };
            if !acl.grants.contains(&g) {
                acl.grants.push(g);
            }
        }
        acl.check_size()?;
        Ok(acl)
    }

    fn check_size(&self) -> Result<(), ObjError> {
        if self.grants.len() > MAX_GRANTS {
            return Err(malformed(format!(
                "an ACL holds at most {MAX_GRANTS} grants; this one has {}",
                self.grants.len()
            )));
        }
        Ok(())
    }

    /// Whether it grants anything to `AllUsers` or `AuthenticatedUsers`.
    pub fn is_public(&self) -> bool {
        self.grants.iter().any(|g| g.grantee.is_public())
    }

    /// Whether it grants only full control to `owner` (what a bucket whose ACLs are disabled
    /// accepts: S3's `bucket-owner-full-control` or its equivalent).
    pub fn is_owner_only(&self, owner: &str) -> bool {
        self.grants.iter().all(|g| {
            g.grantee == Grantee::User(owner.to_owned()) && g.permission == Permission::FullControl
        })
    }

    /// Whether it gives `caller` the permission `want` (public grants skipped when
    /// `ignore_public`: Block Public Access's IgnorePublicAcls).
    pub fn allows(&self, caller: Caller<'_>, want: Permission, ignore_public: bool) -> bool {
        self.grants.iter().any(|g| {
            g.permission.gives(want)
                && match (&g.grantee, caller) {
                    (Grantee::AllUsers, _) => !ignore_public,
                    (Grantee::AuthenticatedUsers, Caller::User(_)) => !ignore_public,
                    (Grantee::User(n), Caller::User(u)) => n == u,
                    _ => false,
                }
        })
    }

    /// The stored form: (grantee, permission) pairs.
    pub fn encode(&self) -> Vec<(String, String)> {
        self.grants
            .iter()
            .map(|g| (g.grantee.encode(), g.permission.as_str().to_owned()))
            .collect()
    }

    /// Reads the stored form back (pairs it does not know are skipped: they grant nothing).
    pub fn decode(pairs: &[(String, String)]) -> Self {
        Acl {
            grants: pairs
                .iter()
                .filter_map(|(g, p)| {
                    Some(Grant {
                        grantee: Grantee::decode(g)?,
                        permission: Permission::parse(p)?,
                    })
                })
                .collect(),
        }
    }

    /// The bucket setting's text.
    pub fn encode_setting(&self) -> String {
        serde_json::to_string(&self.encode()).expect("pairs serialize")
    }

    /// Reads the bucket setting's text (`None` when it does not decode).
    pub fn decode_setting(text: &str) -> Option<Self> {
        serde_json::from_str::<Vec<(String, String)>>(text)
            .ok()
            .map(|p| Acl::decode(&p))
    }
}

/// The grantees of one `x-amz-grant-*` header: `type="value"` items separated by commas.
fn split_grantees(value: &str) -> Result<Vec<Named>, ObjError> {
    let mut out = vec![];
    let mut rest = value.trim();
    while !rest.is_empty() {
        let (kind, after) = rest.split_once('=').ok_or_else(|| {
            ObjError::InvalidArgument(format!("a grant header names no grantee type: {value:?}"))
        })?;
        let after = after.trim_start();
        let (v, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').ok_or_else(|| {
                ObjError::InvalidArgument(format!("an unterminated quote in a grant: {value:?}"))
            })?;
            (&q[..end], q[end + 1..].trim_start())
        } else {
            match after.find(',') {
                Some(i) => (after[..i].trim_end(), &after[i..]),
                None => (after.trim_end(), ""),
            }
        };
        out.push(match kind.trim().to_ascii_lowercase().as_str() {
            "id" => Named::Id(v.to_owned()),
            "emailaddress" => Named::Email(v.to_owned()),
            "uri" => Named::Uri(v.to_owned()),
            other => {
                return Err(ObjError::InvalidArgument(format!(
                    "{other} is not a grantee type (id, emailAddress, uri)"
                )));
            }
        });
        rest = match tail.strip_prefix(',') {
            Some(t) => t.trim_start(),
            None if tail.is_empty() => "",
            None => {
                return Err(ObjError::InvalidArgument(format!(
                    "grants are separated by commas: {value:?}"
                )));
            }
        };
    }
    Ok(out)
}

fn resolve(named: &Named, dir: &dyn Directory) -> Result<Grantee, ObjError> {
    match named {
        Named::Id(id) => dir
            .by_id(id)
            .map(Grantee::User)
            .ok_or_else(|| ObjError::InvalidArgument("Invalid id".into())),
        Named::Email(e) => dir
            .by_email(e)
            .map(Grantee::User)
            .ok_or_else(|| ObjError::UnresolvableGrantByEmail(e.clone())),
        Named::Uri(u) => Grantee::group(u)
            .ok_or_else(|| ObjError::InvalidArgument(format!("{u} is not a grantee group URI"))),
    }
}

/// What an object write stores of its access: [`crate::ObjectMeta::owner`] and
/// [`crate::ObjectMeta::acl`].
pub type Stored = (Option<String>, Option<Vec<(String, String)>>);

/// Who owns the objects written to a bucket, and whether its ACLs are in force
/// (`PutBucketOwnershipControls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ownership {
    /// The writer owns what it writes; ACLs are in force (Lode's default, as RGW's and
    /// MinIO's).
    #[default]
    ObjectWriter,
    /// As `ObjectWriter`, but an upload with `bucket-owner-full-control` is the bucket
    /// owner's.
    BucketOwnerPreferred,
    /// The bucket's owner owns every object, and ACLs are disabled: only the owner's full
    /// control is accepted; the rest is `AccessControlListNotSupported`.
    BucketOwnerEnforced,
}

impl Ownership {
    pub fn as_str(self) -> &'static str {
        match self {
            Ownership::ObjectWriter => "ObjectWriter",
            Ownership::BucketOwnerPreferred => "BucketOwnerPreferred",
            Ownership::BucketOwnerEnforced => "BucketOwnerEnforced",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ObjectWriter" => Ownership::ObjectWriter,
            "BucketOwnerPreferred" => Ownership::BucketOwnerPreferred,
            "BucketOwnerEnforced" => Ownership::BucketOwnerEnforced,
            _ => return None,
        })
    }

    /// Whether ACLs are in force (not `BucketOwnerEnforced`).
    pub fn acls_enabled(self) -> bool {
        self != Ownership::BucketOwnerEnforced
    }
}

/// Whether a bucket whose ACLs are disabled (`BucketOwnerEnforced`) accepts an ACL asked as
/// `canned` (only `bucket-owner-full-control`, as S3 documents) resulting in `acl` for a
/// resource `owner` owns (only the owner's full control: "an equivalent form").
pub fn disabled_accepts(canned: Option<&str>, acl: Option<&Acl>, owner: &str) -> bool {
    matches!(canned, None | Some("bucket-owner-full-control"))
        && acl.is_none_or(|a| a.is_owner_only(owner))
}

/// The owner and ACL of an object written by `writer` into a bucket owned by `bucket_owner`
/// with `ownership`, as the write asked (`canned`: `x-amz-acl`; `headers`: `x-amz-grant-*`):
/// what to store in [`crate::ObjectMeta::owner`] (`None`: the bucket's owner) and
/// [`crate::ObjectMeta::acl`] (`None`: `private`). `block_public`: BlockPublicAcls is on.
pub fn object_write(
    writer: &str,
    bucket_owner: &str,
    ownership: Ownership,
    canned: Option<&str>,
    headers: &[(Permission, &str)],
    block_public: bool,
    dir: &dyn Directory,
) -> Result<Stored, ObjError> {
    if canned.is_some() && !headers.is_empty() {
        return Err(ObjError::InvalidRequest(
            "Specifying both Canned ACLs and Header Grants is not allowed".into(),
        ));
    }
    let owner = match ownership {
        Ownership::BucketOwnerEnforced => bucket_owner,
        Ownership::BucketOwnerPreferred if canned == Some("bucket-owner-full-control") => {
            bucket_owner
        }
        _ => writer,
    };
    let acl = match (canned, headers.is_empty()) {
        (None, true) => None,
        (Some(c), _) => Some(Acl::canned(c, owner, bucket_owner)?),
        (None, false) => Some(Acl::from_headers(headers, dir)?),
    };
    if !ownership.acls_enabled() {
        if !disabled_accepts(canned, acl.as_ref(), owner) {
            return Err(ObjError::AclNotSupported);
        }
        return Ok((None, None));
    }
    if block_public && acl.as_ref().is_some_and(Acl::is_public) {
        return Err(ObjError::PublicAclBlocked);
    }
    let stored_owner = (owner != bucket_owner).then(|| owner.to_owned());
    let stored_acl = acl
        .filter(|a| *a != Acl::private(owner))
        .map(|a| a.encode());
    Ok((stored_owner, stored_acl))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir;
    impl Directory for Dir {
        fn by_id(&self, id: &str) -> Option<String> {
            (id == "c0ffee").then(|| "carol".to_owned())
        }
        fn by_email(&self, e: &str) -> Option<String> {
            (e == "dan@example.com").then(|| "dan".to_owned())
        }
    }

    fn user(n: &str) -> Grantee {
        Grantee::User(n.into())
    }

    #[test]
    fn canned_acls_grant_what_s3_documents() {
        let g = |name: &str| {
            let mut v: Vec<(Grantee, Permission)> = Acl::canned(name, "al", "bo")
                .unwrap()
                .grants
                .into_iter()
                .map(|g| (g.grantee, g.permission))
                .collect();
            v.sort();
            v
        };
        use Permission::*;
        assert_eq!(g("private"), vec![(user("al"), FullControl)]);
        assert_eq!(
            g("public-read"),
            vec![(user("al"), FullControl), (Grantee::AllUsers, Read)]
        );
        assert_eq!(
            g("public-read-write"),
            vec![
                (user("al"), FullControl),
                (Grantee::AllUsers, Read),
                (Grantee::AllUsers, Write)
            ]
        );
        assert_eq!(
            g("authenticated-read"),
            vec![
                (user("al"), FullControl),
                (Grantee::AuthenticatedUsers, Read)
            ]
        );
        assert_eq!(
            g("bucket-owner-read"),
            vec![(user("al"), FullControl), (user("bo"), Read)]
        );
        assert_eq!(
            g("bucket-owner-full-control"),
            vec![(user("al"), FullControl), (user("bo"), FullControl)]
        );
        // The bucket's own owner: nothing more than private.
        assert_eq!(
            Acl::canned("bucket-owner-full-control", "bo", "bo").unwrap(),
            Acl::private("bo")
        );
        assert!(matches!(
            Acl::canned("nope", "a", "b"),
            Err(ObjError::InvalidArgument(_))
        ));
        assert!(matches!(
            Acl::canned("aws-exec-read", "a", "b"),
            Err(ObjError::NotImplemented(_))
        ));
    }

    #[test]
    fn grant_headers_parse_and_resolve() {
        let acl = Acl::from_headers(
            &[
                (
                    Permission::Read,
                    r#"uri="http://acs.amazonaws.com/groups/global/AllUsers", id="c0ffee""#,
                ),
                (Permission::WriteAcp, "emailAddress=dan@example.com"),
            ],
            &Dir,
        )
        .unwrap();
        assert_eq!(
            acl.grants,
            vec![
                Grant {
                    grantee: Grantee::AllUsers,
                    permission: Permission::Read
                },
                Grant {
                    grantee: user("carol"),
                    permission: Permission::Read
                },
                Grant {
                    grantee: user("dan"),
                    permission: Permission::WriteAcp
                },
            ]
        );
        assert!(acl.is_public());
        for (bad, want) in [
            (r#"id="nobody""#, "InvalidArgument"),
            (r#"emailAddress="x@y""#, "Unresolvable"),
            (r#"uri="http://example.com/g""#, "InvalidArgument"),
            (r#"name="x""#, "InvalidArgument"),
            (r#"id="c0ffee"#, "InvalidArgument"),
            ("id", "InvalidArgument"),
        ] {
            let e = Acl::from_headers(&[(Permission::Read, bad)], &Dir).unwrap_err();
            let got = match e {
                ObjError::InvalidArgument(_) => "InvalidArgument",
                ObjError::UnresolvableGrantByEmail(_) => "Unresolvable",
                other => panic!("{bad}: {other:?}"),
            };
            assert_eq!(got, want, "{bad}");
        }
    }

    #[test]
    fn allows_follows_grantees_and_ignore_public() {
        let acl = Acl::canned("public-read", "al", "al").unwrap();
        let anon = Caller::Anonymous;
        assert!(acl.allows(anon, Permission::Read, false));
        assert!(!acl.allows(anon, Permission::Read, true));
        assert!(!acl.allows(anon, Permission::Write, false));
        assert!(acl.allows(Caller::User("al"), Permission::WriteAcp, true));
        assert!(!acl.allows(Caller::User("bo"), Permission::ReadAcp, false));
        let auth = Acl::canned("authenticated-read", "al", "al").unwrap();
        assert!(!auth.allows(anon, Permission::Read, false));
        assert!(auth.allows(Caller::User("bo"), Permission::Read, false));
        assert!(!auth.allows(Caller::User("bo"), Permission::Read, true));
        // Stored form round-trips; an unknown pair grants nothing.
        let mut pairs = acl.encode();
        assert_eq!(Acl::decode(&pairs), acl);
        pairs.push(("martian:x".into(), "READ".into()));
        assert_eq!(Acl::decode(&pairs), acl);
        assert_eq!(Acl::decode_setting(&acl.encode_setting()), Some(acl));
    }

    #[test]
    fn object_writes_follow_ownership() {
        let w = |own, canned, headers: &[(Permission, &str)], block| {
            object_write("wr", "bo", own, canned, headers, block, &Dir)
        };
        use Ownership::*;
        // The writer owns it; private is the default (nothing stored).
        assert_eq!(
            w(ObjectWriter, None, &[], false).unwrap(),
            (Some("wr".into()), None)
        );
        assert_eq!(
            w(ObjectWriter, Some("private"), &[], false).unwrap(),
            (Some("wr".into()), None)
        );
        let (o, acl) = w(ObjectWriter, Some("bucket-owner-full-control"), &[], false).unwrap();
        assert_eq!(o.as_deref(), Some("wr"));
        assert_eq!(acl.map(|a| Acl::decode(&a).grants.len()), Some(2));
        // Preferred: bucket-owner-full-control hands it to the bucket's owner.
        assert_eq!(
            w(
                BucketOwnerPreferred,
                Some("bucket-owner-full-control"),
                &[],
                false
            )
            .unwrap(),
            (None, None)
        );
        assert_eq!(
            w(BucketOwnerPreferred, None, &[], false)
                .unwrap()
                .0
                .as_deref(),
            Some("wr")
        );
        // Enforced: the bucket's owner owns it; only its full control is accepted.
        assert_eq!(
            w(
                BucketOwnerEnforced,
                Some("bucket-owner-full-control"),
                &[],
                false
            )
            .unwrap(),
            (None, None)
        );
        assert_eq!(
            w(BucketOwnerEnforced, None, &[], false).unwrap(),
            (None, None)
        );
        assert!(matches!(
            w(BucketOwnerEnforced, Some("private"), &[], false),
            Err(ObjError::AclNotSupported)
        ));
        assert_eq!(
            w(
                BucketOwnerEnforced,
                None,
                &[(Permission::FullControl, r#"id="c0ffee""#)],
                false
            )
            .map_err(|e| e.to_string()),
            Err("The bucket does not allow ACLs".to_owned())
        );
        assert!(matches!(
            w(BucketOwnerEnforced, Some("public-read"), &[], false),
            Err(ObjError::AclNotSupported)
        ));
        assert!(matches!(
            w(
                BucketOwnerEnforced,
                None,
                &[(Permission::Read, r#"id="c0ffee""#)],
                false
            ),
            Err(ObjError::AclNotSupported)
        ));
        // BlockPublicAcls refuses a public ACL; both a canned ACL and grants is refused.
        assert!(matches!(
            w(ObjectWriter, Some("public-read"), &[], true),
            Err(ObjError::PublicAclBlocked)
        ));
        assert!(matches!(
            w(
                ObjectWriter,
                Some("private"),
                &[(Permission::Read, r#"id="c0ffee""#)],
                false
            ),
            Err(ObjError::InvalidRequest(_))
        ));
    }
}
