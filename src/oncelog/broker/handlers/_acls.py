"""What CreateAcls, DescribeAcls and DeleteAcls share: their wire fields as the domain's
ACL types (oncelog.security.acl), and the answer without an authorizer."""

from __future__ import annotations

from oncelog.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

NO_AUTHORIZER = "No Authorizer is configured."


def binding_of(creation) -> AclBinding:
    """A CreateAcls creation."""
    return AclBinding(
        ResourcePattern(ResourceType.from_code(creation.resource_type), creation.resource_name,
                        PatternType.from_code(creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host, AclOperation.from_code(creation.operation),
                           AclPermissionType.from_code(creation.permission_type)),
    )


def filter_of(request) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(request.resource_type_filter), request.resource_name_filter,
                              PatternType.from_code(request.pattern_type_filter)),
        AccessControlEntryFilter(request.principal_filter, request.host_filter,
                                 AclOperation.from_code(request.operation),
                                 AclPermissionType.from_code(request.permission_type)),
    )
