"""The fake API key tests pass around to prove it never leaks.

Built at import time from a fixed seed rather than written out, so that no key-shaped string
stands in the repository for a scanner (or a reader) to mistake for a real one. It is long and
random enough that a leak of any 5 characters past the 4 that may be shown is detectable, and
starts "sk-Z" with 32 characters in all, as the masked form tests expect: 'sk-Z…' (32 chars).
"""

from __future__ import annotations

import random
import string

FAKE_KEY = "sk-Z" + "".join(random.Random(2026).choices(string.ascii_letters + string.digits, k=28))
