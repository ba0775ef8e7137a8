"""The field tables of the security APIs: SASL authentication, ACLs, users' SCRAM credentials.

Transcribed from Kafka's JSON message specs like ``messages`` (same names, versions, nullable
versions, defaults and order; fields that exist only above our highest version are left out). The
versions are the ones the server advertises once its security handlers are registered:
SaslHandshake 0-1 (never flexible), SaslAuthenticate 0-2 (v2 flexible), DescribeAcls, CreateAcls and
DeleteAcls 0-3 (v2+ flexible; Kafka 4.0 dropped v0, KIP-896, but older clients still send it: v0 is
v1 without the resource pattern type, which then means LITERAL), DescribeUserScramCredentials 0 and
AlterUserScramCredentials 0 (flexible from v0).

SaslHandshake v0 and v1 have the same bodies; what differs is what follows: after a v0 handshake
the SASL tokens travel as bare size-prefixed frames, after v1 inside SaslAuthenticate requests
(KIP-152). The enumerations in the ACL fields (resource type, pattern type, operation, permission
type) and the SCRAM mechanism numbers (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) are Kafka's, noted at the
fields; the tables carry them as plain integers.

It imports only ``schema``; ``messages`` collects ``SPECS`` into the registry.
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- SaslHandshake (17) --------------------------------------------------------------------------

SASL_HANDSHAKE = api(17, "SaslHandshake", "0-1", "none", request=[
    # "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"...
    f("Mechanism", "string", "0+"),
], response=[
    # UNSUPPORTED_SASL_MECHANISM (33) with the mechanisms we do support.
    f("ErrorCode", "int16", "0+"),
    f("Mechanisms", "[]string", "0+"),
])

# --- SaslAuthenticate (36) -----------------------------------------------------------------------

SASL_AUTHENTICATE = api(36, "SaslAuthenticate", "0-2", "2+", request=[
    f("AuthBytes", "bytes", "0+"),
], response=[
    # SASL_AUTHENTICATION_FAILED (58), ILLEGAL_SASL_STATE (34).
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("AuthBytes", "bytes", "0+"),
    # 0: no re-authentication required (KIP-368).
    f("SessionLifetimeMs", "int64", "1+", default="0"),
])

# --- DescribeAcls (29) ---------------------------------------------------------------------------
# Resource types: 1 ANY (filters only), 2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID,
# 6 DELEGATION_TOKEN, 7 USER. Pattern types: 1 ANY, 2 MATCH (filters only), 3 LITERAL, 4 PREFIXED.
# Operations: 1 ANY, 2 ALL, 3 READ, 4 WRITE, 5 CREATE, 6 DELETE, 7 ALTER, 8 DESCRIBE,
# 9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS, 11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE, 13 CREATE_TOKENS,
# 14 DESCRIBE_TOKENS. Permission types: 1 ANY, 2 DENY, 3 ALLOW.

DESCRIBE_ACLS = api(29, "DescribeAcls", "0-3", "2+", request=[
    f("ResourceTypeFilter", "int8", "0+"),
    # null matches any resource name.
    f("ResourceNameFilter", "string", "0+", nullable="0+"),
    f("PatternTypeFilter", "int8", "1+", default="3"),
    # null matches any principal, any host.
    f("PrincipalFilter", "string", "0+", nullable="0+"),
    f("HostFilter", "string", "0+", nullable="0+"),
    f("Operation", "int8", "0+"),
    f("PermissionType", "int8", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Resources", "[]DescribeAclsResource", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("PatternType", "int8", "1+", default="3"),
        f("Acls", "[]AclDescription", "0+", fields=[
            f("Principal", "string", "0+"),
            f("Host", "string", "0+"),
            f("Operation", "int8", "0+"),
            f("PermissionType", "int8", "0+"),
        ]),
    ]),
])

# --- CreateAcls (30) -----------------------------------------------------------------------------

CREATE_ACLS = api(30, "CreateAcls", "0-3", "2+", request=[
    f("Creations", "[]AclCreation", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("ResourcePatternType", "int8", "1+", default="3"),
        # "User:alice" (or "User:*"); the host "*" for any.
        f("Principal", "string", "0+"),
        f("Host", "string", "0+"),
        f("Operation", "int8", "0+"),
        f("PermissionType", "int8", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]AclCreationResult", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
    ]),
])

# --- DeleteAcls (31) -----------------------------------------------------------------------------

DELETE_ACLS = api(31, "DeleteAcls", "0-3", "2+", request=[
    f("Filters", "[]DeleteAclsFilter", "0+", fields=[
        f("ResourceTypeFilter", "int8", "0+"),
        f("ResourceNameFilter", "string", "0+", nullable="0+"),
        f("PatternTypeFilter", "int8", "1+", default="3"),
        f("PrincipalFilter", "string", "0+", nullable="0+"),
        f("HostFilter", "string", "0+", nullable="0+"),
        f("Operation", "int8", "0+"),
        f("PermissionType", "int8", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("FilterResults", "[]DeleteAclsFilterResult", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("MatchingAcls", "[]DeleteAclsMatchingAcl", "0+", fields=[
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("ResourceType", "int8", "0+"),
            f("ResourceName", "string", "0+"),
            f("PatternType", "int8", "1+", default="3"),
            f("Principal", "string", "0+"),
            f("Host", "string", "0+"),
            f("Operation", "int8", "0+"),
            f("PermissionType", "int8", "0+"),
        ]),
    ]),
])

# --- DescribeUserScramCredentials (50) -----------------------------------------------------------
# Mechanisms: 0 UNKNOWN, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.

DESCRIBE_USER_SCRAM_CREDENTIALS = api(50, "DescribeUserScramCredentials", "0", "0+", request=[
    # null or empty: every user.
    f("Users", "[]UserName", "0+", nullable="0+", fields=[
        f("Name", "string", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Results", "[]DescribeUserScramCredentialsResult", "0+", fields=[
        f("User", "string", "0+"),
        # RESOURCE_NOT_FOUND (91) for a user without credentials.
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("CredentialInfos", "[]CredentialInfo", "0+", fields=[
            f("Mechanism", "int8", "0+"),
            f("Iterations", "int32", "0+"),
        ]),
    ]),
])

# --- AlterUserScramCredentials (51) --------------------------------------------------------------

ALTER_USER_SCRAM_CREDENTIALS = api(51, "AlterUserScramCredentials", "0", "0+", request=[
    f("Deletions", "[]ScramCredentialDeletion", "0+", fields=[
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
    ]),
    # The client salts and hashes: the password itself never crosses the wire.
    f("Upsertions", "[]ScramCredentialUpsertion", "0+", fields=[
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
        f("Iterations", "int32", "0+"),
        f("Salt", "bytes", "0+"),
        f("SaltedPassword", "bytes", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]AlterUserScramCredentialsResult", "0+", fields=[
        f("User", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
    ]),
])

SPECS = (SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS,
         DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS)
"""The security APIs, for the registry in ``messages``."""
