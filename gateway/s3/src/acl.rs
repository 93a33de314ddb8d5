//! The S3 door's side of ACLs: `Owner` and `Grant` elements, the `AccessControlPolicy` body
//! and the `x-amz-grant-*` headers, over [`lode_objects::acl`].

use lode_objects::acl::{Acl, Grantee as Who, Named, Permission};
use lode_objects::policy::canonical_id;
use s3s::dto::{self, AccessControlPolicy, Grant, Grantee, Owner, Type};
use s3s::{S3Result, s3_error};

/// A user as S3 names an owner: canonical id and display name (the user's name).
pub fn owner(name: &str) -> Owner {
    Owner {
        display_name: Some(name.to_owned()),
        id: Some(canonical_id(name)),
    }
}

/// The `Grant` elements of an ACL.
pub fn grants(acl: &Acl) -> Vec<Grant> {
    acl.grants
        .iter()
        .map(|g| Grant {
            grantee: Some(match &g.grantee {
                Who::User(n) => Grantee {
                    display_name: Some(n.clone()),
                    email_address: None,
                    id: Some(canonical_id(n)),
                    type_: Type::from_static(Type::CANONICAL_USER),
                    uri: None,
                },
                group => Grantee {
                    display_name: None,
                    email_address: None,
                    id: None,
                    type_: Type::from_static(Type::GROUP),
                    uri: group.uri().map(str::to_owned),
                },
            }),
            permission: Some(dto::Permission::from(g.permission.as_str().to_owned())),
        })
        .collect()
}

/// The `x-amz-grant-*` headers that are set, with the permission each gives.
pub fn header_grants<'a>(
    full_control: Option<&'a String>,
    read: Option<&'a String>,
    read_acp: Option<&'a String>,
    write: Option<&'a String>,
    write_acp: Option<&'a String>,
) -> Vec<(Permission, &'a str)> {
    [
        (Permission::FullControl, full_control),
        (Permission::Read, read),
        (Permission::ReadAcp, read_acp),
        (Permission::Write, write),
        (Permission::WriteAcp, write_acp),
    ]
    .into_iter()
    .filter_map(|(p, v)| v.map(|v| (p, v.as_str())))
    .collect()
}

/// The grants of an `AccessControlPolicy` body, as named (resolved by
/// [`Acl::from_grants`]). Its `Owner`, when given, must be the resource's owner (S3 refuses a
/// body that would change the owner).
pub fn body_grants(acp: &AccessControlPolicy, owner: &str) -> S3Result<Vec<(Named, String)>> {
    if let Some(id) = acp.owner.as_ref().and_then(|o| o.id.as_deref())
        && !id.eq_ignore_ascii_case(&canonical_id(owner))
    {
        return Err(s3_error!(
            AccessDenied,
            "Access Denied: the ACL names another owner"
        ));
    }
    let mut out = vec![];
    for g in acp.grants.iter().flatten() {
        let (Some(grantee), Some(permission)) = (&g.grantee, &g.permission) else {
            return Err(s3_error!(
                MalformedACLError,
                "The XML you provided was not well-formed or did not validate against our published schema: a Grant needs a Grantee and a Permission"
            ));
        };
        let named = match grantee.type_.as_str() {
            Type::CANONICAL_USER => Named::Id(grantee.id.clone().unwrap_or_default()),
            Type::AMAZON_CUSTOMER_BY_EMAIL => {
                Named::Email(grantee.email_address.clone().unwrap_or_default())
            }
            Type::GROUP => Named::Uri(grantee.uri.clone().unwrap_or_default()),
            other => {
                return Err(s3_error!(
                    MalformedACLError,
                    "The XML you provided was not well-formed or did not validate against our published schema: {other} is not a grantee type"
                ));
            }
        };
        out.push((named, permission.as_str().to_owned()));
    }
    Ok(out)
}
