"""The checks behind `ascent doctor` (a machine and a config: keys, endpoints, Ray, the
sandbox's isolation) and `ascent smoke` (one request to each API role a config names).

They read the config, the API client, the cluster runtime and the sandbox, so they sit above
all of those and below the `ascent` command alone.
"""
