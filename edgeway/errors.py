"""The one error tree. Every error a client can see is an ``ApiError``.

    ApiError (status, code, msg)
      +-- Invalid        400, a request member breaks a rule (names the member)
      +-- Forbidden      403, authentication or permission
      +-- NotFound       404, a resource or path that does not exist
      +-- Conflict       400, a unique name is taken (the API family answers 400, not 409)
      +-- Unavailable    503 with ``Retry-After``, the database could not be reached

Codes are the numbers of api-surface.md §5; ``error_code`` renders them with the dialect's
prefix in one place (``render``). ``None`` means no ``error_code`` member (plain 404s).
"""

from __future__ import annotations

from typing import Any

CODE_PREFIX = "ERR_EDGEWAY_"


class ApiError(Exception):
    status = 400
    retry_after: int | None = None  # seconds, sent as ``Retry-After``

    def __init__(self, msg: str, code: int | None = 215, *, status: int | None = None,
                 details: dict[str, str] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.code = code
        if status is not None:
            self.status = status
        self.details = details or {}

    def body(self, operation_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.code is not None:
            out["error_code"] = f"{CODE_PREFIX}{self.code}"
        out["status_code"] = self.status
        out["msg"] = self.msg
        out["details"] = {**self.details, "operation_id": operation_id}
        return out


class Invalid(ApiError):
    """A request member breaks a rule. ``member`` is a dotted path such as ``target.auth``."""

    status = 400

    def __init__(self, member: str, rule: str, code: int = 215) -> None:
        super().__init__(f"Invalid value for '{member}': {rule}" if member else rule, code)
        self.member = member
        self.details = {"member": member} if member else {}


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404

    def __init__(self, msg: str = "Resource not found", code: int | None = None) -> None:
        super().__init__(msg, code)


class Conflict(ApiError):
    status = 400


class Unavailable(ApiError):
    """The database could not be reached (252: nothing was applied), or its connection was
    lost while the change was committing (253: it may or may not have been applied)."""

    status = 503
    retry_after = 2
    NOT_APPLIED = 252  # Edgeway's own codes, next to §5's request-level 2xx range
    OUTCOME_UNKNOWN = 253

    @classmethod
    def not_applied(cls, why: str) -> Unavailable:
        return cls(f"The database is unavailable ({why}); the request was not applied. "
                   f"Retry after {cls.retry_after} seconds.", cls.NOT_APPLIED)

    @classmethod
    def outcome_unknown(cls, why: str) -> Unavailable:
        return cls(f"The database is unavailable ({why}): the change may or may not have "
                   "been applied. Read the resource before retrying: retrying a create may "
                   "create it twice.", cls.OUTCOME_UNKNOWN)
