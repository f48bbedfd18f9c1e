"""Exceptions of the lathe client: each names its cause.

Every error the package raises is a LatheError; the subclasses say why, so a compiler can
catch exactly what it handles (a missing token, a daemon that is down, a malformed spec).
"""

import grpc


class LatheError(Exception):
    """Any failure of the lathe client. `code` is the gRPC status code when a daemon answered."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class Unauthenticated(LatheError):
    """The daemon needs a token (lathed --token-file) and none, or a wrong one, was sent."""


class Unreachable(LatheError):
    """No daemon answered at the address (down, wrong address, TLS mismatch, or too slow)."""


class BadSpec(LatheError, ValueError):
    """A workload spec or job description was rejected; the message names the offending part."""


class NotFound(LatheError, LookupError):
    """The daemon does not know the job (or other thing) named."""


class AmbiguousDeviceClass(LatheError):
    """Records of several device classes exist and none was named: lathe never mixes them."""


class DatabaseError(LatheError):
    """A tuning database file cannot be read: missing, not a lathe database, or too new."""


_BY_CODE = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unreachable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unreachable,
    grpc.StatusCode.INVALID_ARGUMENT: BadSpec,
    grpc.StatusCode.NOT_FOUND: NotFound,
}


def from_rpc_error(err, address, what):
    """The LatheError subclass for a grpc.RpcError of call `what` to the daemon at `address`."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, LatheError)
    if cls is Unreachable:
        text = f"lathed at {address} is unreachable ({what}): {details}"
    elif cls is Unauthenticated:
        text = f"lathed at {address} refused the call ({what}): unauthenticated: {details}"
    else:
        name = code.name.lower() if code is not None else "error"
        text = f"lathed at {address}: {what}: {name}: {details}"
    return cls(text, code)
