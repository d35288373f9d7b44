"""The small real data sets shipped inside the package (`ascent/assets/data/`).

A config names one as `ascent:NAME` (e.g. `[eval] problems = "ascent:code_contests_sample"`),
which resolves to the installed file, so examples and tests need nothing beside the repository.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ascent.errors import AscentError

PREFIX = "ascent:"
BUNDLED = {
    "gsm8k_test": "gsm8k_test.jsonl",
    "humaneval": "humaneval.jsonl.gz",
    "code_contests_sample": "code_contests_sample.jsonl",
    "code_contests_rated": "code_contests_rated.jsonl",
}


def bundled_dir() -> Path:
    return Path(str(resources.files("ascent") / "assets" / "data"))


def bundled_path(name: str) -> Path:
    """The file of bundled data set `name` (with or without the `ascent:` prefix)."""
    key = name.removeprefix(PREFIX)
    if key not in BUNDLED:
        known = ", ".join(PREFIX + k for k in BUNDLED)
        raise AscentError(f"{name}: no such bundled data set; the bundled ones are {known}")
    return bundled_dir() / BUNDLED[key]


def resolve_data_path(spec: str) -> Path:
    """`spec` as a path: a bundled name when it starts with `ascent:`, else as written."""
    if spec.startswith(PREFIX):
        return bundled_path(spec)
    if "\0" in spec:  # no file system takes it (`~\0` would reach the user database)
        raise AscentError(f"{spec!r}: a path cannot contain a NUL character; write the path out")
    try:
        return Path(spec).expanduser()
    except RuntimeError:  # ~name of a user this machine does not have
        raise AscentError(
            f"{spec}: no home directory for '{spec.split('/')[0]}'; write the path out"
        ) from None
