"""Errors of the HTTP API in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Status codes: 400 bad input, 404 unknown voice, 409 voice name taken, 413 too large (input
text over the limit, oversized upload), 503 engine busy, 500 unexpected.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    503: "server_busy",
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
