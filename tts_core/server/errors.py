"""Errors of the HTTP API in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Status codes: 400 bad input, 401 missing/wrong API key, 403 refused Host or Origin, 404
unknown voice, 409 voice name taken, 413 too large (input text over the limit, oversized
upload), 415 body not JSON / not a form, 429 one owner's voice quota reached, 503 engine busy (with Retry-After) or voice store not
writable, 507 no disk space for voices, 500 unexpected or a damaged stored voice.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "insufficient_quota",
    503: "server_busy",
    507: "server_error",
    500: "server_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = error_body(self.status, self.message, self.param, self.code)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def error_body(status: int, message: str, param: str | None, code: str | None) -> dict:
    kind = _TYPES.get(status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
