//! Bucket policies: the AWS policy language as S3 uses it, parsed and checked once
//! ([`Policy::parse`], `400 MalformedPolicy` with the reason) and evaluated per request
//! ([`Policy::evaluate`]) against a [`Request`] the door builds. Written once, above the
//! backends: a policy is a bucket setting, stored by either catalog as its text.
//!
//! Own code, not a crate: `s3s-policy` 0.14 is a model without an evaluator, and `iam-rs` 0.8
//! names its condition operators as a closed list (no `ForAnyValue:NumericLessThan`, no
//! `DateEqualsIfExists`, ...) and clones the request on every evaluation. Here an operator is
//! its three parts (set qualifier, base operator, `IfExists`), so every combination AWS allows
//! parses and evaluates.
//!
//! Evaluation follows AWS: a statement applies when its principal, action, resource and every
//! condition match; an applying `Deny` wins over any `Allow`; no applying statement is
//! [`Decision::None`] (the caller's own rights decide).

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::Value;

/// The account every Lode user belongs to, in ARNs (`arn:aws:iam::<ACCOUNT>:user/<name>`).
pub const ACCOUNT: &str = "000000000000";
/// AWS's limit on a bucket policy's size.
pub const MAX_POLICY_BYTES: usize = 20 * 1024;
/// The bucket setting a policy is stored under (its JSON text, as sent).
pub const SETTING: &str = "policy";

/// Block Public Access: the four settings of S3's `PublicAccessBlockConfiguration`, per
/// bucket (a bucket setting) and for the whole account (`[access]` in lode.toml); what holds
/// for a bucket is the two combined ([`PublicAccessBlock::or`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublicAccessBlock {
    /// Public ACLs on new objects and buckets are refused (`403 AccessDenied`).
    pub block_public_acls: bool,
    /// Public ACL grants are ignored.
    pub ignore_public_acls: bool,
    /// A public policy is refused (`403 AccessDenied`).
    pub block_public_policy: bool,
    /// A bucket with a public policy serves only the account's users: the policy's grants to
    /// anonymous callers are ignored.
    pub restrict_public_buckets: bool,
}

/// The bucket setting a bucket's own Block Public Access is stored under.
pub const BLOCK_SETTING: &str = "public-access-block";

impl PublicAccessBlock {
    /// Each setting on where either side has it on.
    pub fn or(self, o: PublicAccessBlock) -> PublicAccessBlock {
        PublicAccessBlock {
            block_public_acls: self.block_public_acls || o.block_public_acls,
            ignore_public_acls: self.ignore_public_acls || o.ignore_public_acls,
            block_public_policy: self.block_public_policy || o.block_public_policy,
            restrict_public_buckets: self.restrict_public_buckets || o.restrict_public_buckets,
        }
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("public access block serializes")
    }

    pub fn decode(json: &str) -> Option<PublicAccessBlock> {
        serde_json::from_str(json).ok()
    }
}

/// Why a policy was refused (the message of `400 MalformedPolicy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, PolicyError> {
    Err(PolicyError(msg.into()))
}

/// The ARN of a Lode user, as a policy names it.
pub fn user_arn(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT}:user/{name}")
}

/// A user's canonical id: stable, 64 hex digits, derived from the name.
pub fn canonical_id(name: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(format!("lode-user:{name}").as_bytes()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// The outcome of evaluating a policy for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// An applying `Allow`, and no applying `Deny`.
    Allow,
    /// An applying `Deny`.
    Deny,
    /// No statement applies.
    None,
}

/// Who makes a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal<'a> {
    /// No signature at all.
    Anonymous,
    /// A Lode user (root included) by name.
    User(&'a str),
}

/// One request as a policy sees it: who, which action (`s3:GetObject`), on which resource
/// (`arn:aws:s3:::bucket/key`), and the condition keys' values (keys lower-case).
pub struct Request<'a> {
    pub principal: Principal<'a>,
    pub action: &'a str,
    pub resource: &'a str,
    pub context: &'a Context,
}

/// Condition keys and their values for one request. Keys are matched case-insensitively;
/// a key may have several values (`s3:RequestObjectTagKeys`).
#[derive(Debug, Default, Clone)]
pub struct Context(HashMap<String, Vec<String>>);

impl Context {
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        self.set_many(key, vec![value.into()]);
    }

    pub fn set_many(&mut self, key: &str, values: Vec<String>) {
        let key = match key.bytes().any(|b| b.is_ascii_uppercase()) {
            true => key.to_ascii_lowercase(),
            false => key.to_owned(),
        };
        self.0.insert(key, values);
    }

    pub fn get(&self, key: &str) -> Option<&[String]> {
        let v = match key.bytes().any(|b| b.is_ascii_uppercase()) {
            true => self.0.get(&key.to_ascii_lowercase()),
            false => self.0.get(key),
        };
        v.map(Vec::as_slice)
    }
}

/// A parsed, checked bucket policy.
#[derive(Debug, Clone)]
pub struct Policy {
    statements: Vec<Statement>,
    /// Whether `${...}` variables are expanded (Version 2012-10-17).
    variables: bool,
    /// The condition keys and variables the policy reads (lower-case): a request's context
    /// needs only these.
    keys: std::collections::HashSet<String>,
}

#[derive(Debug, Clone)]
struct Statement {
    effect: Effect,
    principal: Principals,
    actions: Patterns,
    resources: Patterns,
    conditions: Vec<Condition>,
}

/// `Principal` or `NotPrincipal`.
#[derive(Debug, Clone)]
struct Principals {
    negated: bool,
    /// `"*"` or `{"AWS": "*"}`: everyone, anonymous included.
    anyone: bool,
    /// The whole account (its root ARN or id): every user.
    account: bool,
    users: Vec<String>,
    canonical: Vec<String>,
}

/// `Action`/`NotAction` or `Resource`/`NotResource`.
#[derive(Debug, Clone)]
struct Patterns {
    negated: bool,
    list: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qualifier {
    Single,
    ForAnyValue,
    ForAllValues,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    StringEquals,
    StringNotEquals,
    StringEqualsIgnoreCase,
    StringNotEqualsIgnoreCase,
    StringLike,
    StringNotLike,
    NumericEquals,
    NumericNotEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    DateEquals,
    DateNotEquals,
    DateLessThan,
    DateLessThanEquals,
    DateGreaterThan,
    DateGreaterThanEquals,
    Bool,
    BinaryEquals,
    IpAddress,
    NotIpAddress,
    ArnEquals,
    ArnLike,
    ArnNotEquals,
    ArnNotLike,
    Null,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        use Op::*;
        Some(match s {
            "StringEquals" => StringEquals,
            "StringNotEquals" => StringNotEquals,
            "StringEqualsIgnoreCase" => StringEqualsIgnoreCase,
            "StringNotEqualsIgnoreCase" => StringNotEqualsIgnoreCase,
            "StringLike" => StringLike,
            "StringNotLike" => StringNotLike,
            "NumericEquals" => NumericEquals,
            "NumericNotEquals" => NumericNotEquals,
            "NumericLessThan" => NumericLessThan,
            "NumericLessThanEquals" => NumericLessThanEquals,
            "NumericGreaterThan" => NumericGreaterThan,
            "NumericGreaterThanEquals" => NumericGreaterThanEquals,
            "DateEquals" => DateEquals,
            "DateNotEquals" => DateNotEquals,
            "DateLessThan" => DateLessThan,
            "DateLessThanEquals" => DateLessThanEquals,
            "DateGreaterThan" => DateGreaterThan,
            "DateGreaterThanEquals" => DateGreaterThanEquals,
            "Bool" => Bool,
            "BinaryEquals" => BinaryEquals,
            "IpAddress" => IpAddress,
            "NotIpAddress" => NotIpAddress,
            "ArnEquals" => ArnEquals,
            "ArnLike" => ArnLike,
            "ArnNotEquals" => ArnNotEquals,
            "ArnNotLike" => ArnNotLike,
            "Null" => Null,
            _ => return None,
        })
    }

    /// The negated operators: true where their positive twin is false, and true for an
    /// absent key.
    fn negated(self) -> bool {
        use Op::*;
        matches!(
            self,
            StringNotEquals
                | StringNotEqualsIgnoreCase
                | StringNotLike
                | NumericNotEquals
                | DateNotEquals
                | NotIpAddress
                | ArnNotEquals
                | ArnNotLike
        )
    }
}

#[derive(Debug, Clone)]
struct Condition {
    qualifier: Qualifier,
    op: Op,
    if_exists: bool,
    /// Lower-case.
    key: String,
    values: Vec<String>,
}

/// S3's actions, as a policy may name them (after `s3:`).
const ACTIONS: &[&str] = &[
    "AbortMultipartUpload",
    "BypassGovernanceRetention",
    "CreateBucket",
    "DeleteBucket",
    "DeleteBucketOwnershipControls",
    "DeleteBucketPolicy",
    "DeleteBucketWebsite",
    "DeleteObject",
    "DeleteObjectTagging",
    "DeleteObjectVersion",
    "DeleteObjectVersionTagging",
    "GetAccelerateConfiguration",
    "GetAnalyticsConfiguration",
    "GetBucketAcl",
    "GetBucketCORS",
    "GetBucketLocation",
    "GetBucketLogging",
    "GetBucketNotification",
    "GetBucketObjectLockConfiguration",
    "GetBucketOwnershipControls",
    "GetBucketPolicy",
    "GetBucketPolicyStatus",
    "GetBucketPublicAccessBlock",
    "GetBucketRequestPayment",
    "GetBucketTagging",
    "GetBucketVersioning",
    "GetBucketWebsite",
    "GetEncryptionConfiguration",
    "GetInventoryConfiguration",
    "GetLifecycleConfiguration",
    "GetMetricsConfiguration",
    "GetObject",
    "GetObjectAcl",
    "GetObjectAttributes",
    "GetObjectLegalHold",
    "GetObjectRetention",
    "GetObjectTagging",
    "GetObjectTorrent",
    "GetObjectVersion",
    "GetObjectVersionAcl",
    "GetObjectVersionAttributes",
    "GetObjectVersionTagging",
    "GetObjectVersionTorrent",
    "GetReplicationConfiguration",
    "ListAllMyBuckets",
    "ListBucket",
    "ListBucketMultipartUploads",
    "ListBucketVersions",
    "ListMultipartUploadParts",
    "ObjectOwnerOverrideToBucketOwner",
    "PutAccelerateConfiguration",
    "PutAnalyticsConfiguration",
    "PutBucketAcl",
    "PutBucketCORS",
    "PutBucketLogging",
    "PutBucketNotification",
    "PutBucketObjectLockConfiguration",
    "PutBucketOwnershipControls",
    "PutBucketPolicy",
    "PutBucketPublicAccessBlock",
    "PutBucketRequestPayment",
    "PutBucketTagging",
    "PutBucketVersioning",
    "PutBucketWebsite",
    "PutEncryptionConfiguration",
    "PutInventoryConfiguration",
    "PutLifecycleConfiguration",
    "PutMetricsConfiguration",
    "PutObject",
    "PutObjectAcl",
    "PutObjectLegalHold",
    "PutObjectRetention",
    "PutObjectTagging",
    "PutObjectVersionAcl",
    "PutObjectVersionTagging",
    "PutReplicationConfiguration",
    "ReplicateDelete",
    "ReplicateObject",
    "ReplicateTags",
    "RestoreObject",
];

/// S3's own condition keys (lower-case; `aws:` keys are all accepted).
const S3_KEYS: &[&str] = &[
    "s3:authtype",
    "s3:delimiter",
    "s3:max-keys",
    "s3:prefix",
    "s3:requestobjecttagkeys",
    "s3:signatureversion",
    "s3:signatureage",
    "s3:tlsversion",
    "s3:versionid",
    "s3:x-amz-acl",
    "s3:x-amz-content-sha256",
    "s3:x-amz-copy-source",
    "s3:x-amz-grant-full-control",
    "s3:x-amz-grant-read",
    "s3:x-amz-grant-read-acp",
    "s3:x-amz-grant-write",
    "s3:x-amz-grant-write-acp",
    "s3:x-amz-metadata-directive",
    "s3:x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "s3:x-amz-server-side-encryption-customer-algorithm",
    "s3:x-amz-storage-class",
    "s3:x-amz-website-redirect-location",
    "s3:object-lock-mode",
    "s3:object-lock-retain-until-date",
    "s3:object-lock-remaining-retention-days",
    "s3:object-lock-legal-hold",
    "s3:locationconstraint",
    "s3:resourceaccount",
];

/// The condition key prefixes with a tag key after them.
const TAG_KEYS: &[&str] = &["s3:existingobjecttag/", "s3:requestobjecttag/"];

fn one_or_many(v: &Value, what: &str) -> Result<Vec<String>, PolicyError> {
    let scalar = |x: &Value| match x {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        _ => bad(format!("{what} must be a string or a list of strings")),
    };
    match v {
        Value::Array(a) if a.is_empty() => bad(format!("{what} must not be empty")),
        Value::Array(a) => a.iter().map(scalar).collect(),
        x => Ok(vec![scalar(x)?]),
    }
}

impl Policy {
    /// Parses and checks the policy of `bucket`, as PutBucketPolicy receives it.
    pub fn parse(text: &str, bucket: &str) -> Result<Policy, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return bad(format!(
                "Policy document is too large: {} bytes, at most {MAX_POLICY_BYTES}",
                text.len()
            ));
        }
        if !text.trim_start().starts_with('{') {
            return bad("Policies must be valid JSON and the first byte must be '{'");
        }
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| PolicyError(format!("This policy contains invalid Json: {e}")))?;
        let Value::Object(top) = doc else {
            return bad("Policies must be valid JSON and the first byte must be '{'");
        };
        let mut variables = false;
        let mut statements = None;
        for (k, v) in &top {
            match k.as_str() {
                "Version" => match v.as_str() {
                    Some("2012-10-17") => variables = true,
                    Some("2008-10-17") => {}
                    _ => return bad("The policy Version must be 2012-10-17 or 2008-10-17"),
                },
                "Id" => {
                    if !v.is_string() {
                        return bad("Id must be a string");
                    }
                }
                "Statement" => statements = Some(v),
                other => return bad(format!("Unknown field {other}")),
            }
        }
        let list = match statements {
            None => return bad("Missing required field Statement"),
            Some(Value::Array(a)) if a.is_empty() => return bad("Statement must not be empty"),
            Some(Value::Array(a)) => a.iter().collect::<Vec<_>>(),
            Some(s @ Value::Object(_)) => vec![s],
            Some(_) => return bad("Statement must be an object or a list of objects"),
        };
        let statements = list
            .into_iter()
            .map(|s| Statement::parse(s, bucket))
            .collect::<Result<Vec<_>, _>>()?;
        let mut keys = std::collections::HashSet::new();
        for s in &statements {
            for c in &s.conditions {
                keys.insert(c.key.clone());
                for v in &c.values {
                    variable_names(v, &mut keys);
                }
            }
            for r in &s.resources.list {
                variable_names(r, &mut keys);
            }
        }
        Ok(Policy {
            statements,
            variables,
            keys,
        })
    }

    /// The condition keys and variables evaluating may read (lower-case): the door fills a
    /// request's context with these only.
    pub fn reads(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }

    /// A policy that denies every request (what a stored policy that no longer parses
    /// becomes).
    pub fn deny_all() -> Policy {
        Policy {
            statements: vec![Statement {
                effect: Effect::Deny,
                principal: Principals {
                    negated: false,
                    anyone: true,
                    account: false,
                    users: vec![],
                    canonical: vec![],
                },
                actions: Patterns {
                    negated: false,
                    list: vec!["*".into()],
                },
                resources: Patterns {
                    negated: false,
                    list: vec!["*".into()],
                },
                conditions: vec![],
            }],
            variables: false,
            keys: Default::default(),
        }
    }

    /// Evaluates the policy for `req`.
    pub fn evaluate(&self, req: &Request<'_>) -> Decision {
        let mut allowed = false;
        let action = req.action.to_ascii_lowercase();
        for s in &self.statements {
            if s.applies(req, &action, self.variables) {
                match s.effect {
                    Effect::Deny => return Decision::Deny,
                    Effect::Allow => allowed = true,
                }
            }
        }
        if allowed {
            Decision::Allow
        } else {
            Decision::None
        }
    }

    /// Whether the policy grants anything to everyone (GetBucketPolicyStatus's `IsPublic`, and
    /// what Block Public Access looks at): an `Allow` to `*` (or through `NotPrincipal`) whose
    /// conditions do not pin the caller to fixed addresses, accounts or principals.
    pub fn is_public(&self) -> bool {
        const PINNING: &[&str] = &[
            "aws:sourceip",
            "aws:sourcevpc",
            "aws:sourcevpce",
            "aws:sourcearn",
            "aws:sourceaccount",
            "aws:sourceowner",
            "aws:principalaccount",
            "aws:principalarn",
            "aws:principalorgid",
            "aws:userid",
            "aws:username",
            "s3:dataaccesspointarn",
            "s3:dataaccesspointaccount",
        ];
        self.statements.iter().any(|s| {
            s.effect == Effect::Allow
                && (s.principal.anyone || s.principal.negated)
                && !s.conditions.iter().any(|c| {
                    PINNING.contains(&c.key.as_str())
                        && !c.op.negated()
                        && c.op != Op::Null
                        && !c.values.iter().any(|v| {
                            v.contains('*') || (c.op == Op::IpAddress && v.ends_with("/0"))
                        })
                })
        })
    }

    /// Whether evaluating needs the object's current tags (`s3:ExistingObjectTag/<key>`).
    pub fn needs_existing_tags(&self) -> bool {
        self.statements.iter().any(|s| {
            s.conditions
                .iter()
                .any(|c| c.key.starts_with("s3:existingobjecttag/"))
        })
    }
}

impl Statement {
    fn parse(v: &Value, bucket: &str) -> Result<Statement, PolicyError> {
        let Value::Object(m) = v else {
            return bad("Statement must be an object or a list of objects");
        };
        let mut effect = None;
        let mut principal = None;
        let mut actions = None;
        let mut resources = None;
        let mut conditions = vec![];
        for (k, v) in m {
            match k.as_str() {
                "Sid" => {
                    if !v.is_string() {
                        return bad("Sid must be a string");
                    }
                }
                "Effect" => {
                    effect = Some(match v.as_str() {
                        Some("Allow") => Effect::Allow,
                        Some("Deny") => Effect::Deny,
                        _ => return bad("Invalid effect: it must be Allow or Deny"),
                    })
                }
                "Principal" | "NotPrincipal" => {
                    if principal.is_some() {
                        return bad("A statement has Principal or NotPrincipal, not both");
                    }
                    principal = Some(Principals::parse(v, k == "NotPrincipal")?);
                }
                "Action" | "NotAction" => {
                    if actions.is_some() {
                        return bad("A statement has Action or NotAction, not both");
                    }
                    let list = one_or_many(v, k)?;
                    for a in &list {
                        check_action(a)?;
                    }
                    actions = Some(Patterns {
                        negated: k == "NotAction",
                        list: list.iter().map(|a| a.to_ascii_lowercase()).collect(),
                    });
                }
                "Resource" | "NotResource" => {
                    if resources.is_some() {
                        return bad("A statement has Resource or NotResource, not both");
                    }
                    let list = one_or_many(v, k)?;
                    for r in &list {
                        check_resource(r, bucket)?;
                    }
                    resources = Some(Patterns {
                        negated: k == "NotResource",
                        list,
                    });
                }
                "Condition" => conditions = parse_conditions(v)?,
                other => return bad(format!("Unknown field {other}")),
            }
        }
        Ok(Statement {
            effect: effect.ok_or_else(|| PolicyError("Missing required field Effect".into()))?,
            principal: principal
                .ok_or_else(|| PolicyError("Missing required field Principal".into()))?,
            actions: actions.ok_or_else(|| PolicyError("Missing required field Action".into()))?,
            resources: resources
                .ok_or_else(|| PolicyError("Missing required field Resource".into()))?,
            conditions,
        })
    }

    /// Whether the statement applies to `req` (`action`: its action in lower case).
    fn applies(&self, req: &Request<'_>, action: &str, variables: bool) -> bool {
        if !self.principal.matches(req.principal) {
            return false;
        }
        let hit = self
            .actions
            .list
            .iter()
            .any(|p| glob(p.as_bytes(), action.as_bytes()));
        if hit == self.actions.negated {
            return false;
        }
        let resource = self.resources.list.iter().any(|p| {
            if variables && p.contains("${") {
                match expand(p, req.context) {
                    Some(p) => glob(p.as_bytes(), req.resource.as_bytes()),
                    None => false,
                }
            } else {
                glob(p.as_bytes(), req.resource.as_bytes())
            }
        });
        if resource == self.resources.negated {
            return false;
        }
        self.conditions
            .iter()
            .all(|c| c.holds(req.context, variables))
    }
}

impl Principals {
    fn parse(v: &Value, negated: bool) -> Result<Principals, PolicyError> {
        let mut p = Principals {
            negated,
            anyone: false,
            account: false,
            users: vec![],
            canonical: vec![],
        };
        match v {
            Value::String(s) if s == "*" => p.anyone = true,
            Value::Object(m) if !m.is_empty() => {
                for (kind, ids) in m {
                    let ids = one_or_many(ids, "Principal")?;
                    for id in ids {
                        match kind.as_str() {
                            "AWS" => p.add_aws(&id)?,
                            "CanonicalUser" => {
                                if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                                    return bad(format!("Invalid principal in policy: {id}"));
                                }
                                p.canonical.push(id.to_ascii_lowercase());
                            }
                            _ => return bad(format!("Invalid principal in policy: {kind}")),
                        }
                    }
                }
            }
            _ => return bad("Invalid principal in policy"),
        }
        Ok(p)
    }

    fn add_aws(&mut self, id: &str) -> Result<(), PolicyError> {
        let root = format!("arn:aws:iam::{ACCOUNT}:root");
        let user_prefix = format!("arn:aws:iam::{ACCOUNT}:user/");
        if id == "*" {
            self.anyone = true;
        } else if id == ACCOUNT || id == root {
            self.account = true;
        } else if let Some(name) = id.strip_prefix(&user_prefix)
            && !name.is_empty()
            && !name.contains(['*', '?'])
        {
            self.users.push(name.to_owned());
        } else {
            return bad(format!("Invalid principal in policy: {id}"));
        }
        Ok(())
    }

    fn matches(&self, who: Principal<'_>) -> bool {
        let hit = match who {
            Principal::Anonymous => self.anyone,
            Principal::User(name) => {
                self.anyone
                    || self.account
                    || self.users.iter().any(|u| u == name)
                    || (!self.canonical.is_empty() && self.canonical.contains(&canonical_id(name)))
            }
        };
        hit != self.negated
    }
}

/// Whether `a` (`s3:Name`) is one of S3's actions, as a policy names them.
pub fn is_action(a: &str) -> bool {
    a.strip_prefix("s3:")
        .is_some_and(|n| ACTIONS.iter().any(|x| x.eq_ignore_ascii_case(n)))
}

fn check_action(a: &str) -> Result<(), PolicyError> {
    if a == "*" {
        return Ok(());
    }
    let Some((service, name)) = a.split_once(':') else {
        return bad(format!("Policy has invalid action: {a}"));
    };
    if !service.eq_ignore_ascii_case("s3") || name.is_empty() {
        return bad(format!("Policy has invalid action: {a}"));
    }
    let lower = name.to_ascii_lowercase();
    let known = if name.contains(['*', '?']) {
        ACTIONS
            .iter()
            .any(|x| glob(lower.as_bytes(), x.to_ascii_lowercase().as_bytes()))
    } else {
        ACTIONS.iter().any(|x| x.eq_ignore_ascii_case(name))
    };
    if known {
        Ok(())
    } else {
        bad(format!("Policy has invalid action: {a}"))
    }
}

/// A resource must be `*` or an S3 ARN within the policy's bucket.
fn check_resource(r: &str, bucket: &str) -> Result<(), PolicyError> {
    if r == "*" {
        return Ok(());
    }
    let Some(rest) = r.strip_prefix("arn:aws:s3:::") else {
        return bad(format!("Policy has invalid resource: {r}"));
    };
    let b = rest.split('/').next().unwrap_or("");
    // The bucket part may be a pattern, but must be able to name this bucket.
    if b.is_empty() || !glob(b.as_bytes(), bucket.as_bytes()) && !b.contains("${") {
        return bad(format!("Policy has invalid resource: {r}"));
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), PolicyError> {
    let k = key.to_ascii_lowercase();
    let ok = k.starts_with("aws:") && k.len() > 4
        || S3_KEYS.contains(&k.as_str())
        || TAG_KEYS
            .iter()
            .any(|p| k.strip_prefix(p).is_some_and(|t| !t.is_empty()));
    if ok {
        Ok(())
    } else {
        bad(format!("Policy has an invalid condition key: {key}"))
    }
}

fn parse_conditions(v: &Value) -> Result<Vec<Condition>, PolicyError> {
    let Value::Object(ops) = v else {
        return bad("Condition must be an object");
    };
    let mut out = vec![];
    for (name, block) in ops {
        let (qualifier, rest) = if let Some(r) = name.strip_prefix("ForAnyValue:") {
            (Qualifier::ForAnyValue, r)
        } else if let Some(r) = name.strip_prefix("ForAllValues:") {
            (Qualifier::ForAllValues, r)
        } else {
            (Qualifier::Single, name.as_str())
        };
        let (base, if_exists) = match rest.strip_suffix("IfExists") {
            Some(b) => (b, true),
            None => (rest, false),
        };
        let op = Op::parse(base)
            .filter(|o| !(if_exists && *o == Op::Null))
            .ok_or_else(|| PolicyError(format!("Invalid Condition type : {name}")))?;
        let Value::Object(keys) = block else {
            return bad(format!("Condition {name} must map keys to values"));
        };
        if keys.is_empty() {
            return bad(format!("Condition {name} names no key"));
        }
        for (key, vals) in keys {
            check_key(key)?;
            let values = one_or_many(vals, "A condition value")?;
            for val in &values {
                check_value(op, val).map_err(|e| {
                    PolicyError(format!("Invalid value for {name} {key}: {val} ({})", e.0))
                })?;
            }
            out.push(Condition {
                qualifier,
                op,
                if_exists,
                key: key.to_ascii_lowercase(),
                values,
            });
        }
    }
    Ok(out)
}

fn check_value(op: Op, v: &str) -> Result<(), PolicyError> {
    use Op::*;
    let ok = match op {
        NumericEquals
        | NumericNotEquals
        | NumericLessThan
        | NumericLessThanEquals
        | NumericGreaterThan
        | NumericGreaterThanEquals => v.parse::<f64>().is_ok(),
        DateEquals
        | DateNotEquals
        | DateLessThan
        | DateLessThanEquals
        | DateGreaterThan
        | DateGreaterThanEquals => parse_date(v).is_some(),
        Bool | Null => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        IpAddress | NotIpAddress => Cidr::parse(v).is_some(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        bad("not of the operator's type")
    }
}

/// An ISO 8601 date or date-time, or seconds since the epoch, as seconds (fractional).
fn parse_date(s: &str) -> Option<f64> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t.unix_timestamp_nanos() as f64 / 1e9);
    }
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    if let Ok(d) = time::Date::parse(s, &fmt) {
        return Some(d.midnight().assume_utc().unix_timestamp() as f64);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<f64>().ok();
    }
    None
}

struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    fn parse(s: &str) -> Option<Cidr> {
        let (ip, bits) = match s.split_once('/') {
            Some((ip, b)) => (ip.parse::<IpAddr>().ok()?, Some(b.parse::<u8>().ok()?)),
            None => (s.parse::<IpAddr>().ok()?, None),
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(Cidr { net: ip, bits })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.net, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, ip) => ip,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl Condition {
    fn holds(&self, cx: &Context, variables: bool) -> bool {
        let got = cx.get(&self.key).filter(|v| !v.is_empty());
        if self.op == Op::Null {
            let want_absent = self.values.iter().any(|v| v.eq_ignore_ascii_case("true"));
            return got.is_none() == want_absent;
        }
        let Some(got) = got else {
            // An absent key: `IfExists` and ForAllValues hold; negated operators hold; the
            // rest do not.
            return self.if_exists
                || self.qualifier == Qualifier::ForAllValues
                || (self.qualifier == Qualifier::Single && self.op.negated());
        };
        let wanted: std::borrow::Cow<'_, [String]> =
            if variables && self.values.iter().any(|v| v.contains("${")) {
                self.values
                    .iter()
                    .filter_map(|v| expand(v, cx))
                    .collect::<Vec<_>>()
                    .into()
            } else {
                self.values.as_slice().into()
            };
        // Whether one request value matches one of the policy's values, for the positive
        // form of the operator.
        let positive = |g: &str| wanted.iter().any(|w| matches_positive(self.op, w, g));
        let negated = self.op.negated();
        match self.qualifier {
            Qualifier::Single | Qualifier::ForAnyValue => {
                if negated {
                    // Single: the request value matches none; ForAnyValue: some value does.
                    match self.qualifier {
                        Qualifier::Single => !got.iter().any(|g| positive(g)),
                        _ => got.iter().any(|g| !positive(g)),
                    }
                } else {
                    got.iter().any(|g| positive(g))
                }
            }
            Qualifier::ForAllValues => {
                if negated {
                    got.iter().all(|g| !positive(g))
                } else {
                    got.iter().all(|g| positive(g))
                }
            }
        }
    }
}

/// The positive form of `op`: whether the request value `got` matches the policy value `want`.
fn matches_positive(op: Op, want: &str, got: &str) -> bool {
    use Op::*;
    let num = |f: fn(f64, f64) -> bool| match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(g), Ok(w)) => f(g, w),
        _ => false,
    };
    let date = |f: fn(f64, f64) -> bool| match (parse_date(got), parse_date(want)) {
        (Some(g), Some(w)) => f(g, w),
        _ => false,
    };
    match op {
        StringEquals | StringNotEquals => want == got,
        StringEqualsIgnoreCase | StringNotEqualsIgnoreCase => want.eq_ignore_ascii_case(got),
        StringLike | StringNotLike | ArnLike | ArnNotLike => glob(want.as_bytes(), got.as_bytes()),
        ArnEquals | ArnNotEquals => want == got,
        NumericEquals | NumericNotEquals => num(|g, w| g == w),
        NumericLessThan => num(|g, w| g < w),
        NumericLessThanEquals => num(|g, w| g <= w),
        NumericGreaterThan => num(|g, w| g > w),
        NumericGreaterThanEquals => num(|g, w| g >= w),
        DateEquals | DateNotEquals => date(|g, w| g == w),
        DateLessThan => date(|g, w| g < w),
        DateLessThanEquals => date(|g, w| g <= w),
        DateGreaterThan => date(|g, w| g > w),
        DateGreaterThanEquals => date(|g, w| g >= w),
        Bool => want.eq_ignore_ascii_case(got),
        BinaryEquals => want == got,
        IpAddress | NotIpAddress => match (Cidr::parse(want), got.parse::<IpAddr>()) {
            (Some(c), Ok(ip)) => c.contains(ip),
            _ => false,
        },
        Null => false,
    }
}

/// Adds the names of the `${...}` variables in `s` (lower-case) to `out`.
fn variable_names(s: &str, out: &mut std::collections::HashSet<String>) {
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return;
        };
        out.insert(after[..end].to_ascii_lowercase());
        rest = &after[end + 1..];
    }
}

/// Expands `${key}` policy variables from the request's context (`${*}`, `${?}` and `${$}`
/// are the literal characters). A variable with no single value makes the whole pattern
/// match nothing (`None`), as AWS treats it.
fn expand(pattern: &str, cx: &Context) -> Option<String> {
    if !pattern.contains("${") {
        return Some(pattern.to_owned());
    }
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[i..]);
            return Some(out);
        };
        let name = &after[..end];
        match name {
            "*" | "?" | "$" => out.push_str(name),
            _ => match cx.get(name) {
                Some([v]) => {
                    // A value is literal text, never a pattern.
                    out.push_str(&v.replace('*', "\u{0}").replace('?', "\u{1}"))
                }
                _ => return None,
            },
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// Glob match of `text` against `pattern` (`*`: any run, `?`: any one character); the
/// characters `\0` and `\1` in a pattern stand for a literal `*` and `?` (expanded variables).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    // One character: skip a whole UTF-8 sequence.
                    p += 1;
                    t += 1;
                    while t < text.len() && text[t] & 0xC0 == 0x80 {
                        t += 1;
                    }
                    continue;
                }
                c => {
                    let lit = match c {
                        0 => b'*',
                        1 => b'?',
                        c => c,
                    };
                    if lit == text[t] {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(pairs: &[(&str, &str)]) -> Context {
        let mut c = Context::default();
        for (k, v) in pairs {
            c.set(k, *v);
        }
        c
    }

    fn decide(p: &Policy, who: Principal<'_>, action: &str, res: &str, c: &Context) -> Decision {
        p.evaluate(&Request {
            principal: who,
            action,
            resource: res,
            context: c,
        })
    }

    const PUBLIC_READ: &str = r#"{"Version":"2012-10-17","Statement":[{"Sid":"p","Effect":"Allow",
        "Principal":"*","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::data/*"}]}"#;

    #[test]
    fn public_read_allows_anyone_to_get_objects_and_nothing_else() {
        let p = Policy::parse(PUBLIC_READ, "data").unwrap();
        let c = Context::default();
        let obj = "arn:aws:s3:::data/a/b.jpg";
        assert_eq!(
            decide(&p, Principal::Anonymous, "s3:GetObject", obj, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::User("bob"), "s3:GetObject", obj, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::Anonymous, "s3:PutObject", obj, &c),
            Decision::None
        );
        assert_eq!(
            decide(
                &p,
                Principal::Anonymous,
                "s3:ListBucket",
                "arn:aws:s3:::data",
                &c
            ),
            Decision::None
        );
        assert!(p.is_public());
    }

    #[test]
    fn deny_wins_and_not_forms_invert() {
        let p = Policy::parse(
            r#"{"Statement":[
              {"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:*","Resource":"arn:aws:s3:::b/*"},
              {"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::000000000000:user/alice"},
               "NotAction":"s3:Get*","Resource":"arn:aws:s3:::b/private/*"}]}"#,
            "b",
        )
        .unwrap();
        let c = Context::default();
        let private = "arn:aws:s3:::b/private/x";
        assert_eq!(
            decide(&p, Principal::User("bob"), "s3:PutObject", private, &c),
            Decision::Deny
        );
        assert_eq!(
            decide(&p, Principal::User("bob"), "s3:GetObject", private, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::User("alice"), "s3:PutObject", private, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::Anonymous, "s3:DeleteObject", private, &c),
            Decision::Deny
        );
        assert_eq!(
            decide(
                &p,
                Principal::User("bob"),
                "s3:PutObject",
                "arn:aws:s3:::b/pub",
                &c
            ),
            Decision::Allow
        );
        // Actions match case-insensitively, resources exactly.
        assert_eq!(
            decide(
                &p,
                Principal::User("bob"),
                "s3:GETOBJECT",
                "arn:aws:s3:::B/pub",
                &c
            ),
            Decision::None
        );
    }

    #[test]
    fn principals_by_arn_account_and_canonical_id() {
        let id = canonical_id("carol");
        let p = Policy::parse(
            &format!(
                r#"{{"Statement":[{{"Effect":"Allow","Principal":{{"AWS":["arn:aws:iam::000000000000:user/alice"],
                "CanonicalUser":"{id}"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}},
                {{"Effect":"Allow","Principal":{{"AWS":"000000000000"}},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::b"}}]}}"#
            ),
            "b",
        )
        .unwrap();
        let c = Context::default();
        let o = "arn:aws:s3:::b/k";
        assert_eq!(
            decide(&p, Principal::User("alice"), "s3:GetObject", o, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::User("carol"), "s3:GetObject", o, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::User("dave"), "s3:GetObject", o, &c),
            Decision::None
        );
        // The account: every user, never the anonymous caller.
        let b = "arn:aws:s3:::b";
        assert_eq!(
            decide(&p, Principal::User("dave"), "s3:ListBucket", b, &c),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, Principal::Anonymous, "s3:ListBucket", b, &c),
            Decision::None
        );
        assert!(!p.is_public());
    }

    fn with_condition(cond: &str) -> Policy {
        Policy::parse(
            &format!(
                r#"{{"Version":"2012-10-17","Statement":{{"Effect":"Allow","Principal":"*",
                "Action":"s3:*","Resource":["arn:aws:s3:::b","arn:aws:s3:::b/*"],"Condition":{cond}}}}}"#
            ),
            "b",
        )
        .unwrap()
    }

    fn holds(p: &Policy, c: &Context) -> bool {
        decide(
            p,
            Principal::Anonymous,
            "s3:GetObject",
            "arn:aws:s3:::b/k",
            c,
        ) == Decision::Allow
    }

    #[test]
    fn every_operator_family() {
        let ip = with_condition(r#"{"IpAddress":{"aws:SourceIp":["10.1.0.0/16","::1"]}}"#);
        assert!(holds(&ip, &cx(&[("aws:SourceIp", "10.1.2.3")])));
        assert!(holds(&ip, &cx(&[("aws:SourceIp", "::1")])));
        assert!(!holds(&ip, &cx(&[("aws:SourceIp", "10.2.0.1")])));
        assert!(!holds(&ip, &Context::default()));
        assert!(!ip.is_public());
        let not_ip = with_condition(r#"{"NotIpAddress":{"aws:SourceIp":"127.0.0.0/8"}}"#);
        assert!(!holds(&not_ip, &cx(&[("aws:SourceIp", "127.0.0.1")])));
        assert!(holds(&not_ip, &cx(&[("aws:SourceIp", "192.0.2.1")])));
        let b = with_condition(r#"{"Bool":{"aws:SecureTransport":"true"}}"#);
        assert!(holds(&b, &cx(&[("aws:securetransport", "true")])));
        assert!(!holds(&b, &cx(&[("aws:securetransport", "false")])));
        let s = with_condition(r#"{"StringLike":{"s3:prefix":["home/*","pub?"]}}"#);
        assert!(holds(&s, &cx(&[("s3:prefix", "home/x/")])));
        assert!(holds(&s, &cx(&[("s3:prefix", "pub1")])));
        assert!(!holds(&s, &cx(&[("s3:prefix", "pub12")])));
        let ne = with_condition(r#"{"StringNotEquals":{"s3:x-amz-acl":"public-read"}}"#);
        assert!(holds(&ne, &cx(&[("s3:x-amz-acl", "private")])));
        assert!(!holds(&ne, &cx(&[("s3:x-amz-acl", "public-read")])));
        assert!(
            holds(&ne, &Context::default()),
            "negated: an absent key holds"
        );
        let ic = with_condition(r#"{"StringEqualsIgnoreCase":{"aws:UserAgent":"Boto3"}}"#);
        assert!(holds(&ic, &cx(&[("aws:useragent", "boto3")])));
        let n = with_condition(r#"{"NumericLessThanEquals":{"s3:max-keys":"10"}}"#);
        assert!(holds(&n, &cx(&[("s3:max-keys", "10")])));
        assert!(!holds(&n, &cx(&[("s3:max-keys", "11")])));
        assert!(!holds(&n, &cx(&[("s3:max-keys", "ten")])));
        let d = with_condition(r#"{"DateLessThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"}}"#);
        assert!(holds(
            &d,
            &cx(&[("aws:CurrentTime", "2026-11-26T18:00:00Z")])
        ));
        assert!(!holds(
            &d,
            &cx(&[("aws:CurrentTime", "2031-01-01T00:00:00Z")])
        ));
        let e = with_condition(r#"{"DateGreaterThan":{"aws:EpochTime":"1700000000"}}"#);
        assert!(holds(&e, &cx(&[("aws:EpochTime", "1800000000")])));
        let arn = with_condition(
            r#"{"ArnLike":{"aws:PrincipalArn":"arn:aws:iam::000000000000:user/team-*"}}"#,
        );
        assert!(holds(
            &arn,
            &cx(&[("aws:PrincipalArn", "arn:aws:iam::000000000000:user/team-a")])
        ));
        assert!(!holds(
            &arn,
            &cx(&[("aws:PrincipalArn", "arn:aws:iam::000000000000:user/x")])
        ));
        let null = with_condition(r#"{"Null":{"s3:x-amz-server-side-encryption":"true"}}"#);
        assert!(holds(&null, &Context::default()));
        assert!(!holds(
            &null,
            &cx(&[("s3:x-amz-server-side-encryption", "AES256")])
        ));
        let ie = with_condition(r#"{"StringEqualsIfExists":{"s3:x-amz-acl":"private"}}"#);
        assert!(holds(&ie, &Context::default()));
        assert!(!holds(&ie, &cx(&[("s3:x-amz-acl", "public-read")])));
        // Several keys in one operator, and several operators: all must hold.
        let and = with_condition(
            r#"{"StringEquals":{"s3:prefix":"a","s3:delimiter":"/"},"NumericLessThan":{"s3:max-keys":"5"}}"#,
        );
        assert!(holds(
            &and,
            &cx(&[
                ("s3:prefix", "a"),
                ("s3:delimiter", "/"),
                ("s3:max-keys", "1")
            ])
        ));
        assert!(!holds(
            &and,
            &cx(&[
                ("s3:prefix", "a"),
                ("s3:delimiter", "/"),
                ("s3:max-keys", "9")
            ])
        ));
        assert!(!holds(
            &and,
            &cx(&[("s3:prefix", "a"), ("s3:max-keys", "1")])
        ));
    }

    #[test]
    fn set_qualifiers() {
        let mut keys = Context::default();
        keys.set_many(
            "s3:RequestObjectTagKeys",
            vec!["team".into(), "stage".into()],
        );
        let all = with_condition(
            r#"{"ForAllValues:StringEquals":{"s3:RequestObjectTagKeys":["team","stage","owner"]}}"#,
        );
        assert!(holds(&all, &keys));
        assert!(
            holds(&all, &Context::default()),
            "ForAllValues holds for an absent key"
        );
        let some =
            with_condition(r#"{"ForAnyValue:StringEquals":{"s3:RequestObjectTagKeys":"secret"}}"#);
        assert!(!holds(&some, &keys));
        assert!(!holds(&some, &Context::default()));
        keys.set_many(
            "s3:RequestObjectTagKeys",
            vec!["team".into(), "secret".into()],
        );
        assert!(holds(&some, &keys));
        assert!(!holds(&all, &keys));
        let any_num = with_condition(r#"{"ForAnyValue:NumericLessThan":{"s3:max-keys":"3"}}"#);
        assert!(holds(&any_num, &cx(&[("s3:max-keys", "2")])));
        let none = with_condition(
            r#"{"ForAllValues:StringNotEquals":{"s3:RequestObjectTagKeys":"secret"}}"#,
        );
        assert!(!holds(&none, &keys));
    }

    #[test]
    fn policy_variables_expand_in_resources_and_values() {
        let p = Policy::parse(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"000000000000"},
              "Action":"s3:*","Resource":"arn:aws:s3:::home/${aws:username}/*"},
              {"Effect":"Allow","Principal":{"AWS":"000000000000"},"Action":"s3:ListBucket",
               "Resource":"arn:aws:s3:::home","Condition":{"StringLike":{"s3:prefix":"${aws:username}/*"}}}]}"#,
            "home",
        )
        .unwrap();
        let alice = cx(&[("aws:username", "alice"), ("s3:prefix", "alice/docs/")]);
        let a = Principal::User("alice");
        assert_eq!(
            decide(&p, a, "s3:PutObject", "arn:aws:s3:::home/alice/x", &alice),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, a, "s3:PutObject", "arn:aws:s3:::home/bob/x", &alice),
            Decision::None
        );
        assert_eq!(
            decide(&p, a, "s3:ListBucket", "arn:aws:s3:::home", &alice),
            Decision::Allow
        );
        // A name with a wildcard in it is literal text, not a pattern.
        let star = cx(&[("aws:username", "*")]);
        assert_eq!(
            decide(&p, a, "s3:PutObject", "arn:aws:s3:::home/bob/x", &star),
            Decision::None
        );
        // No value: the pattern matches nothing (the anonymous caller has no user name).
        assert_eq!(
            decide(
                &p,
                a,
                "s3:PutObject",
                "arn:aws:s3:::home//x",
                &Context::default()
            ),
            Decision::None
        );
        // The 2008 version expands nothing.
        let old = Policy::parse(
            r#"{"Version":"2008-10-17","Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject",
              "Resource":"arn:aws:s3:::home/${aws:username}/*"}}"#,
            "home",
        )
        .unwrap();
        assert_eq!(
            decide(
                &old,
                a,
                "s3:GetObject",
                "arn:aws:s3:::home/${aws:username}/f",
                &alice
            ),
            Decision::Allow
        );
    }

    #[test]
    fn malformed_policies_name_what_is_wrong() {
        let cases = [
            ("[]", "first byte"),
            ("{", "invalid Json"),
            (r#"{"Statement":[]}"#, "must not be empty"),
            (r#"{"Version":"2020-01-01","Statement":{}}"#, "Version"),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObjekt","Resource":"*"}}"#,
                "invalid action",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"ec2:RunInstances","Resource":"*"}}"#,
                "invalid action",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:Foo*","Resource":"*"}}"#,
                "invalid action",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}}"#,
                "invalid resource",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"bucket/*"}}"#,
                "invalid resource",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}}"#,
                "Principal",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:GetObject","Resource":"*"}}"#,
                "Invalid principal",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::111111111111:user/x"},"Action":"s3:GetObject","Resource":"*"}}"#,
                "Invalid principal",
            ),
            (
                r#"{"Statement":{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"*"}}"#,
                "effect",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Condition":{"StringSorta":{"s3:prefix":"a"}}}}"#,
                "Invalid Condition type",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Condition":{"NullIfExists":{"s3:prefix":"true"}}}}"#,
                "Invalid Condition type",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Condition":{"StringEquals":{"s3:nosuchkey":"a"}}}}"#,
                "invalid condition key",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Condition":{"IpAddress":{"aws:SourceIp":"300.1.1.1/8"}}}}"#,
                "Invalid value",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Condition":{"NumericEquals":{"s3:max-keys":"x"}}}}"#,
                "Invalid value",
            ),
            (
                r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*","Extra":1}}"#,
                "Unknown field",
            ),
        ];
        for (text, want) in cases {
            let e = Policy::parse(text, "bucket").unwrap_err();
            assert!(e.0.contains(want), "{text}: {e}");
        }
        let big = format!(
            r#"{{"Statement":{{"Sid":"{}","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*"}}}}"#,
            "x".repeat(MAX_POLICY_BYTES)
        );
        assert!(
            Policy::parse(&big, "bucket")
                .unwrap_err()
                .0
                .contains("too large")
        );
    }

    #[test]
    fn glob_matches_like_aws() {
        assert!(glob(b"a*c", b"abbbc"));
        assert!(glob(b"a*", b"a"));
        assert!(glob(b"*", b""));
        assert!(!glob(b"a?c", b"ac"));
        assert!(glob(b"a?c", "aéc".as_bytes()));
        assert!(glob(b"*/x/*", b"p/x/q"));
        assert!(!glob(b"*/x/*", b"p/y/q"));
        assert!(!glob(b"abc", b"abcd"));
        assert!(glob(b"\0", b"*") && !glob(b"\0", b"a"));
    }
}
