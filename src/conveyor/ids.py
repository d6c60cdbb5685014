"""Job and token ids.

Job ids sort in creation order within a process: 48 bits of milliseconds, a
24-bit sequence within the millisecond, then 32 random bits. Claims break ties
by id, so this keeps FIFO order inside one ``enqueue_many`` batch.
"""

from __future__ import annotations

import os
import random
import threading
import time

_lock = threading.Lock()
#: The random tail only separates processes that share a millisecond and a
#: sequence number; ``random`` (reseeded after fork) is enough and 10x cheaper
#: than a syscall per id. Lease tokens, which must be unguessable, use urandom.
_random_bits = random.getrandbits
_last_ms = 0
_seq = 0


def new_id() -> str:
    """26 hex digits, increasing within this process (even if the clock steps back)."""
    global _last_ms, _seq
    ms = time.time_ns() // 1_000_000
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            _seq += 1
            if _seq > 0xFFFFFF:  # 16M ids in one millisecond: borrow the next one
                ms = _last_ms = ms + 1
                _seq = 0
        else:
            _last_ms = ms
            _seq = 0
        seq = _seq
    return f"{ms:012x}{seq:06x}{_random_bits(32):08x}"


def new_ids(count: int) -> list[str]:
    """``count`` ids for one batch: one clock read and one lock for all of them."""
    global _last_ms, _seq
    if count <= 0:
        return []
    if count > 0xFFFF:  # a sequence range this large could pass the 24-bit field
        return [new_id() for _ in range(count)]
    ms = time.time_ns() // 1_000_000
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            first = _seq + 1
        else:
            _last_ms = ms
            first = 0
        if first + count > 0xFFFFFF:  # borrow the next millisecond
            ms = _last_ms = ms + 1
            first = 0
        _seq = first + count - 1
    prefix = f"{ms:012x}"
    tail = f"{_random_bits(32):08x}"  # one per batch: prefix + sequence already differ
    return [f"{prefix}{seq:06x}{tail}" for seq in range(first, first + count)]


def new_token() -> str:
    """A lease token: unguessable, unique per claim."""
    return os.urandom(8).hex()
