"""Exceptions raised for failed libkvtier calls.

Every failed C ABI call raises a :class:`KvtierError` subclass chosen by its status code. The
exception carries the status (:attr:`KvtierError.status`, a :class:`kvtier.Status`), the
library's name for it (:attr:`KvtierError.status_name`, e.g. ``"invalid_argument"``) and the
library's description of the failure (:attr:`KvtierError.message`).
"""

from __future__ import annotations

from ._kvtier import Status, status_string


class KvtierError(Exception):
    """A libkvtier call failed; ``str(e)`` is ``"<status_name>: <message>"``."""

    status: Status | int
    status_name: str
    message: str

    def __init__(self, status: Status | int, message: str) -> None:
        try:
            self.status = Status(status)
            self.status_name = status_string(self.status)
        except ValueError:  # a status newer than this module: keep the number
            self.status = int(status)
            self.status_name = f"status_{int(status)}"
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class InvalidArgumentError(KvtierError, ValueError):
    """A parameter was out of range or malformed (the message names it)."""


class VersionMismatchError(KvtierError):
    """Client and daemon speak different protocol or layout versions (the message names both)."""


class ProtocolError(KvtierError):
    """A peer broke the protocol."""


class LimitExceededError(KvtierError):
    """A configured limit was reached (clients, sequences, pool bytes, ...)."""


class NotFoundError(KvtierError, LookupError):
    """An id (sequence, client) is unknown."""


class PermissionDeniedError(KvtierError):
    """The peer's credentials do not allow the request (e.g. status without the admin group)."""


class UnavailableError(KvtierError):
    """The daemon is unreachable or gone."""


class KvtierOSError(KvtierError):
    """An operating-system call failed."""


class BadStateError(KvtierError):
    """The call is not valid now (e.g. on a closed client, or before register_model)."""


class InternalError(KvtierError):
    """A bug in kvtier."""


class KvtierTimeoutError(KvtierError):
    """A wait ended without a result."""


_BY_STATUS: dict[Status, type[KvtierError]] = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.VERSION_MISMATCH: VersionMismatchError,
    Status.PROTOCOL: ProtocolError,
    Status.LIMIT_EXCEEDED: LimitExceededError,
    Status.NOT_FOUND: NotFoundError,
    Status.PERMISSION_DENIED: PermissionDeniedError,
    Status.UNAVAILABLE: UnavailableError,
    Status.OS: KvtierOSError,
    Status.BAD_STATE: BadStateError,
    Status.INTERNAL: InternalError,
    Status.TIMEOUT: KvtierTimeoutError,
}


def from_status(status: int, message: str) -> KvtierError:
    """The exception for a failed call (used by the extension's exception translator)."""
    cls = next((c for s, c in _BY_STATUS.items() if int(s) == status), KvtierError)
    return cls(status, message)
