"""Config files to typed configs and back, and the compatibility that keeps old files loading.

- `loader`: a TOML or YAML file (or the built-in demo recipe), `--set` overrides and a
  settings.json beside it -> `LLMConfig` / `ClassicConfig`, with one-line errors;
  `dump_config` writes a resolved config back.
- `aliases`: the old and the write-ups' names of keys, mapped onto today's, each with a
  warning; `settings_json`: a write-up's settings.json (API roles and their keys' variables).
- `migrate` (with `migrate_read`, `migrate_toml`): `ascent config migrate`, a foreign config
  rewritten as an ascent one with a comment on every key it moved, dropped or left unmapped;
  `secrets`: which values must never be copied into a file, a log or a message.
- `docs`: docs/config.md, generated from the sections' fields.

The schema itself (sections, defaults, field checks, cross-section rules) is ascent.config.
"""

from ascent.configfile.loader import (
    BUILTIN_SOURCE,
    AnyConfig,
    dump_config,
    load_config,
    load_run_config,
)

__all__ = ["BUILTIN_SOURCE", "AnyConfig", "dump_config", "load_config", "load_run_config"]
