"""CSRF tokens: one per session, derived from the session's secret id and its API
token, so no CSRF token is stored server-side. Only a page of this origin can read the token (it
is in the HTML; the session cookie itself is HttpOnly); a forged request from
another site has neither. Compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

#: The form field carrying the token.
FIELD = "csrf_token"


def csrf_token(session_id: str, api_token: str) -> str:
    digest = hmac.new(
        session_id.encode(), b"conveyor-csrf\x00" + api_token.encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def csrf_valid(expected: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())
