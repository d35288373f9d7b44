"""Secrets: what counts as one, the one way any of it is ever shown, and where it is refused.

Every part of ascent that may quote a user's value or a server's text (config errors, `config
show`, `config migrate`'s comments, settings.json, API failures, the assistant's log, `serve`)
goes through this module, so there is one key detector and one redaction:

- a value is a secret when it is shaped like a key (`key_shaped`: a provider's prefix such as
  `sk-`, `gsk_`, `hf_`, `AIza`, or a long random-looking run) or when the name it is written
  under says so (`secret_name`: `api_key`, `hub_token`, `password`; not `api_key_env`, which
  names a variable);
- a secret prints as its first 4 characters and its length (`mask_secret`), never more;
- `redact` masks, in free text, every key-shaped word and every piece that shares 5
  characters with a known secret (the keys a process holds);
- a secret is refused where the config names something else: a key pasted as `api_key_env`
  (`check_key_env_name`, `guard_pasted_key`), a `base_url` other than a bare http(s) root
  (`check_base_url`: no credentials, query or fragment); the `[api]` and `[models.<role>]`
  sections' validators call these, and `ascent.api.roles` on a URL read from a variable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ascent.errors import one_line

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # an environment variable's name
# Prefixes providers give their keys (OpenAI sk-, Groq gsk_, Hugging Face hf_, Google AIza...).
KEY_PREFIX = re.compile(
    r"^(?:sk|pk|rk|ak|gsk|hf|fw|key)[-_][A-Za-z0-9_\-*.]{6,}|^AIza[A-Za-z0-9_\-]{20,}"
)
KEY_WORD = re.compile(r"[A-Za-z0-9_\-*.]+")  # a run of characters a key can be made of
TOKEN = re.compile(r"[^\s'\"`,;:=()\[\]{}<>]+")  # a word of free text (URLs, paths whole)
# Last words of a name whose value is a secret (`api_key`, `hub_token`, `db_password`); a
# name ending in another word holds where the secret is (`api_key_env`, `token_file`) or
# something else (`token_level_loss`).
SECRET_WORDS = frozenset(
    "key keys apikey token secret secrets password passwd pwd credential credentials "  # noqa: SIM905
    "auth authorization bearer".split()
)


def key_shaped(token: str) -> bool:
    """A known key prefix, or a long random-looking run (not a hyphenated model name)."""
    if KEY_PREFIX.match(token):
        return True
    return (
        len(token) >= 24
        and re.fullmatch(r"[A-Za-z0-9_\-]+", token) is not None
        and token.count("-") <= 2
        and any(c.isdigit() for c in token)
        and any(c.isalpha() for c in token)
    )


def looks_like_key(text: str) -> bool:
    """Where a variable's NAME belongs (`api_key_env`, `serve --api-key-env`): is this the key
    itself? Stricter than `key_shaped` about names: `OPENAI_API_KEY_2024_BACKUP` (upper case,
    a variable's shape) is a name, `sk-...` or a long mixed-case run is a key."""
    if re.match(r"^(sk|pk|rk|ak)[-_]", text, re.IGNORECASE) and len(text) >= 12:
        return True
    if not ENV_NAME.match(text):
        return len(text) >= 16 or key_shaped(text)
    return key_shaped(text) and any(c.islower() for c in text)


def mask_secret(value: str) -> str:
    """The first 4 characters of a secret and its length: all anyone may ever print of it."""
    return f"'{value[:4]}…' ({len(value)} chars)"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every word that shares 5 characters with one of `secrets`, and every
    key-shaped word, masked (`mask_secret`): for a message that may quote a user's value or
    what a server sent back."""
    grams = {s[i : i + 5] for s in secrets if s for i in range(len(s) - 4)}
    if grams:

        def known(match: re.Match[str]) -> str:
            token = match[0]
            hit = any(token[i : i + 5] in grams for i in range(len(token) - 4))
            return mask_secret(token) if hit else token

        text = TOKEN.sub(known, text)
    return KEY_WORD.sub(lambda m: mask_secret(m[0]) if key_shaped(m[0]) else m[0], text)


def secret_name(name: str) -> bool:
    """True when a key's name says its value is a secret: its last word is one (`[api]
    api_key`, `hub_token`, `settings.json [service] password`), but not `api_key_env` (a
    variable's name), `max_tokens` (a count) or `token_level_loss` (a switch)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return bool(words) and words[-1] in SECRET_WORDS


def masked(value: Any, secret: bool = False) -> Any:
    """`value` with every secret string replaced by its first 4 characters and length: a
    key-shaped string, or any string when `secret` (the value of a secret's name), also
    inside lists and tables (a table's own secret names count)."""
    if isinstance(value, str):
        return mask_secret(value) if secret or key_shaped(value) else value
    if isinstance(value, dict):
        return {
            (mask_secret(k) if isinstance(k, str) and key_shaped(k) else k): masked(
                v, secret or secret_name(str(k))
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [masked(v, secret) for v in value]
    return value


def holds_secret(value: Any, name: str = "") -> bool:
    """True when `masked` would hide part of `value` (written under `name`)."""
    secret = secret_name(name)
    if isinstance(value, str):
        return secret or key_shaped(value)
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and key_shaped(k)) or holds_secret(v, name if secret else str(k))
            for k, v in value.items()
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(holds_secret(v, name) for v in value)
    return False


def shown(value: Any, limit: int = 60, name: str = "") -> str:
    """A value for a comment or a message: JSON, one line, cut short; a secret shows 4
    characters (`masked`; `name` is the key it was written under)."""
    secret = secret_name(name)
    if isinstance(value, str) and (secret or key_shaped(value)):
        return mask_secret(value)
    if isinstance(value, str) and "\\" in value and "'" not in value:
        text = one_line(f"'{value}'")  # a TOML literal string: backslashes as written
    else:
        text = one_line(json.dumps(masked(value, secret), default=str, ensure_ascii=False))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _without_secrets(text: str) -> str:
    """`text` for a message: anything before an '@' dropped, key-shaped words masked."""
    return redact("…@" + text.rpartition("@")[2] if "@" in text else text)


def check_key_env_name(value: str, where: str) -> str:
    """Validate an `api_key_env` value: the name of a variable, never the key itself.

    An empty value means the endpoint takes no key (a local `ascent serve` or vLLM).
    """
    if value == "":
        return value
    if looks_like_key(value):
        raise ValueError(
            f"{where} api_key_env holds what looks like an API key ({mask_secret(value)}), not a "
            "variable name; put the key in an environment variable or .env and write its NAME "
            'here, e.g. api_key_env = "OPENAI_API_KEY"'
        )
    if value.startswith("$") and ENV_NAME.match(value[1:].strip("{}")):
        raise ValueError(
            f"{where} api_key_env: write the variable name without '$', "
            f'e.g. api_key_env = "{value[1:].strip("{}")}"'
        )
    if not ENV_NAME.match(value):
        raise ValueError(
            f"{where} api_key_env: {value!r} is not an environment variable name (letters, "
            'digits and _, not starting with a digit), e.g. api_key_env = "OPENAI_API_KEY"'
        )
    return value


def guard_pasted_key(table: Any, where: str) -> None:
    """Refuse a key pasted as `api_key_env`, masking it in the raw input first.

    Pydantic quotes a failing input in its own error text; masking the raw table in place
    keeps the key out of that text too, whoever prints the ValidationError.
    """
    if not isinstance(table, dict):
        return
    value = table.get("api_key_env")
    if isinstance(value, str) and looks_like_key(value):
        table["api_key_env"] = mask_secret(value)
        check_key_env_name(value, where)


def check_base_url(value: str, where: str) -> str:
    """An http(s) API root with nothing secret in it: credentials before the host
    (`https://user:KEY@host`) would be printed by `config show` and `doctor` and saved with
    the run's config, so they are refused (shown without them) in favour of api_key_env."""
    if not re.match(r"^https?://[^/\s]+", value):
        cleaned = _without_secrets(value)
        raise ValueError(
            f"{where} base_url: {repr(value) if cleaned == value else cleaned} is not an http(s) "
            "URL; write the "
            'API root, e.g. base_url = "https://openrouter.ai/api/v1" or "http://127.0.0.1:8000/v1"'
        )
    scheme, _, rest = value.partition("://")
    netloc, _, path = rest.partition("/")
    if "@" in netloc:
        host = netloc.rpartition("@")[2]
        raise ValueError(
            f"{where} base_url: '{scheme}://…@{host}' carries credentials before the host, "
            "which would be printed and saved with the config; write the root without them "
            f"('{scheme}://{host}/{_without_secrets(path)}'), put the key in an environment "
            "variable or .env and name it in api_key_env"
        )
    if "?" in value or "#" in value:
        root = re.split(r"[?#]", value, maxsplit=1)[0]  # the rest may hold a key: not shown
        raise ValueError(
            f"{where} base_url: '{root}…' carries a query string or fragment, which ascent "
            "cannot send (requests go to base_url + /chat/completions); write the API root "
            f'alone, e.g. base_url = "{root}" (for Azure OpenAI its v1 root, '
            "https://RESOURCE.openai.azure.com/openai/v1)"
        )
    return value
