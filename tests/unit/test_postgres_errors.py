"""Which asyncpg errors become BackendUnavailable, and which spoil a connection."""

from __future__ import annotations

import asyncpg
import pytest

from conveyor.backends.postgres.connection import raise_typed, spoiled
from conveyor.errors import BackendError, BackendUnavailable


def typed(exc: Exception) -> BackendError:
    with pytest.raises(BackendError) as caught:
        raise_typed(exc, "enqueue")
    return caught.value


def test_another_operation_in_progress_is_unavailable_and_spoils_the_connection() -> None:
    # What asyncpg raises on a connection whose session the server ended
    # before the pool lent it: retryable, and the connection must go.
    exc = asyncpg.InternalClientError("cannot switch to state 11; another operation is in progress")
    error = typed(exc)
    assert type(error) is BackendUnavailable
    assert spoiled(error)


def test_a_read_only_refusal_is_unavailable_and_spoils_the_connection() -> None:
    error = typed(asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT"))
    assert type(error) is BackendUnavailable
    assert "read-only" in str(error)
    assert "nothing was written" in str(error)
    assert spoiled(error)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.UniqueViolationError("duplicate key"),
        asyncpg.QueryCanceledError("statement timeout"),
        ConnectionResetError("reset by peer"),
    ],
)
def test_other_errors_leave_the_connection_to_the_pool(exc: Exception) -> None:
    assert not spoiled(typed(exc))
